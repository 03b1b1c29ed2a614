// Scalar reference ops of a Llama-family transformer in fp32, written llm.c style: plain loops,
// one output element at a time, fixed summation order. They are the oracle the threaded ops
// (src/ops) and any SIMD/CUDA kernel are tested against, and the portable fallback.
// The range variants (matmul_tile, attention_rows) compute a sub-block with exactly the arithmetic
// of the full op, so any split of the work across threads gives bit-identical results.
// RoPE follows Meta's interleaved-pair convention (pairs (2i, 2i+1) of each head, kiln's canonical
// Q/K order; see loader/weight_names.h); llama3 frequency scaling follows transformers
// modeling_rope_utils._compute_llama3_parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernel_params.h"

namespace kiln::kernels::ref {

// The shared structs live in the neutral kernels header; the reference's own names for them.
using kernels::AttentionShape;
using kernels::kv_row;
using kernels::KvSpan;
using kernels::RopeParams;
using kernels::RopeScalingKind;
using kernels::WeightView;

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

// inv_freq [head_dim / 2]: theta^(-2i/head_dim), scaled per `p`.
std::vector<double> rope_inv_freqs(int64_t head_dim, const RopeParams& p);
// Rotates x [num_tokens, num_heads, head_dim] in place; token t is at position positions[t].
void rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, const int32_t* positions,
          std::span<const double> inv_freq);

// out [n] = silu(gate [n]) * up [n] (SwiGLU). out may alias gate or up.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// In place, numerically stable (max subtracted).
void softmax(float* x, int64_t n);

// Causal GQA attention, softmax(q k^T / sqrt(head_dim)) v.
// q [num_tokens, num_heads, head_dim] -> out [num_tokens, num_heads, head_dim].
void attention(const float* q, const KvSpan& kv, const AttentionShape& s, float* out);
// Rows [row_begin, row_end) of attention, row = token_idx * num_heads + head_idx. scores: scratch
// of kv_len floats.
void attention_rows(const float* q, const KvSpan& kv, const AttentionShape& s, float* out, int64_t row_begin,
                    int64_t row_end, float* scores);

}  // namespace kiln::kernels::ref
