// AVX-512 (F/BW/VL/DQ, no VNNI) build of the matmul kernels (flags: src/kernels/CMakeLists.txt): the
// same 256-bit kernel bodies as matmul_avx2.cc; the compiler may use EVEX encodings and the 32
// vector registers, which relieves register pressure in the (weight rows x activation rows) tiles.
// For Skylake-SP class CPUs; selected only when isa_supported(Isa::kAvx512).
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_float_packed.h"
#include "kernels/cpu/simd_fp4_kernels.h"
#include "kernels/cpu/simd_fp8_kernels.h"
#include "kernels/cpu/simd_i8_kernels.h"
#include "kernels/cpu/simd_iq4_kernels.h"
#include "kernels/cpu/simd_kquant_kernels.h"
#include "kernels/cpu/simd_legacy_kernels.h"
#include "kernels/cpu/simd_tq_kernels.h"

namespace kiln::kernels::cpu {

const MatmulKernel* avx512_matmul_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kI8) return &kI8Dot;  // simd_i8_kernels.h
    if (const MatmulKernel* k = simd_legacy_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_fp4_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_iq4_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_tq_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_fp8_kernel(weight_type)) return k;
    return simd_kquant_kernel(weight_type);
}

const PackedMatmulKernel* avx512_packed_kernel(core::DType weight_type) {
    if (const PackedMatmulKernel* k = float_packed_kernel(weight_type)) return k;  // simd_float_packed.h
    return simd_packed_kernel(weight_type);
}

}  // namespace kiln::kernels::cpu
