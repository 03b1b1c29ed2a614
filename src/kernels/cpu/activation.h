// SwiGLU's elementwise step on the CPU, out[i] = silu(gate[i]) * up[i] with silu(g) = g / (1 + exp(-g)),
// compiled once per ISA and picked at run time (as attention.h). kRef is kernels::ref::silu_mul
// (std::exp); the SIMD levels share one AVX2+FMA body (activation_avx2.cc): exp(-|g|) by the
// attention kernel's Cephes exp (~2 ulp, simd_avx2.h), then g / (1 + e) for g >= 0 and g e / (1 + e)
// below, so no exp overflows. Within a few ulp of the reference for finite inputs; NaN and +-inf
// give what the reference gives. Elementwise: results do not depend on how a caller splits the rows.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace kiln::kernels::cpu {

// out [n] = silu(gate [n]) * up [n]; out may alias gate or up.
using SiluMulFn = void (*)(const float* gate, const float* up, float* out, int64_t n);

// Kernel compiled for `isa`; kRef (kernels/ref's silu_mul) always exists. Does not check
// isa_supported. Defined, with best_silu_mul_kernel, in kernels/select.
SiluMulFn find_silu_mul_kernel(Isa isa);
// The kernel of best_isa().
SiluMulFn best_silu_mul_kernel();

// Internal: what activation_avx2.cc exports (kernels/select dispatches).
SiluMulFn avx2_silu_mul_kernel();

}  // namespace kiln::kernels::cpu
