// The sampler's softmax on the CPU, compiled once per ISA and picked at run time (as activation.h):
// scale_max applies the temperature (x[i] *= s, NaN -> -inf) and returns the largest; exp_shift makes
// p[i] = exp(x[i] - m) with the sums of p in blocks of kExpBlock entries. kRef is kernels::ref's
// scale_max / exp_shift (std::exp, sums in double, in order); the SIMD levels share one AVX2+FMA
// body (softmax_avx2.cc): the scaling and max exactly as the reference, the attention kernel's
// Cephes exp (~2 ulp, simd_avx2.h), each block summed in double in a fixed order. x[i] <= m or -inf
// (NaN counts as -inf); those give p = 0. A row's result depends on nothing but that row.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace kiln::kernels::cpu {

using kernels::kExpBlock;  // kernel_params.h: shared with kernels::ref's exp_shift

// x [n] = x * s (NaN: -inf); returns max x (-inf when all are).
using ScaleMaxFn = float (*)(float* x, float s, int64_t n);
// p [n] = exp(x [n] - m); block_sums [ceil(n / kExpBlock)] = each block's sum of p (double).
using ExpShiftFn = void (*)(const float* x, float m, float* p, double* block_sums, int64_t n);
struct SoftmaxKernels {
    ScaleMaxFn scale_max;
    ExpShiftFn exp_shift;
};

// Kernels compiled for `isa` (null members: none); kRef always exists. Defined, with
// best_softmax_kernels, in kernels/select.
SoftmaxKernels find_softmax_kernels(Isa isa);
// The kernels of best_isa().
SoftmaxKernels best_softmax_kernels();

// Internal: what softmax_avx2.cc exports (kernels/select dispatches).
SoftmaxKernels avx2_softmax_kernels();

}  // namespace kiln::kernels::cpu
