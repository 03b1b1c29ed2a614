// Scheduler property test: random configurations (tiny pools, block sizes 1..16, budgets 1..64, 1..8
// sequences per step, prefix cache on/off), random arrivals sharing prefixes, aborts, and a fake model over a
// fake paged KV store holding (token, position) per slot. Before each step every scheduled sequence's KV for
// [0, start) is checked through its block table, which proves prefix hits and preemption never hand out
// wrong KV; every finished sequence must equal what the fake model generates for it alone; budgets, the
// step order and the pool are checked every step, and every ref count returns to 0 at the end. With
// speculation: decoding sequences get random drafts (the fake model's continuation, corrupted at a random
// place) that are verified like the engine does; rejected drafts' KV must never be read as a sequence's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "sched/scheduler.h"

namespace kiln::sched {
namespace {

using Tokens = std::vector<int32_t>;

// The fake model's next token: a pure function of the whole history, over a 50-token vocabulary (so
// prefixes repeat and the prefix cache gets hits).
int32_t fake_next(const Tokens& history) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : history) h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
    h ^= h >> 29;
    return int32_t(h % 50);
}

struct Totals {
    int64_t finished = 0, aborted = 0, rejected = 0, preemptions = 0, hit_tokens = 0, chunks = 0;
    int64_t drafted = 0, accepted = 0;
};

// One configuration: random arrivals (prompts built from a few shared prefixes), aborts, and steps until
// everything has finished or been removed.
void run_random(uint64_t seed, bool speculate, Totals& totals) {
    std::mt19937_64 rng(seed);
    auto uniform = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
    const int32_t bs = int32_t(uniform(1, 16));
    const int32_t num_blocks = int32_t(rng() % 3 == 0 ? uniform(1, 4) : uniform(2, 48));
    const SchedulerConfig cfg{num_blocks, bs, uniform(1, 64), int32_t(uniform(1, 8)), rng() % 4 != 0};
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ": num_blocks " << num_blocks << " block_size " << bs
                                      << " max_batch_tokens " << cfg.max_batch_tokens << " max_seqs " << cfg.max_seqs
                                      << " prefix_cache " << cfg.prefix_cache);
    Scheduler s(cfg);
    const int64_t capacity = int64_t(num_blocks) * bs;
    std::vector<std::pair<int32_t, int64_t>> slots(size_t(capacity), {-1, -1});  // (token, position)

    std::vector<Tokens> prefixes(3);
    for (Tokens& p : prefixes) {
        p.resize(size_t(uniform(0, 3 * bs + 2)));
        for (int32_t& t : p) t = int32_t(uniform(0, 49));
    }
    std::map<SeqId, Tokens> expected;  // live sequences: prompt + what the model generates alone
    std::set<SeqId> running;           // scheduled at least once and not preempted since
    SeqId next_id = 1;
    const int arrival_steps = 300;
    int empty_steps = 0;
    for (int step = 0; step < arrival_steps || s.has_work(); ++step) {
        ASSERT_LT(step, 20000) << "sequences never finish";
        if (step < arrival_steps && rng() % 3 == 0) {
            Tokens prompt = rng() % 4 == 0 ? Tokens{} : prefixes[rng() % prefixes.size()];
            const int64_t suffix = uniform(prompt.empty() ? 1 : 0, 2 * bs + 3);
            for (int64_t i = 0; i < suffix; ++i) prompt.push_back(int32_t(uniform(0, 49)));
            const int64_t max_len = int64_t(prompt.size()) + uniform(1, 12);
            const SeqId id = next_id++;
            core::Status st = s.add(id, prompt, max_len);
            if (max_len > capacity) {
                EXPECT_EQ(st.code(), core::StatusCode::kInvalidArgument);
                EXPECT_FALSE(s.contains(id));
                ++totals.rejected;
            } else {
                ASSERT_TRUE(st.is_ok()) << st.to_string();
                Tokens want = prompt;
                while (int64_t(want.size()) < max_len) want.push_back(fake_next(want));
                expected.emplace(id, std::move(want));
            }
        }
        if (!expected.empty() && rng() % 40 == 0) {  // abort a random live sequence
            auto it = std::next(expected.begin(), long(rng() % expected.size()));
            s.remove(it->first);
            EXPECT_FALSE(s.contains(it->first));
            running.erase(it->first);
            expected.erase(it);
            ++totals.aborted;
        }

        std::map<SeqId, Tokens> drafts;  // proposed this step
        if (speculate) {
            for (const auto& [id, want] : expected) {
                if (!s.is_decoding(id) || rng() % 4 == 0) continue;
                const size_t len = s.tokens(id).size();
                Tokens d(want.begin() + long(len), want.begin() + long(std::min(want.size(), len + size_t(uniform(1, 6)))));
                if (!d.empty() && rng() % 2 == 0) d[size_t(rng() % d.size())] = int32_t(uniform(0, 49));
                d.push_back(int32_t(uniform(0, 49)));  // may run past max_len: the scheduler cuts it
                s.set_draft(id, int64_t(d.size()));
                drafts.emplace(id, std::move(d));
            }
        }
        const bool had_work = s.has_work();
        ScheduledBatch b = s.schedule();
        if (b.seqs.empty()) {
            ASSERT_FALSE(had_work) << "step " << step << ": work left but nothing scheduled";
            ++empty_steps;
            continue;
        }
        const SchedulerStats st = s.stats();
        ASSERT_LE(b.num_tokens, cfg.max_batch_tokens);
        ASSERT_LE(int64_t(b.seqs.size()), cfg.max_seqs);
        ASSERT_LE(st.blocks_in_use, num_blocks);
        ASSERT_EQ(st.blocks_in_use, s.pool().num_in_use());
        for (SeqId id : b.preempted) running.erase(id);
        std::set<SeqId> ids;
        std::set<int64_t> written;
        int64_t sum = 0;
        bool seen_new = false, seen_prefill = false;
        std::vector<int32_t> sampled, counts;
        for (size_t i = 0; i < b.seqs.size(); ++i) {
            const ScheduledSeq& e = b.seqs[i];
            SCOPED_TRACE(::testing::Message() << "step " << step << " seq " << e.id);
            ASSERT_TRUE(ids.insert(e.id).second) << "scheduled twice";
            ASSERT_TRUE(expected.count(e.id));
            const Tokens& tokens = s.tokens(e.id);
            const int64_t len = int64_t(tokens.size());
            const int64_t real = e.num_tokens - e.num_draft;  // of tokens(), the rest are drafts
            ASSERT_GE(real, 1);
            ASSERT_LE(e.start + real, len);
            ASSERT_EQ(e.sample, e.start + real == len);
            if (e.num_draft > 0) {
                ASSERT_TRUE(e.sample && real == 1) << "drafts only after a decode's token";
                ASSERT_TRUE(drafts.count(e.id));
                ASSERT_LE(e.num_draft, int64_t(drafts.at(e.id).size()));
                ASSERT_LT(len + e.num_draft, expected.at(e.id).size() + 1) << "drafts past max_len";
            }
            if (real < len - e.start) {  // a chunk only when the budget ran out, as the last entry
                ASSERT_EQ(b.num_tokens, cfg.max_batch_tokens);
                ASSERT_EQ(i + 1, b.seqs.size());
                ++totals.chunks;
            }
            // Running sequences come first, decodes before prefill chunks; then admissions.
            const bool was_running = running.count(e.id) != 0;
            if (was_running) {
                ASSERT_FALSE(seen_new);
                if (len - e.start == 1) {
                    ASSERT_FALSE(seen_prefill);
                } else {
                    seen_prefill = true;
                }
            } else {
                seen_new = true;
            }
            ASSERT_EQ(int64_t(e.block_table.size()), (e.start + e.num_tokens + bs - 1) / bs);
            ASSERT_EQ(std::set<int32_t>(e.block_table.begin(), e.block_table.end()).size(), e.block_table.size());
            for (int32_t blk : e.block_table) {
                ASSERT_GE(blk, 0);
                ASSERT_LT(blk, num_blocks);
                ASSERT_GT(s.pool().ref_count(blk), 0);
            }
            // The KV of [0, start) must be this sequence's tokens at their positions.
            for (int64_t p = 0; p < e.start; ++p) {
                const auto& slot = slots[size_t(e.block_table[size_t(p / bs)]) * bs + size_t(p % bs)];
                ASSERT_EQ(slot.first, tokens[size_t(p)]) << "wrong KV at position " << p;
                ASSERT_EQ(slot.second, p) << "wrong KV at position " << p;
            }
            for (int64_t p = e.start; p < e.start + e.num_tokens; ++p) {
                const int64_t idx = int64_t(e.block_table[size_t(p / bs)]) * bs + p % bs;
                ASSERT_TRUE(written.insert(idx).second) << "slot written twice in one step";
                const int32_t tok = p < len ? tokens[size_t(p)] : drafts.at(e.id)[size_t(p - len)];
                slots[size_t(idx)] = {tok, p};
            }
            sum += e.num_tokens;
            if (e.sample) {  // verify the drafts as a greedy engine would, then sample after the accepted ones
                Tokens history = tokens;
                int64_t k = 0;
                while (k < e.num_draft && drafts.at(e.id)[size_t(k)] == fake_next(history))
                    history.push_back(drafts.at(e.id)[size_t(k++)]);
                history.push_back(fake_next(history));
                sampled.insert(sampled.end(), history.begin() + long(len), history.end());
                counts.push_back(int32_t(k + 1));
                totals.drafted += e.num_draft;
                totals.accepted += k;
            }
            running.insert(e.id);
        }
        ASSERT_EQ(sum, b.num_tokens);
        s.complete(b, sampled, counts);
        for (const ScheduledSeq& e : b.seqs) {
            if (!e.sample) continue;
            const Tokens& want = expected.at(e.id);
            const Tokens& got = s.tokens(e.id);
            ASSERT_LE(got.size(), want.size()) << "seq " << e.id << " grew past max_len";
            ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "seq " << e.id << " diverged";
            ASSERT_EQ(s.stats().blocks_in_use, s.pool().num_in_use());
            if (got.size() == want.size()) {  // finished
                s.remove(e.id);
                expected.erase(e.id);
                running.erase(e.id);
                ++totals.finished;
            }
        }
    }
    EXPECT_TRUE(expected.empty());
    EXPECT_LE(empty_steps, arrival_steps);
    const SchedulerStats st = s.stats();
    EXPECT_EQ(st.num_waiting + st.num_running, 0);
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_LE(st.peak_blocks_in_use, num_blocks);
    EXPECT_LE(st.prefix_hit_tokens, st.prefix_query_tokens);
    EXPECT_EQ(s.pool().num_in_use(), 0);
    EXPECT_EQ(s.pool().num_free(), num_blocks);
    for (int32_t blk = 0; blk < num_blocks; ++blk) EXPECT_EQ(s.pool().ref_count(blk), 0);
    if (!cfg.prefix_cache) {
        EXPECT_EQ(st.prefix_hit_tokens, 0);
    }
    totals.preemptions += st.num_preemptions;
    totals.hit_tokens += st.prefix_hit_tokens;
}

TEST(Scheduler, RandomizedFakeModelKeepsKvAndOutputsExact) {
    Totals totals;
    for (uint64_t seed = 1; seed <= 150; ++seed) {
        run_random(seed, false, totals);
        if (::testing::Test::HasFatalFailure()) return;
    }
    // The run must have exercised what it checks.
    EXPECT_GT(totals.finished, 1000);
    EXPECT_GT(totals.aborted, 50);
    EXPECT_GT(totals.rejected, 0);
    EXPECT_GT(totals.preemptions, 100);
    EXPECT_GT(totals.hit_tokens, 1000);
    EXPECT_GT(totals.chunks, 100);
    std::printf("finished %lld aborted %lld rejected %lld preemptions %lld prefix-hit tokens %lld chunks %lld\n",
                (long long)totals.finished, (long long)totals.aborted, (long long)totals.rejected,
                (long long)totals.preemptions, (long long)totals.hit_tokens, (long long)totals.chunks);
}

TEST(Scheduler, RandomizedSpeculationRollsBackRejectedDrafts) {
    Totals totals;
    for (uint64_t seed = 1; seed <= 150; ++seed) {
        run_random(seed, true, totals);
        if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_GT(totals.finished, 1000);
    EXPECT_GT(totals.preemptions, 50);
    EXPECT_GT(totals.hit_tokens, 1000);
    EXPECT_GT(totals.accepted, 1000);
    EXPECT_GT(totals.drafted - totals.accepted, 1000) << "rejected drafts";
    std::printf("finished %lld preemptions %lld prefix-hit tokens %lld drafted %lld accepted %lld\n",
                (long long)totals.finished, (long long)totals.preemptions, (long long)totals.hit_tokens,
                (long long)totals.drafted, (long long)totals.accepted);
}

}  // namespace
}  // namespace kiln::sched
