// Threaded CPU front-ends of the transformer ops: each validates its arguments (kInvalidArgument /
// kUnsupported, never an abort) and splits the work across a core::ThreadPool. The split depends only
// on the shapes (never on timing), so results are bit-identical for any thread count. matmul,
// rmsnorm and rope run the kernels/ref arithmetic, silu_mul kernels/cpu/activation.h; attention runs ops::batch_attention
// (the kernels/cpu tiled online-softmax kernel, equal to the reference within fp32 rounding). Weight matmuls of the
// models go through ops/linear.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/transformer.h"

namespace kiln::ops {

using kernels::ref::AttentionShape;
using kernels::ref::KvSpan;
using kernels::ref::WeightView;

// y [m, w.rows] = x [m, w.cols] @ W^T (+ bias [w.rows]). Parallel over row blocks of W and of x.
core::Status matmul(core::ThreadPool& pool, const float* x, int64_t m, const WeightView& w, const float* bias,
                    float* y);

// Each of the m rows of x [m, n]: y = rmsnorm(x) * weight [n]. Parallel over rows.
core::Status rmsnorm(core::ThreadPool& pool, const float* x, const float* weight, float* y, int64_t m, int64_t n,
                     float eps);

// The residual add fused with the next RMSNorm, row by row: x += delta, then y = rmsnorm(x) * weight
// (x, delta, y [m, n]); one pass over each row instead of two. The same bits as the two ops apart.
core::Status add_rmsnorm(core::ThreadPool& pool, float* x, const float* delta, const float* weight, float* y, int64_t m,
                         int64_t n, float eps);

// x [num_tokens, num_heads, head_dim] rotated in place at positions [num_tokens].
core::Status rope(core::ThreadPool& pool, float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                  const int32_t* positions, const std::vector<double>& inv_freq);

// out [n] = silu(gate) * up, by the kernels/cpu/activation.h kernel of `isa` (kRef: bit-identical to
// kernels::ref::silu_mul; kUnsupported when the CPU lacks isa).
core::Status silu_mul(core::ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n,
                      kernels::cpu::Isa isa = kernels::cpu::best_isa());
// Row-wise, for gate and up side by side: out [m, n] = silu(gate_up[:, :n]) * gate_up[:, n:],
// gate_up [m, 2n] (the output of a gate/up linear_group). ops::linear_swiglu fuses this into the
// gate/up products.
core::Status silu_mul_rows(core::ThreadPool& pool, const float* gate_up, float* out, int64_t m, int64_t n,
                           kernels::cpu::Isa isa = kernels::cpu::best_isa());

// Causal GQA attention over one sequence's cache; q, out [num_tokens, num_heads, head_dim] (out may
// alias q). One sequence of ops::batch_attention.
core::Status attention(core::ThreadPool& pool, const float* q, const KvSpan& kv, const AttentionShape& s, float* out,
                       kernels::cpu::Isa isa = kernels::cpu::best_isa());

}  // namespace kiln::ops
