// Scheduler implementation. See scheduler.h for the rules and docs/kv.md "Scheduler" for the reasoning.
#include "sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace kiln::sched {

namespace {

const SchedulerConfig& checked(const SchedulerConfig& c) {
    KILN_CHECK(c.num_blocks > 0 && c.block_size > 0)
        << "num_blocks " << c.num_blocks << ", block_size " << c.block_size;
    KILN_CHECK(c.max_batch_tokens >= 1) << "max_batch_tokens " << c.max_batch_tokens;
    KILN_CHECK(c.max_seqs >= 1) << "max_seqs " << c.max_seqs;
    return c;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(checked(config)),
      block_size_(config.block_size),
      pool_(config.num_blocks, config.block_size, config.prefix_cache) {
    stats_.blocks_total = config.num_blocks;
}

core::Status Scheduler::add(SeqId id, std::vector<int32_t> prompt, int64_t max_len) {
    if (contains(id)) return core::error(core::StatusCode::kInvalidArgument) << "sequence " << id << " already exists";
    if (prompt.empty()) return core::error(core::StatusCode::kInvalidArgument) << "sequence " << id << ": empty prompt";
    const int64_t len = int64_t(prompt.size());
    if (max_len < len)
        return core::error(core::StatusCode::kInvalidArgument)
               << "sequence " << id << ": max_len " << max_len << " is below the prompt length " << len;
    if (blocks_for(max_len) > config_.num_blocks)
        return core::error(core::StatusCode::kInvalidArgument)
               << "sequence " << id << ": " << max_len << " tokens need " << blocks_for(max_len) << " KV blocks of "
               << block_size_ << " tokens; the cache has " << config_.num_blocks;
    Seq s;
    s.tokens = std::move(prompt);
    s.prompt_len = len;
    s.max_len = max_len;
    seqs_.emplace(id, std::move(s));
    waiting_.push_back(id);
    return core::Status::ok();
}

const Scheduler::Seq& Scheduler::get(SeqId id) const {
    auto it = seqs_.find(id);
    KILN_CHECK(it != seqs_.end()) << "unknown sequence " << id;
    return it->second;
}

const std::vector<int32_t>& Scheduler::tokens(SeqId id) const {
    return get(id).tokens;
}

int64_t Scheduler::prompt_len(SeqId id) const {
    return get(id).prompt_len;
}

SchedulerStats Scheduler::stats() const {
    SchedulerStats st = stats_;
    st.num_waiting = int64_t(waiting_.size());
    st.num_running = int64_t(running_.size());
    st.blocks_in_use = pool_.num_in_use();
    st.blocks_total = pool_.num_blocks();
    return st;
}

void Scheduler::set_draft(SeqId id, int64_t num_draft) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || num_draft <= 0) return;
    it->second.draft = num_draft;
    with_draft_.push_back(id);
}

bool Scheduler::is_decoding(SeqId id) const {
    auto it = seqs_.find(id);
    return it != seqs_.end() && it->second.running && int64_t(it->second.tokens.size()) - it->second.computed == 1;
}

ScheduledBatch Scheduler::schedule() {
    ScheduledBatch batch;
    in_step_.clear();
    int64_t budget = config_.max_batch_tokens;
    auto full = [&] { return budget == 0 || int64_t(batch.seqs.size()) >= config_.max_seqs; };

    // Running sequences: decodes first, then continuing prompt chunks, each group in admission order.
    std::vector<SeqId> order;
    order.reserve(running_.size());
    auto need = [&](SeqId id) { return int64_t(seqs_.at(id).tokens.size()) - seqs_.at(id).computed; };
    for (SeqId id : running_)
        if (need(id) == 1) order.push_back(id);
    for (SeqId id : running_)
        if (need(id) != 1) order.push_back(id);
    for (SeqId id : order) {
        if (full()) break;
        if (!seqs_.at(id).running) continue;  // preempted while building this step
        schedule_running(id, batch, budget);
    }
    // Drafts after the decodes' tokens, from what the running sequences left: a draft never takes a
    // block or a token of the budget that a running sequence needed, so it never causes a preemption.
    for (ScheduledSeq& e : batch.seqs)
        if (budget > 0 && seqs_.at(e.id).running) extend_with_draft(e, batch, budget);
    // Admission (FCFS, no skipping). Not after a preemption: the pool is short, and the sequences just
    // preempted are at the head of the queue (vLLM v1 does the same).
    if (batch.preempted.empty()) {
        while (!waiting_.empty() && !full() && admit_head(batch, budget)) {
        }
    }
    for (SeqId id : with_draft_)  // drafts are for this step only
        if (auto it = seqs_.find(id); it != seqs_.end()) it->second.draft = 0;
    with_draft_.clear();
    stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, pool_.num_in_use());
    KILN_CHECK(batch.num_tokens <= config_.max_batch_tokens && int64_t(batch.seqs.size()) <= config_.max_seqs);
    return batch;
}

bool Scheduler::schedule_running(SeqId id, ScheduledBatch& batch, int64_t& budget) {
    Seq& s = seqs_.at(id);
    const int64_t need = int64_t(s.tokens.size()) - s.computed;
    KILN_CHECK(need >= 1) << "running sequence " << id << " has nothing to run";
    const int64_t n = std::min(need, budget);
    const int64_t want = blocks_for(s.computed + n) - int64_t(s.blocks.size());
    KILN_CHECK(want >= 0) << "sequence " << id << " holds more blocks than it covers";
    while (want > pool_.num_free()) {
        // The most recently admitted running sequence that is not in this step.
        SeqId victim = id;
        for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
            if (*it != id && std::find(in_step_.begin(), in_step_.end(), *it) == in_step_.end()) {
                victim = *it;
                break;
            }
        }
        preempt(victim, batch);
        if (victim == id) return false;
    }
    for (int64_t i = 0; i < want; ++i) {
        std::optional<kv::BlockId> b = pool_.allocate();
        KILN_CHECK(b.has_value()) << "pool reported free blocks it could not allocate";
        s.blocks.push_back(*b);
    }
    add_to_batch(id, s, n, batch, budget);
    return true;
}

void Scheduler::extend_with_draft(ScheduledSeq& e, ScheduledBatch& batch, int64_t& budget) {
    Seq& s = seqs_.at(e.id);
    if (s.draft <= 0 || !e.sample || e.num_tokens != 1 || e.start + 1 != int64_t(s.tokens.size())) return;
    int64_t draft = std::max<int64_t>(0, std::min({s.draft, budget, s.max_len - int64_t(s.tokens.size()) - 1}));
    while (draft > 0 && blocks_for(e.start + 1 + draft) - int64_t(s.blocks.size()) > pool_.num_free()) --draft;
    if (draft == 0) return;
    for (int64_t i = blocks_for(e.start + 1 + draft) - int64_t(s.blocks.size()); i > 0; --i) {
        std::optional<kv::BlockId> b = pool_.allocate();
        KILN_CHECK(b.has_value()) << "pool reported free blocks it could not allocate";
        s.blocks.push_back(*b);
    }
    e.num_tokens += draft;
    e.num_draft = draft;
    e.block_table = s.blocks;
    batch.num_tokens += draft;
    budget -= draft;
}

bool Scheduler::admit_head(ScheduledBatch& batch, int64_t& budget) {
    const SeqId id = waiting_.front();
    Seq& s = seqs_.at(id);
    KILN_CHECK(!s.running && s.computed == 0 && s.blocks.empty()) << "waiting sequence " << id << " holds KV";
    const int64_t len = int64_t(s.tokens.size());

    // Longest cached prefix of full blocks, leaving at least one token to run.
    std::vector<kv::BlockId> hits;
    uint64_t key = kv::BlockPool::kNoParent;
    int32_t evictable_hits = 0;  // hits at ref 0: retaining them takes them out of num_free()
    if (pool_.prefix_cache()) {
        const int64_t max_hits = (len - 1) / block_size_;
        for (int64_t i = 0; i < max_hits; ++i) {
            std::span<const int32_t> block(s.tokens.data() + i * block_size_, size_t(block_size_));
            std::optional<kv::BlockId> b = pool_.lookup(key, block);
            if (!b) break;
            hits.push_back(*b);
            if (pool_.ref_count(*b) == 0) ++evictable_hits;
            key = kv::BlockPool::block_key(key, block);
        }
    }
    const int64_t computed = int64_t(hits.size()) * block_size_;
    const int64_t n = std::min(len - computed, budget);
    const int64_t want = blocks_for(computed + n) - int64_t(hits.size());
    if (want > pool_.num_free() - evictable_hits) return false;

    for (kv::BlockId b : hits) pool_.retain(b);
    s.blocks = std::move(hits);
    for (int64_t i = 0; i < want; ++i) {
        std::optional<kv::BlockId> b = pool_.allocate();
        KILN_CHECK(b.has_value()) << "pool reported free blocks it could not allocate";
        s.blocks.push_back(*b);
    }
    s.computed = computed;
    s.num_published = int64_t(s.blocks.size()) - want;
    s.last_key = key;
    s.chain_broken = false;
    if (!s.admitted_once) {
        stats_.prefix_query_tokens += len;
        stats_.prefix_hit_tokens += computed;
        s.admitted_once = true;
    }
    s.running = true;
    waiting_.pop_front();
    running_.push_back(id);
    add_to_batch(id, s, n, batch, budget);
    return true;
}

void Scheduler::add_to_batch(SeqId id, Seq& s, int64_t n, ScheduledBatch& batch, int64_t& budget) {
    ScheduledSeq e;
    e.id = id;
    e.start = s.computed;
    e.num_tokens = n;
    e.sample = s.computed + n == int64_t(s.tokens.size());
    e.block_table = s.blocks;
    batch.seqs.push_back(std::move(e));
    batch.num_tokens += n;
    budget -= n;
    in_step_.push_back(id);
}

void Scheduler::release_blocks(Seq& s) {
    // Last block first: a sequence's tail is evicted before its head, which other prompts share more often.
    for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
    s.blocks.clear();
}

void Scheduler::preempt(SeqId id, ScheduledBatch& batch) {
    Seq& s = seqs_.at(id);
    release_blocks(s);
    s.computed = 0;
    s.num_published = 0;
    s.last_key = kv::BlockPool::kNoParent;
    s.chain_broken = false;
    s.running = false;
    running_.erase(std::find(running_.begin(), running_.end(), id));
    waiting_.push_front(id);
    batch.preempted.push_back(id);
    ++stats_.num_preemptions;
}

void Scheduler::complete(const ScheduledBatch& batch, std::span<const int32_t> sampled,
                         std::span<const int32_t> counts) {
    size_t k = 0, entry = 0;
    for (const ScheduledSeq& e : batch.seqs) {
        std::span<const int32_t> toks;
        if (e.sample) {
            const int64_t count = counts.empty() ? 1 : (entry < counts.size() ? counts[entry] : -1);
            ++entry;
            KILN_CHECK(count >= 1 && count <= 1 + e.num_draft)
                << "sequence " << e.id << ": " << count << " new tokens after " << e.num_draft << " drafts";
            KILN_CHECK(k + size_t(count) <= sampled.size()) << "fewer sampled tokens than sampling sequences";
            toks = sampled.subspan(k, size_t(count));
            k += size_t(count);
        }
        auto it = seqs_.find(e.id);
        if (it == seqs_.end() || !it->second.running || it->second.computed != e.start) continue;  // removed
        Seq& s = it->second;
        const int64_t real = e.num_tokens - e.num_draft;  // tokens of tokens() the step ran
        KILN_CHECK(e.start + real <= int64_t(s.tokens.size())) << "sequence " << e.id << " step past its end";
        KILN_CHECK(blocks_for(e.start + e.num_tokens) <= int64_t(s.blocks.size())) << "sequence " << e.id;
        s.computed += real;
        if (e.sample) {
            KILN_CHECK(s.computed == int64_t(s.tokens.size())) << "sequence " << e.id << " sampled mid-prompt";
            // Accepted drafts had their KV written by this step; the token after them has not.
            s.computed += int64_t(toks.size()) - 1;
            s.tokens.insert(s.tokens.end(), toks.begin(), toks.end());
            KILN_CHECK(int64_t(s.tokens.size()) <= s.max_len)
                << "sequence " << e.id << " grew past max_len " << s.max_len << " (the caller removes it there)";
            // Blocks that held only rejected drafts go back (never published: past `computed`).
            while (int64_t(s.blocks.size()) > blocks_for(s.computed)) {
                pool_.release(s.blocks.back());
                s.blocks.pop_back();
            }
        }
        publish_full_blocks(s);
    }
    KILN_CHECK(k == sampled.size()) << sampled.size() << " sampled tokens for " << k << " taken by the sequences";
}

void Scheduler::publish_full_blocks(Seq& s) {
    if (!pool_.prefix_cache()) return;
    while (!s.chain_broken && (s.num_published + 1) * block_size_ <= s.computed) {
        const int64_t i = s.num_published;
        std::span<const int32_t> block(s.tokens.data() + i * block_size_, size_t(block_size_));
        const uint64_t key = pool_.publish(s.blocks[i], s.last_key, block);
        std::optional<kv::BlockId> cached = pool_.lookup(s.last_key, block);
        if (!cached) {
            // The key is held by different content (a hash collision) or a stale entry: caching the rest of
            // this sequence could link it to the wrong prefix, so stop.
            s.chain_broken = true;
            break;
        }
        if (*cached != s.blocks[i]) {
            // Another sequence cached the same block first: share it (same tokens at the same positions after
            // the same prefix, so the same KV) so this sequence's later blocks can chain onto it.
            pool_.retain(*cached);
            pool_.release(s.blocks[i]);
            s.blocks[i] = *cached;
        }
        s.last_key = key;
        ++s.num_published;
    }
}

void Scheduler::remove(SeqId id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    Seq& s = it->second;
    if (s.running) {
        release_blocks(s);
        running_.erase(std::find(running_.begin(), running_.end(), id));
    } else {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    }
    seqs_.erase(it);
}

}  // namespace kiln::sched
