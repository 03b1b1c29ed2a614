// A draft model for speculative decoding: a smaller model with the target's vocabulary (a separate
// checkpoint, --draft-model; or the target's own first layers, --spec layers:N) that proposes drafts
// greedily. Its K/V live in a paged pool of its own (no prefix cache: every sequence owns its blocks),
// so nothing it writes can touch the target's cache. Per sequence it remembers how many positions of
// its pool hold the sequence's real tokens; a proposal first catches up over the tokens since (a
// prompt's whole prefill the first time), then runs one batched pass per draft position. For a
// greedy request the drafts are the draft's argmax (a point mass for Sampler::verify); for a sampled
// one they are drawn from the draft's distribution under the request's own sampling parameters, and
// that distribution q goes to the verifier with them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "model/cpu_model.h"
#include "sampling/sampler.h"

namespace kiln::engine {

class DraftModel {
public:
    // `model` must outlive the draft; its pool holds num_blocks blocks of block_size tokens (f32 K/V).
    static core::Result<std::unique_ptr<DraftModel>> create(model::CpuModel* model, int64_t num_blocks,
                                                            int32_t block_size);

    struct Job {
        int64_t id = 0;                   // the sequence
        std::span<const int32_t> tokens;  // all its tokens (prompt + generated)
        int64_t num_draft = 0;            // tokens wanted after them
        std::vector<int32_t>* out = nullptr;  // receives the drafts (fewer when the pool runs short)
        // Sampled requests: draws the drafts from the draft's distribution with this sampler (the
        // request's parameters, its own generator) and puts each one's distribution in *probs.
        // Null: greedy drafts.
        sampling::Sampler* sampler = nullptr;
        std::vector<std::vector<sampling::TokenProb>>* probs = nullptr;
    };
    // Drafts greedily for every job, batched: one pass over each job's tokens not yet in the pool
    // plus its last one, then one pass per further draft position.
    core::Status propose(std::span<const Job> jobs);
    // After verification of the last proposal for `id`: `num_accepted` of its drafts were accepted.
    // The positions the draft ran with tokens the sequence kept stay; the rest are recomputed later.
    void verified(int64_t id, int64_t num_accepted);
    // The sequence is gone or was preempted: its blocks go back.
    void forget(int64_t id);

    const model::CpuModel& model() const { return *model_; }

private:
    struct Seq {
        std::vector<kv::BlockId> blocks;
        int64_t computed = 0;     // leading positions whose K/V hold the sequence's tokens
        int64_t last_len = 0;     // the last proposal: the sequence's length and drafts made
        int64_t last_drafts = 0;
    };
    DraftModel(model::CpuModel* model, int64_t num_blocks, int32_t block_size);
    bool cover(Seq& s, int64_t positions);  // blocks for `positions` tokens; false when the pool is short

    model::CpuModel* model_;
    int32_t block_size_;
    kv::BlockPool pool_;
    std::unique_ptr<kv::KvStorage> storage_;
    model::KvLayers layers_;
    std::unordered_map<int64_t, Seq> seqs_;
    // Pass buffers, reused.
    std::vector<int32_t> tokens_;
    std::vector<model::BatchSeq> batch_;
    std::vector<float> logits_;
    std::vector<float> row_;  // a logits row for a sampler (which scribbles on it)
};

}  // namespace kiln::engine
