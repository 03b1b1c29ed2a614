// Dequantizing GEMV for GGML block weights on the GPU (decode: a few tokens), the weight-only path
// for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q2_K - Q6_K (issue "CUDA backend": own kernels for 8-
// and 4-bit weights): y [m, n] =
// x [m, k] @ W^T with W [n, k] in the checkpoint's own blocks (Q8_0: fp16 d + 32 int8, x = d q;
// Q4_0: fp16 d + 16 bytes of nibbles, element j low nibble of byte j, element j + 16 high, x =
// d (q - 8); Q4_1: fp16 d, fp16 m, the same nibbles, x = d q + m; the K-quants' 256-element
// super-blocks decoded 32 elements at a time; ggml's layouts, kernels/ref/dequant.cc), f32
// activations and accumulation. One warp per
// weight row, lanes over its blocks, every token of the batch per weight read (m <= 8). The
// reference is kernels/ref matmul on the same blocks. Callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::kernels::cuda {

inline constexpr int64_t kGemvMaxTokens = 8;

// w: n rows of blocks of `type` (kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1; kQ2_K - kQ6_K with k a multiple of 256;
// else kUnsupported); x [m, k], y [m, n] f32;
// device pointers. k a multiple of 32, 1 <= m <= kGemvMaxTokens (m = 0: nothing), else
// kInvalidArgument.
core::Status gemv_blocks(core::DType type, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y,
                         cudaStream_t stream = nullptr);
bool gemv_blocks_supports(core::DType type);

// out [num_elements] = the blocks decoded to f32 (the exact values kernels/ref dequantize_row gives):
// prompt-sized GEMMs multiply the decoded copy of one matrix at a time. num_elements a multiple
// of 32.
core::Status dequantize_blocks(core::DType type, const void* w, int64_t num_elements, float* out,
                               cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
