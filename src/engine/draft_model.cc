// DraftModel (see draft_model.h).
#include "engine/draft_model.h"

#include <algorithm>


namespace kiln::engine {

DraftModel::DraftModel(model::CpuModel* model, int64_t num_blocks, int32_t block_size)
    : model_(model), block_size_(block_size), pool_(int32_t(num_blocks), block_size, /*prefix_cache=*/false) {}

core::Result<std::unique_ptr<DraftModel>> DraftModel::create(model::CpuModel* model, int64_t num_blocks,
                                                             int32_t block_size) {
    if (num_blocks < 1 || num_blocks > INT32_MAX / block_size)
        return core::error(core::StatusCode::kInvalidArgument) << "draft KV pool of " << num_blocks << " blocks";
    const model::ModelConfig& c = model->config();
    std::unique_ptr<DraftModel> d(new DraftModel(model, num_blocks, block_size));
    KILN_ASSIGN_OR_RETURN(d->storage_, kv::KvStorage::create(c.num_layers, num_blocks, block_size,
                                                                 kernels::kv_row_bytes(kernels::KvDtype::kF32, c.num_kv_heads, c.head_dim)));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        d->layers_.k.push_back(d->storage_->k(l));
        d->layers_.v.push_back(d->storage_->v(l));
    }
    d->layers_.block_size = block_size;
    d->layers_.num_slots = num_blocks * block_size;
    return d;
}

bool DraftModel::cover(Seq& s, int64_t positions) {
    const int64_t want = (positions + block_size_ - 1) / block_size_;
    while (int64_t(s.blocks.size()) < want) {
        std::optional<kv::BlockId> b = pool_.allocate();
        if (!b) return false;
        s.blocks.push_back(*b);
    }
    return true;
}

core::Status DraftModel::propose(std::span<const Job> jobs) {
    const size_t V = size_t(model_->config().vocab_size);
    struct Run {
        const Job* job;
        Seq* seq;
        int64_t drafts;                // what this job gets (its pool may be short)
        std::vector<int32_t> history;  // sampled jobs: tokens and drafts so far (for the penalties)
    };
    std::vector<Run> runs;
    for (const Job& j : jobs) {
        j.out->clear();
        if (j.probs) j.probs->clear();
        Seq& s = seqs_[j.id];
        const int64_t len = int64_t(j.tokens.size());
        s.computed = std::min(s.computed, len - 1);  // the last token is run again to get the first draft
        // Positions run: [computed, len) now, then one per further draft: up to len + drafts - 2.
        int64_t drafts = j.num_draft;
        while (drafts > 0 && !cover(s, len + drafts - 1)) --drafts;
        s.last_len = len;
        s.last_drafts = 0;
        if (drafts > 0) {
            runs.push_back({&j, &s, drafts, {}});
            if (j.sampler) runs.back().history.assign(j.tokens.begin(), j.tokens.end());
        }
    }
    if (runs.empty()) return core::Status::ok();
    int64_t longest = 0;
    for (const Run& r : runs) longest = std::max(longest, r.drafts);
    for (int64_t step = 0; step < longest; ++step) {
        tokens_.clear();
        batch_.clear();
        for (const Run& r : runs) {
            if (step >= r.drafts) continue;
            const int64_t len = int64_t(r.job->tokens.size());
            if (step == 0) {  // catch up, ending with the last token
                tokens_.insert(tokens_.end(), r.job->tokens.begin() + r.seq->computed, r.job->tokens.end());
                batch_.push_back({r.seq->computed, len - r.seq->computed, r.seq->blocks, 1});
            } else {  // the previous draft at its position
                tokens_.push_back(r.job->out->back());
                batch_.push_back({len + step - 1, 1, r.seq->blocks, 1});
            }
        }
        KILN_RETURN_IF_ERROR(model_->forward_batch(tokens_, batch_, layers_, logits_));
        size_t row = 0;
        for (Run& r : runs) {
            if (step >= r.drafts) continue;
            const std::span<const float> logits(logits_.data() + row++ * V, V);
            if (!r.job->sampler) {
                r.job->out->push_back(sampling::argmax_lowest_id(logits));
                continue;
            }
            row_.assign(logits.begin(), logits.end());
            std::vector<sampling::TokenProb> q = r.job->sampler->distribution(row_, r.history);
            r.job->out->push_back(r.job->sampler->draw(q));
            r.history.push_back(r.job->out->back());
            r.job->probs->push_back(std::move(q));
        }
    }
    for (const Run& r : runs) {
        // Positions up to len + drafts - 2 hold [last token, drafts but the last]: valid once verified.
        r.seq->computed = int64_t(r.job->tokens.size()) - 1;
        r.seq->last_drafts = r.drafts;
    }
    return core::Status::ok();
}

void DraftModel::verified(int64_t id, int64_t num_accepted) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    Seq& s = it->second;
    // The draft ran the last token at position len - 1 and drafts 1 .. d-1 after it: those the target
    // kept are the sequence's tokens now.
    if (s.last_drafts > 0) s.computed = s.last_len - 1 + std::min(num_accepted + 1, s.last_drafts);
    s.last_drafts = 0;
}

void DraftModel::forget(int64_t id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) pool_.release(*b);
    seqs_.erase(it);
}

}  // namespace kiln::engine
