// Prefill attention on tensor cores over kiln's paged KV pool (issue "CUDA backend": prompt chunks,
// FlashAttention-2 style). Each thread block takes a tile of 64 consecutive queries of one sequence
// and one query head (4 warps x 16 rows); it walks the sequence's keys in tiles of 64, copies each K
// and V tile from the pool's blocks into shared memory with cp.async, computes S = Q K^T and O += P V
// with mma.sync m16n8k16 (f16 inputs, f32 accumulation) and keeps an online softmax per row in
// registers (Dao 2023, "FlashAttention-2", Algorithm 1). Causal (query at position p sees keys
// <= p), an optional sliding window, GQA (query head h reads KV head h / (num_heads / num_kv_heads)).
// q is f32 (rounded to f16 for the tensor cores: |q| must stay under 65504), K/V are the pool's IEEE
// halves, out is f32. Needs sm_80 or later (mma.m16n8k16, cp.async). The
// reference is kernels/ref attention; expect f16 rounding of q and of the probabilities (about 1e-3
// relative). Callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

inline constexpr int64_t kPrefillTileQueries = 64;

// Device pointers; shapes in the comments. Sequences are those of the step; only the ones named by
// a tile are read.
struct PrefillAttentionBatch {
    const void* k = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] IEEE half
    const void* v = nullptr;  // same layout
    int64_t block_size = 0;
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    int64_t max_blocks_per_seq = 0;
    const int32_t* q_starts = nullptr;     // [num_seqs] row of q / out holding the sequence's first query
    const int32_t* positions0 = nullptr;   // [num_seqs] position of that query (tokens cached before it)
    const int32_t* num_queries = nullptr;  // [num_seqs] queries of the sequence in this batch
    const int32_t* tile_seqs = nullptr;    // [num_tiles] the sequence of each tile
    const int32_t* tile_q0 = nullptr;      // [num_tiles] its first query, counted from the sequence's first
    int64_t num_tiles = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int64_t window = 0;  // sliding window (pos - window < j <= pos); 0 = full causal
};

// ok when prefill_attention runs these heads: head_dim 64 or 128, num_heads a multiple of
// num_kv_heads; kUnsupported otherwise.
core::Status prefill_attention_supports(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim);

// out rows of the tiles' queries [.., num_heads, head_dim] = softmax(q k^T / sqrt(head_dim)) v for q
// of the same layout (f32; rows of other queries are left untouched). kInvalidArgument for bad
// sizes or null pointers, kUnsupported for other head shapes.
core::Status prefill_attention(const float* q, const PrefillAttentionBatch& b, float* out,
                               cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
