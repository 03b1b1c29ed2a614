// RMSNorm on the GPU, with the residual add fused in (kernels/ref rmsnorm; Llama's
// x += branch_output; xn = rmsnorm(x) * weight before each block). One thread block per row; the
// sum of squares is a block reduction, so results equal the reference within fp32 rounding of a
// different summation order. Activations f32 or bf16 (bf16: x is rounded to bf16 when stored and
// normalized as stored), weights and arithmetic f32. Host code can call these from plain C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

// For each of `rows` rows of n: if add is not null, x += add (x updated in place); then
// y = x / sqrt(mean(x^2) + eps) * weight. x, add, y: [rows, n] device pointers; weight [n] (f32).
// y may alias x. kInvalidArgument on bad sizes or null pointers; launch errors as Status.
core::Status add_rmsnorm(float* x, const float* add, const float* weight, float* y, int64_t rows, int64_t n, float eps,
                         cudaStream_t stream = nullptr);
core::Status add_rmsnorm(__nv_bfloat16* x, const __nv_bfloat16* add, const float* weight, __nv_bfloat16* y,
                         int64_t rows, int64_t n, float eps, cudaStream_t stream = nullptr);
// An f32 residual stream, y rounded once to the 16-bit input type of the GEMM that follows (the
// f32 overload's values, rounded to nearest even).
core::Status add_rmsnorm(float* x, const float* add, const float* weight, __nv_bfloat16* y, int64_t rows, int64_t n,
                         float eps, cudaStream_t stream = nullptr);
core::Status add_rmsnorm(float* x, const float* add, const float* weight, __half* y, int64_t rows, int64_t n, float eps,
                         cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
