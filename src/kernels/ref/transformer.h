// Scalar reference ops of a Llama-family transformer in fp32, written llm.c style: plain loops,
// one output element at a time, fixed summation order. They are the oracle the threaded ops
// (src/ops) and any SIMD/CUDA kernel are tested against, and the portable fallback.
// The range variants (matmul_tile, attention_rows) compute a sub-block with exactly the arithmetic
// of the full op, so any split of the work across threads gives bit-identical results.
// RoPE follows Meta's interleaved-pair convention (pairs (2i, 2i+1) of each head, kiln's canonical
// Q/K order; see model/weight_names.h); llama3 frequency scaling follows transformers
// modeling_rope_utils._compute_llama3_parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace kiln::kernels::ref {

// A weight matrix W [rows, cols] stored row-major in any dtype dequantize_row supports; a row is
// row_bytes = dtype_bytes(dtype, cols) bytes. Rows are dequantized one at a time when used.
struct WeightView {
    const void* data = nullptr;
    core::DType dtype = core::DType::kF32;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_bytes = 0;
    // I8 weights only (W8A8 per output channel): row r's values are int8 * row_scale[r]. Other
    // dtypes carry their scales in their blocks.
    const float* row_scale = nullptr;
};
// True when weight_row can decode w: a dtype dequantize_row decodes, or I8 with row scales.
bool weight_view_supported(const WeightView& w);
// Fills row_bytes; KILN_CHECKs that cols is a whole number of blocks.
WeightView make_weight_view(const void* data, core::DType dtype, int64_t rows, int64_t cols);

// Dequantizes row `row_idx` of w into dst [w.cols].
void weight_row(const WeightView& w, int64_t row_idx, float* dst);

// y [n] = x [n] / sqrt(mean(x^2) + eps) * weight [n]. x and y may alias.
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// y [M, N] = x [M, K] @ W[N, K]^T (+ bias [N] when not null).
void matmul(const float* x, const WeightView& w, const float* bias, float* y, int64_t m);
// The block y[m_begin:m_end, n_begin:n_end] of matmul; each W row is dequantized once per call.
void matmul_tile(const float* x, const WeightView& w, const float* bias, float* y, int64_t m, int64_t m_begin,
                 int64_t m_end, int64_t n_begin, int64_t n_end);

// RoPE frequency setup as plain numbers (from ModelConfig's rope_theta / rope_scaling).
enum class RopeScalingKind { kNone, kLinear, kLlama3 };
struct RopeParams {
    double theta = 10000.0;
    RopeScalingKind scaling = RopeScalingKind::kNone;
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 0;
};
// inv_freq [head_dim / 2]: theta^(-2i/head_dim), scaled per `p`.
std::vector<double> rope_inv_freqs(int64_t head_dim, const RopeParams& p);
// Rotates x [num_tokens, num_heads, head_dim] in place; token t is at position positions[t].
void rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, const int32_t* positions,
          const std::vector<double>& inv_freq);

// out [n] = silu(gate [n]) * up [n] (SwiGLU). out may alias gate or up.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// In place, numerically stable (max subtracted).
void softmax(float* x, int64_t n);

// One sequence's cached keys and values for one layer. A row is num_kv_heads * head_dim floats.
//  - contiguous (block_table null): row j holds the token at position j;
//  - paged (block_table set; vLLM's PagedAttention layout): k and v point at a layer's block pool,
//    the token at position j sits in row kv_row(kv, j), slot j % block_size of physical block
//    block_table[j / block_size]. block_size > 0; block_table holds ceil(kv_len / block_size)
//    entries, each a block of the pool. Slots past kv_len in the last block are never read.
// Both layouts give bit-identical attention results for the same tokens: only addresses change.
// Elements are f32, or IEEE half when f16 (the f16 KV cache: half the memory and traffic; the
// kernels widen each row to f32 exactly, so the result equals the f32 kernel on the rounded cache).
struct KvSpan {
    // contiguous: [kv_len, num_kv_heads, head_dim]; paged: [num_blocks, block_size, num_kv_heads, head_dim]
    const void* k = nullptr;
    const void* v = nullptr;  // same layout as k
    int64_t kv_len = 0;       // tokens cached, the new ones included
    // Paged when non-null: [ceil(kv_len / block_size)] physical block of each logical block.
    const int32_t* block_table = nullptr;
    int64_t block_size = 0;  // tokens per block when paged
    bool f16 = false;        // elements are IEEE half instead of f32
};
// Row of key/value j in k/v (units of num_kv_heads * head_dim floats).
inline int64_t kv_row(const KvSpan& kv, int64_t j) {
    return kv.block_table ? int64_t(kv.block_table[j / kv.block_size]) * kv.block_size + j % kv.block_size : j;
}
// Element i of a K or V array (f32 or f16 per kv.f16).
float kv_elem(const KvSpan& kv, const void* base, int64_t i);
struct AttentionShape {
    int64_t num_tokens = 0;  // new tokens, at positions kv_len - num_tokens .. kv_len - 1
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;  // num_heads is a multiple (GQA)
    int64_t head_dim = 0;
    int64_t window = 0;  // sliding window (token attends to pos - window < j <= pos); 0 = full
};
// Causal GQA attention, softmax(q k^T / sqrt(head_dim)) v.
// q [num_tokens, num_heads, head_dim] -> out [num_tokens, num_heads, head_dim].
void attention(const float* q, const KvSpan& kv, const AttentionShape& s, float* out);
// Rows [row_begin, row_end) of attention, row = token_idx * num_heads + head_idx. scores: scratch
// of kv_len floats.
void attention_rows(const float* q, const KvSpan& kv, const AttentionShape& s, float* out, int64_t row_begin,
                    int64_t row_end, float* scores);

}  // namespace kiln::kernels::ref
