// RoPE on the GPU, kiln's convention (kernels/ref rope): interleaved pairs (2i, 2i+1) of each head
// rotated by angle = position * inv_freq[i], the angle and its sine and cosine in double (as the
// reference; exact to float rounding at any position), the rotation in f32. f32 or bf16
// activations. Callable from plain C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

// Rotates x [num_tokens, num_heads, head_dim] in place (row stride row_stride elements >=
// num_heads * head_dim, so q or k can be rotated inside a fused qkv row); token t is at
// positions[t] (int32 [num_tokens]); inv_freq double [head_dim / 2]. Device pointers.
core::Status rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                  const int32_t* positions, const double* inv_freq, cudaStream_t stream = nullptr);
core::Status rope(__nv_bfloat16* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                  const int32_t* positions, const double* inv_freq, cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
