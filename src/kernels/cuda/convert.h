// Element-wise helpers of the GPU forward pass: f32 activations rounded to the 16-bit type of a
// weight before a cuBLASLt GEMM (cuBLASLt multiplies like-typed inputs), a bias added to every row,
// and rows gathered by index. Round to nearest even, as core::f32_to_bf16 / f32_to_fp16 on the host.
// Callable from plain C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

// y[i] = round(x[i]) for n elements (device pointers). kInvalidArgument for n < 0 or null pointers.
core::Status convert(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream = nullptr);
core::Status convert(const float* x, __half* y, int64_t n, cudaStream_t stream = nullptr);
// The same to f16, finite values past half's range clamped to +-65504 instead of becoming inf (NaN
// stays NaN): activations for a GEMM whose f32 path had no such limit (gemm_blocks).
core::Status convert_saturating(const float* x, __half* y, int64_t n, cudaStream_t stream = nullptr);

// y [rows, n] += bias [n] on every row.
core::Status add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream = nullptr);

// dst [num_rows, n] = src [row_ids[i], :] (int32 device ids, each in [0, src_rows): the caller's
// invariant, checked on the host before the step).
core::Status gather_rows(const float* src, int64_t n, const int32_t* row_ids, int64_t num_rows, float* dst,
                         cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
