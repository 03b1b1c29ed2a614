// Fast CPU attention for ops::attention: causal GQA attention over one sequence's f32 KV cache
// (kernels::KvSpan, contiguous or paged), tiled with an online softmax (FlashAttention-2, Dao
// 2023; online normalizer, Milakov & Gimelshein 2018), compiled once per ISA and picked at run time.
// Keys and values are located only through kv_row, and the arithmetic never depends on where a
// row lives, so a paged cache gives results bit-identical to the same tokens stored contiguously.
//
// A task is (kv_head, query tokens [t0, t1), keys [j0, j1)): it computes every query head of
// kv_head's group for those tokens, streaming K/V in blocks of kAttentionBlockKeys keys, so one
// pass over a K/V block serves all (t1 - t0) * group query rows. Per row it keeps the running max
// m, the running sum l and the unnormalized output (held in `out` itself), rescaling by
// exp(m_old - m_new) whenever the max grows.
//
// Invariants (what makes results independent of how a caller tiles the work):
//  - key blocks are aligned to absolute positions (multiples of kAttentionBlockKeys), and a row's
//    arithmetic depends only on its own key range, so for fixed [j0, j1) a row's result does not
//    depend on t0, t1 or on which thread runs the task: bit-identical across thread counts;
//  - token t (position pos = kv_len - num_tokens + t) attends to keys j with lo <= j <= pos,
//    lo = max(0, pos - window + 1) when window > 0 else 0 (exactly kernels::ref::attention),
//    intersected with [j0, j1). A row with no key in range gets out = 0 and lse = -inf.
//  - kernels never allocate; the caller passes scratch of attention_scratch_floats() floats.
// Split-KV (flash-decoding): tasks over disjoint key ranges write partial outputs + lse; then
// attention_merge combines them: out = sum_i exp(lse_i - M) O_i / sum_i exp(lse_i - M).
// ISAs: kRef (scalar loops of the same algorithm, any head_dim, attention.cc); kAvx2 (AVX2+FMA,
// attention_avx2.cc; head_dim multiples of 8 are fully vectorized, other head_dims add a scalar
// tail); kAvx512 and kAvx512Vnni share one AVX-512 build of the same body (attention_avx512.cc,
// simd_attention.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/kernel_params.h"

namespace kiln::kernels::cpu {

inline constexpr int64_t kAttentionBlockKeys = 64;  // keys per K/V block (fits L1 with hd <= 64)
inline constexpr int kAttentionMaxRows = 4;           // rows per register block (scratch: one score row each)

struct AttentionTask {
    int64_t kv_head = 0;
    int64_t t0 = 0, t1 = 0;  // query tokens [t0, t1), 0 <= t0 <= t1 <= num_tokens
    int64_t j0 = 0, j1 = 0;  // keys considered: [j0, j1) ∩ each token's causal/window range
};

// For t in [t0, t1) and every head h of kv_head's group (q row (t, h) at q + (t * num_heads + h) *
// head_dim, q [num_tokens, num_heads, head_dim]: absolute token index):
//   out [t1 - t0, num_heads, head_dim]: row (t, h) at out + ((t - t0) * num_heads + h) * head_dim
//     = softmax-weighted sum of V over the keys in range (normalized over those keys only; zeros
//     when there are none);
//   lse [t1 - t0, num_heads] (may be null): lse[(t - t0) * num_heads + h] = log(sum_j exp(q.k_j /
//     sqrt(head_dim))) over them, -inf when there are none.
// out and lse are addressed relative to the task's first token, so a caller may give each task a
// private buffer of (t1 - t0) token rows, or share one [num_tokens, ...] buffer by passing
// out + t0 * num_heads * head_dim and lse + t0 * num_heads. Rows of other heads are not touched, so
// tasks with disjoint (kv_head, tokens) may share a buffer.
// q must not overlap out (out rows are cleared before q is read);
// scratch: attention_scratch_floats(s, t1 - t0) floats.
using AttentionFn = void (*)(const float* q, const KvSpan& kv, const AttentionShape& s,
                             const AttentionTask& task, float* out, float* lse, float* scratch);

// Scratch floats one task of at most max_task_tokens tokens needs.
size_t attention_scratch_floats(const AttentionShape& s, int64_t max_task_tokens);

// Kernel compiled for `isa`; nullptr when this build has none. Does not check isa_supported.
AttentionFn find_attention_kernel(Isa isa);
// The kernel of best_isa() (kRef's when no SIMD kernel is built for it).
AttentionFn best_attention_kernel();

// Combines num_splits partial results of the same rows over disjoint key ranges:
// part_out [num_splits, num_rows, head_dim], part_lse [num_splits, num_rows] -> out [num_rows, head_dim]
// (row i of the result to out + i * out_row_stride). Rows whose every lse is -inf get zeros.
void attention_merge(const float* part_out, const float* part_lse, int64_t num_splits, int64_t num_rows,
                     int64_t head_dim, float* out, int64_t out_row_stride);

// Internal: the lookups attention_avx2.cc / attention_avx512.cc export (attention.cc dispatches).
AttentionFn avx2_attention_kernel();
AttentionFn avx512_attention_kernel();

}  // namespace kiln::kernels::cpu
