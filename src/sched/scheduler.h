// Scheduler: iteration-level continuous batching (Orca; vLLM v1 / nano-vllm style) over a paged KV cache.
// Pure host code, deterministic: each schedule() builds one model step from the queued sequences, and
// complete() records what the step produced. See docs/kv.md "Scheduler".
//
// Every sequence has len tokens (prompt + generated) and computed tokens whose KV is cached; a step runs
// tokens [computed, computed + n) of it and, when that reaches len, samples its next token.
// Rules of schedule():
// - Running sequences (admitted, holding blocks) come first in admission order: those needing one token
//   (decode) before those with a partial prompt (chunked prefill), each getting min(need, budget left).
//   Then waiting sequences are admitted FCFS without skipping, each getting min(need, budget left).
// - A sequence gets blocks covering start + num_tokens before it is scheduled. When the pool runs dry, a
//   running sequence preempts the most recently admitted running sequence not in this step (or itself):
//   preemption by recompute, the victim's blocks are released and it goes to the front of the waiting
//   queue with all its tokens. A waiting sequence that cannot get its blocks stops admission.
// - At admission a sequence with nothing computed takes its longest cached prefix of full blocks from the
//   prefix cache, keeping at least one token to run (its logits are needed).
// - Speculative decoding: a decoding sequence given a draft length (set_draft) also runs that many
//   proposed tokens after its last one, as far as the budget and the free blocks left by the running
//   sequences (before admission) and its max_len allow: a draft never causes a preemption. complete() keeps the accepted ones: the KV of rejected drafts
//   is dropped by rolling `computed` back, and blocks past the kept tokens are released.
// Invariants: a step never exceeds max_batch_tokens or max_seqs; the pool is never exceeded; every
// sequence is either waiting (holds no blocks, computed == 0) or running (holds exactly
// ceil(covered / block_size) blocks); blocks of removed sequences are released at once; only KV of
// tokens in tokens() (never of a draft) is counted as computed or published to the prefix cache.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace kiln::sched {

using SeqId = int64_t;

struct SchedulerConfig {
    int32_t num_blocks = 0;          // KV blocks in the pool (> 0)
    int32_t block_size = 16;         // tokens per block (> 0)
    int64_t max_batch_tokens = 512;  // tokens per step, decode tokens and prompt chunks together (>= 1)
    int32_t max_seqs = 64;           // sequences per step (>= 1)
    bool prefix_cache = true;
};

struct ScheduledSeq {
    SeqId id = 0;
    int64_t start = 0;                 // first position run this step = tokens whose KV is already cached
    int64_t num_tokens = 0;            // the step runs the sequence's tokens [start, start + num_tokens)
    bool sample = false;               // start + num_tokens - num_draft == the sequence's length: the step yields
                                       // its next token(s)
    int64_t num_draft = 0;             // the last num_draft of num_tokens are proposed tokens (not in tokens())
    std::vector<int32_t> block_table;  // physical block of each logical block; covers start + num_tokens tokens
};

struct ScheduledBatch {
    std::vector<ScheduledSeq> seqs;  // running sequences needing one token (decode) first, then prompt chunks
    int64_t num_tokens = 0;          // sum of num_tokens
    std::vector<SeqId> preempted;    // sequences preempted (sent back to waiting) while building this step
};

struct SchedulerStats {
    int64_t num_waiting = 0, num_running = 0;
    int32_t blocks_in_use = 0, blocks_total = 0, peak_blocks_in_use = 0;
    int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache (first admission of each sequence)
    int64_t prefix_hit_tokens = 0;    // of those, tokens served from cached blocks
    int64_t num_preemptions = 0;
};

class Scheduler {
public:
    explicit Scheduler(const SchedulerConfig& config);  // KILN_CHECK on an invalid config

    // Queues a sequence (FCFS). kInvalidArgument for a duplicate id, an empty prompt, max_len below the
    // prompt length, or max_len (prompt plus every token it may generate) needing more blocks than the
    // whole pool has (it could never run).
    core::Status add(SeqId id, std::vector<int32_t> prompt, int64_t max_len);
    // For the next schedule() only: sequence id, if it is decoding then (is_decoding), may run up to
    // num_draft proposed tokens after its last one (ScheduledSeq::num_draft says how many it got).
    void set_draft(SeqId id, int64_t num_draft);
    // Running with only its last token left to run: its next step is a decode.
    bool is_decoding(SeqId id) const;
    // Builds the next step (empty batch when there is nothing to run).
    ScheduledBatch schedule();
    // Records a step built by the last schedule(). Entry k of batch.seqs with sample == true appends
    // counts[k] tokens (1 when counts is empty; at most 1 + num_draft) taken in order from `sampled`:
    // its accepted drafts, then the token sampled after them. Each scheduled sequence then has its
    // tokens before the last one cached (num_tokens more without drafts; a rejected draft's KV is
    // dropped). Full blocks are published to the prefix cache. Entries of sequences removed since
    // schedule() are skipped. The caller removes a sequence once it reaches max_len tokens.
    void complete(const ScheduledBatch& batch, std::span<const int32_t> sampled,
                  std::span<const int32_t> counts = {});
    // Drops a sequence in any state (finished or aborted); its blocks are released at once. Unknown id: no-op.
    void remove(SeqId id);

    bool contains(SeqId id) const { return seqs_.count(id) != 0; }
    const std::vector<int32_t>& tokens(SeqId id) const;  // prompt + generated; KILN_CHECK that it exists
    int64_t prompt_len(SeqId id) const;
    bool has_work() const { return !waiting_.empty() || !running_.empty(); }
    SchedulerStats stats() const;
    const kv::BlockPool& pool() const { return pool_; }

private:
    struct Seq {
        std::vector<int32_t> tokens;
        int64_t prompt_len = 0;
        int64_t max_len = 0;
        int64_t computed = 0;             // tokens whose KV is cached
        std::vector<kv::BlockId> blocks;  // logical block -> physical block
        bool running = false;
        bool admitted_once = false;                    // prefix stats are counted at the first admission only
        int64_t num_published = 0;                     // leading blocks known to the prefix cache (hits or published)
        uint64_t last_key = kv::BlockPool::kNoParent;  // key of block num_published - 1
        bool chain_broken = false;                     // a block could not be cached: publish no more of this sequence
        int64_t draft = 0;                             // set_draft's length for the next schedule()
    };

    const Seq& get(SeqId id) const;
    int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
    // Tries to schedule running sequence id for min(need, budget) tokens, preempting others (or itself)
    // when the pool is short. Returns false when id was preempted.
    bool schedule_running(SeqId id, ScheduledBatch& batch, int64_t& budget);
    // Tries to admit the head of the waiting queue. Returns false when it does not fit (stop admitting).
    bool admit_head(ScheduledBatch& batch, int64_t& budget);
    void add_to_batch(SeqId id, Seq& s, int64_t n, ScheduledBatch& batch, int64_t& budget);
    // Adds the sequence's set_draft tokens to its decode entry, within the budget, its max_len and the free blocks.
    void extend_with_draft(ScheduledSeq& e, ScheduledBatch& batch, int64_t& budget);
    void preempt(SeqId id, ScheduledBatch& batch);
    void release_blocks(Seq& s);
    void publish_full_blocks(Seq& s);

    SchedulerConfig config_;
    int64_t block_size_;
    kv::BlockPool pool_;
    std::unordered_map<SeqId, Seq> seqs_;
    std::deque<SeqId> waiting_;   // FCFS; preempted sequences go to the front
    std::vector<SeqId> running_;  // admission order
    std::vector<SeqId> in_step_;  // ids scheduled by the schedule() in progress
    std::vector<SeqId> with_draft_;  // ids given a draft length for the next schedule()
    SchedulerStats stats_;
};

}  // namespace kiln::sched
