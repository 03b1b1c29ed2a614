// Causal GQA attention for a ragged batch of sequences in one call: each sequence has its own new
// query tokens (a contiguous run of the batch's rows) and its own K/V cache (contiguous, or paged
// through a block table: kernels::KvSpan). Serves prefill of new tokens on top of a cached
// prefix, chunked prefill and decode alike.
//
// Batch invariance (what the serving engine's "a request's output does not depend on its batch"
// rests on): the arithmetic of a query row depends only on its q, its keys/values and its position,
// never on the other rows of the batch, on how many of its sequence's tokens run in this call
// (chunking), on the thread count or on the task decomposition:
//  - a row's keys are cut at absolute multiples of kAttentionSplitKeys; each split is reduced by the
//    tiled online-softmax kernel (kernels/cpu/attention.h, whose per-row result depends only on the
//    row's key range) into a partial (o_s, lse_s);
//  - partials are merged in split order by merge_partial (below), whether they were computed in one
//    task (prefill tiles) or in parallel tasks (decode: flash-decoding over the splits).
// A row with a single split gets that split's output unchanged (then the sink's scale, if any).
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/transformer.h"

namespace kiln::ops {

inline constexpr int64_t kAttentionSplitKeys = 256;  // keys per split (a multiple of the kernel's block)

// One sequence of the batch.
struct AttentionSeq {
    kernels::KvSpan kv;  // its cache, the new tokens' K/V already written; kv.kv_len >= num_tokens
    int64_t q_start = 0;      // first row of the sequence in q / out
    int64_t num_tokens = 0;   // new tokens, at positions kv.kv_len - num_tokens .. kv.kv_len - 1
};

struct AttentionHeads {
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;  // num_heads is a multiple (GQA)
    int64_t head_dim = 0;
    int64_t window = 0;  // sliding window (pos - window < j <= pos); 0 = full causal
    float softcap = 0.0f;  // score soft-capping (kernels::AttentionShape::softcap); 0 = none
    // Attention sinks (gpt-oss): head h's softmax has one more term, exp(sinks[h]), in its denominator
    // and no value: a row's output is scaled by 1 / (1 + exp(sinks[h] - lse)) once its splits are
    // merged (lse: the log-sum-exp of its scores). Null: none.
    const float* sinks = nullptr;
};

// q, out [num_rows, num_heads, head_dim] (must not overlap); every sequence's rows
// [q_start, q_start + num_tokens) lie within num_rows and are disjoint from the others'.
// kInvalidArgument on a bad shape or range. isa picks the kernel (kernels/cpu/attention.h; the
// AVX-512 one serves kAvx512Vnni); kUnsupported when this CPU cannot run it.
core::Status batch_attention(core::ThreadPool& pool, const float* q, int64_t num_rows,
                             std::span<const AttentionSeq> seqs, const AttentionHeads& heads, float* out,
                             kernels::cpu::Isa isa = kernels::cpu::best_isa());

// One step of the in-order merge of split partials for a row of head_dim values: (o, lse) is the
// running result (lse = -inf: none yet), (o_s, lse_s) the next split's normalized output and
// log-sum-exp. Skips empty splits (lse_s = -inf); the first non-empty split is copied exactly.
void merge_partial(float* o, float* lse, const float* o_s, float lse_s, int64_t head_dim);

}  // namespace kiln::ops
