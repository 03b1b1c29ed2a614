// Decode attention on the GPU over kiln's paged KV pool (docs/kv.md): one new token per sequence,
// causal, GQA-aware (each thread block serves all query heads of one KV head, so K/V are read once
// per KV head), split-KV (FlashDecoding): keys in splits of kDecodeSplitKeys (or more, with a fixed
// split count), each split's partial
// (normalized output and log-sum-exp) combined by a second kernel. Online softmax in f32; K/V rows
// of any KvDtype as the CPU caches store them (f32, f16, int8 / fp8 codes widened times their
// per-head scale). The reference is kernels/ref attention
// (kernels::ref::KvSpan, paged). Callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "kernels/kernel_params.h"

namespace kiln::kernels::cuda {

inline constexpr int64_t kDecodeSplitKeys = 256;

// Device pointers; shapes in the comments.
struct DecodeAttentionBatch {
    const void* k = nullptr;  // [num_blocks, block_size] rows of dtype (kernels/kernel_params.h)
    const void* v = nullptr;  // same layout
    KvDtype dtype = KvDtype::kF32;
    int64_t block_size = 0;
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] physical block ids
    int64_t max_blocks_per_seq = 0;
    const int32_t* kv_lens = nullptr;  // [num_seqs] tokens cached, the new one included (>= 1)
    // [num_seqs] the row of block_tables each query uses, or null (query i uses row i). With it a
    // prompt chunk runs as one query per token: its kv_len is the token's position + 1 and every
    // token of a sequence shares that sequence's row (causal attention over the paged cache).
    const int32_t* table_rows = nullptr;
    // [num_seqs] the row of q and out each query reads and writes, or null (query i: row i). With
    // it the decode tokens of a batch whose prompt chunks go to prefill_attention run in one launch.
    const int32_t* q_rows = nullptr;
    int64_t num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int64_t window = 0;      // sliding window (pos - window < j <= pos); 0 = full causal
    int64_t max_kv_len = 0;  // >= every kv_lens[i]: sizes the split grid (host-known bound)
    // Splits per query; 0: ceil(max_kv_len / kDecodeSplitKeys). A query of kv_len keys spreads them
    // over the splits in runs of max(kDecodeSplitKeys, ceil(kv_len / num_splits)); splits past its
    // keys only mark themselves empty. A fixed count keeps a CUDA graph's grid small for long
    // contexts whatever the lengths at replay.
    int64_t num_splits = 0;
};

// ok when decode_attention runs these heads (head_dim 8, 16, 32, 64 or 128; at most 16 query heads
// per KV head), else kUnsupported saying what is built: for a model's load-time check.
core::Status decode_attention_supports(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim);

// Floats of workspace decode_attention needs for this batch.
size_t decode_attention_workspace_floats(const DecodeAttentionBatch& b);

// out [num_seqs, num_heads, head_dim] = softmax(q k^T / sqrt(head_dim)) v for q of the same shape
// (with q_rows: rows q_rows[i] of q and out, which may hold more rows)
// (f32). head_dim 8, 16, 32, 64 or 128 and num_heads / num_kv_heads <= 16 (else kUnsupported);
// num_seqs <= 65535 (one grid dimension);
// kInvalidArgument on other bad shapes or null pointers.
core::Status decode_attention(const float* q, const DecodeAttentionBatch& b, float* out, float* workspace,
                              cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
