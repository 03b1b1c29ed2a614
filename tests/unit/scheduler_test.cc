// Scheduler: add() errors, budgets (tokens and sequences per step), chunked prefill, prefix-cache hits and
// their cap, preemption by recompute (of another sequence and of itself), remove(). The randomized property
// test is scheduler_property_test.cc.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace kiln::sched {
namespace {

using Tokens = std::vector<int32_t>;

Tokens iota_tokens(int32_t n, int32_t first) {
    Tokens t(n);
    for (int32_t i = 0; i < n; ++i) t[i] = first + i;
    return t;
}

// Sampled tokens for a batch: id * 1000 + the sequence length, so tests can tell them apart.
std::vector<int32_t> fake_samples(const Scheduler& s, const ScheduledBatch& b) {
    std::vector<int32_t> out;
    for (const ScheduledSeq& e : b.seqs)
        if (e.sample) out.push_back(int32_t(e.id * 1000 + int64_t(s.tokens(e.id).size())));
    return out;
}

TEST(Scheduler, AddErrors) {
    Scheduler s(SchedulerConfig{4, 4, 64, 8, true});
    EXPECT_TRUE(s.add(1, {1, 2, 3}, 16).is_ok());  // exactly the whole pool
    core::Status dup = s.add(1, {4}, 4);
    EXPECT_EQ(dup.code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(dup.message().find("already"), std::string::npos);
    EXPECT_EQ(s.add(2, {}, 4).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.add(3, {1, 2}, 17).code(), core::StatusCode::kInvalidArgument);    // 5 blocks > 4
    EXPECT_EQ(s.add(4, {1, 2, 3}, 2).code(), core::StatusCode::kInvalidArgument);  // below the prompt
    EXPECT_TRUE(s.contains(1));
    EXPECT_FALSE(s.contains(2) || s.contains(3) || s.contains(4));
    EXPECT_EQ(s.stats().num_waiting, 1);
    EXPECT_EQ(s.tokens(1), (Tokens{1, 2, 3}));
    EXPECT_EQ(s.prompt_len(1), 3);
}

TEST(Scheduler, EmptyWhenIdle) {
    Scheduler s(SchedulerConfig{4, 4, 64, 8, true});
    EXPECT_FALSE(s.has_work());
    ScheduledBatch b = s.schedule();
    EXPECT_TRUE(b.seqs.empty());
    EXPECT_EQ(b.num_tokens, 0);
}

TEST(Scheduler, TokenBudgetAndMaxSeqs) {
    Scheduler s(SchedulerConfig{64, 4, 7, 3, false});
    for (SeqId id = 1; id <= 5; ++id) ASSERT_TRUE(s.add(id, iota_tokens(3, 0), 8).is_ok());
    ScheduledBatch b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 3u);
    EXPECT_EQ(b.num_tokens, 7);
    EXPECT_EQ(b.seqs[0].id, 1);
    EXPECT_EQ(b.seqs[1].id, 2);
    EXPECT_EQ(b.seqs[2].id, 3);
    EXPECT_EQ(b.seqs[2].num_tokens, 1);  // a 1-token chunk fills the budget
    EXPECT_FALSE(b.seqs[2].sample);
    EXPECT_TRUE(b.seqs[0].sample && b.seqs[1].sample);
    s.complete(b, fake_samples(s, b));
    EXPECT_EQ(s.stats().num_running, 3);
    EXPECT_EQ(s.stats().num_waiting, 2);

    // Next step: the two decodes first, then seq 3's remaining prompt, then no seat is left (max_seqs 3).
    b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 3u);
    EXPECT_EQ(b.seqs[0].id, 1);
    EXPECT_EQ(b.seqs[0].start, 3);
    EXPECT_EQ(b.seqs[0].num_tokens, 1);
    EXPECT_EQ(b.seqs[1].id, 2);
    EXPECT_EQ(b.seqs[2].id, 3);
    EXPECT_EQ(b.seqs[2].start, 1);
    EXPECT_EQ(b.seqs[2].num_tokens, 2);
    EXPECT_TRUE(b.seqs[2].sample);
    EXPECT_EQ(b.num_tokens, 4);
}

TEST(Scheduler, SelfPreemptedSequenceRecomputesItsHistory) {
    // Seq 2 preempts itself (seq 1 is already in the step), waits, and is re-admitted at the head of the
    // queue with its whole history (prompt + generated token) to run again; a running decode goes before
    // a new admission.
    Scheduler s(SchedulerConfig{3, 2, 64, 8, false});
    ASSERT_TRUE(s.add(1, {1, 2}, 6).is_ok());
    ASSERT_TRUE(s.add(2, {3, 4}, 6).is_ok());
    ScheduledBatch b = s.schedule();  // both prompts, one block each
    s.complete(b, fake_samples(s, b));
    b = s.schedule();  // seq 1 takes the last block; seq 2 finds none and preempts itself
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.preempted, (std::vector<SeqId>{2}));
    s.complete(b, fake_samples(s, b));
    s.remove(1);
    ASSERT_TRUE(s.add(3, {5}, 4).is_ok());
    b = s.schedule();  // seq 2 recomputes 3 tokens, seq 3 runs its 1-token prompt
    ASSERT_EQ(b.seqs.size(), 2u);
    EXPECT_EQ(b.seqs[0].id, 2);
    EXPECT_EQ(b.seqs[0].start, 0);
    EXPECT_EQ(b.seqs[0].num_tokens, 3);
    EXPECT_TRUE(b.seqs[0].sample);
    EXPECT_EQ(b.seqs[1].id, 3);
    s.complete(b, fake_samples(s, b));
    ASSERT_TRUE(s.add(4, {6, 7, 8}, 4).is_ok());
    s.remove(2);
    b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 2u);
    EXPECT_EQ(b.seqs[0].id, 3);  // decode
    EXPECT_EQ(b.seqs[1].id, 4);  // prompt
}

TEST(Scheduler, ChunkedPrefill) {
    Scheduler s(SchedulerConfig{16, 4, 10, 4, false});
    ASSERT_TRUE(s.add(7, iota_tokens(37, 100), 40).is_ok());
    const int64_t starts[] = {0, 10, 20, 30};
    const int64_t counts[] = {10, 10, 10, 7};
    const size_t tables[] = {3, 5, 8, 10};
    std::vector<int32_t> first_table;
    for (int i = 0; i < 4; ++i) {
        ScheduledBatch b = s.schedule();
        ASSERT_EQ(b.seqs.size(), 1u);
        const ScheduledSeq& e = b.seqs[0];
        EXPECT_EQ(e.start, starts[i]);
        EXPECT_EQ(e.num_tokens, counts[i]);
        EXPECT_EQ(e.sample, i == 3);
        EXPECT_EQ(e.block_table.size(), tables[i]);
        if (i == 0) first_table = e.block_table;
        // Blocks already held keep their place in the table.
        EXPECT_TRUE(std::equal(first_table.begin(), first_table.end(), e.block_table.begin()));
        s.complete(b, fake_samples(s, b));
    }
    EXPECT_EQ(s.tokens(7).size(), 38u);
    ScheduledBatch b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.seqs[0].start, 37);
    EXPECT_EQ(b.seqs[0].num_tokens, 1);
    EXPECT_TRUE(b.seqs[0].sample);
    EXPECT_EQ(b.seqs[0].block_table.size(), 10u);
    EXPECT_EQ(s.stats().blocks_in_use, 10);
}

TEST(Scheduler, PrefixHitOnSharedBlocks) {
    Scheduler s(SchedulerConfig{32, 4, 64, 8, true});
    Tokens shared = iota_tokens(12, 1);  // 3 full blocks
    Tokens a = shared;
    a.insert(a.end(), {90, 91, 92});
    ASSERT_TRUE(s.add(1, a, 20).is_ok());
    ScheduledBatch b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.seqs[0].start, 0);
    const std::vector<int32_t> table_a = b.seqs[0].block_table;
    s.complete(b, fake_samples(s, b));
    EXPECT_EQ(s.pool().num_cached(), 3);

    Tokens bt = shared;
    bt.insert(bt.end(), {50, 51, 52, 53, 54});
    ASSERT_TRUE(s.add(2, bt, 20).is_ok());
    b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 2u);
    const ScheduledSeq& e = b.seqs[1];
    EXPECT_EQ(e.id, 2);
    EXPECT_EQ(e.start, 12);
    EXPECT_EQ(e.num_tokens, 5);
    EXPECT_TRUE(e.sample);
    ASSERT_EQ(e.block_table.size(), 5u);
    EXPECT_TRUE(std::equal(table_a.begin(), table_a.begin() + 3, e.block_table.begin()));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(s.pool().ref_count(table_a[i]), 2);
    SchedulerStats st = s.stats();
    EXPECT_EQ(st.prefix_query_tokens, 15 + 17);
    EXPECT_EQ(st.prefix_hit_tokens, 12);
    s.complete(b, fake_samples(s, b));

    // The whole prompt cached: at least one token still runs (its logits are needed). 12 tokens: 8 hit;
    // 13 tokens: 12 hit.
    ASSERT_TRUE(s.add(3, shared, 20).is_ok());
    Tokens d = shared;
    d.push_back(77);
    ASSERT_TRUE(s.add(4, d, 20).is_ok());
    s.remove(1);  // finished: its blocks stay cached (evictable) and still serve hits
    s.remove(2);
    EXPECT_EQ(s.stats().blocks_in_use, 0);
    b = s.schedule();
    ASSERT_EQ(b.seqs.size(), 2u);
    EXPECT_EQ(b.seqs[0].start, 8);
    EXPECT_EQ(b.seqs[0].num_tokens, 4);
    EXPECT_EQ(b.seqs[1].start, 12);
    EXPECT_EQ(b.seqs[1].num_tokens, 1);
    EXPECT_EQ(s.stats().prefix_hit_tokens, 12 + 8 + 12);
}

TEST(Scheduler, PreemptsMostRecentlyAdmittedAndRecomputes) {
    Scheduler s(SchedulerConfig{4, 2, 64, 8, false});
    ASSERT_TRUE(s.add(1, {1, 2, 3}, 8).is_ok());
    ASSERT_TRUE(s.add(2, {4, 5, 6}, 8).is_ok());
    ScheduledBatch b = s.schedule();  // 2 blocks each: the pool is full
    ASSERT_EQ(b.seqs.size(), 2u);
    EXPECT_EQ(s.stats().blocks_in_use, 4);
    s.complete(b, fake_samples(s, b));
    b = s.schedule();  // position 3 still fits in the second block
    ASSERT_EQ(b.seqs.size(), 2u);
    s.complete(b, fake_samples(s, b));
    const Tokens tokens2 = s.tokens(2);
    ASSERT_EQ(tokens2.size(), 5u);

    b = s.schedule();  // seq 1 needs a third block: seq 2 is preempted
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.seqs[0].id, 1);
    EXPECT_EQ(b.seqs[0].block_table.size(), 3u);
    EXPECT_EQ(b.preempted, (std::vector<SeqId>{2}));
    SchedulerStats st = s.stats();
    EXPECT_EQ(st.num_preemptions, 1);
    EXPECT_EQ(st.num_running, 1);
    EXPECT_EQ(st.num_waiting, 1);
    EXPECT_EQ(st.blocks_in_use, 3);
    EXPECT_EQ(s.tokens(2), tokens2);  // generated tokens are kept
    s.complete(b, fake_samples(s, b));

    s.remove(1);
    EXPECT_EQ(s.stats().blocks_in_use, 0);
    b = s.schedule();  // recompute: the whole history runs again and yields the next token
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.seqs[0].id, 2);
    EXPECT_EQ(b.seqs[0].start, 0);
    EXPECT_EQ(b.seqs[0].num_tokens, 5);
    EXPECT_TRUE(b.seqs[0].sample);
    EXPECT_EQ(s.stats().prefix_query_tokens, 6);  // counted at the first admission only
    EXPECT_EQ(s.stats().peak_blocks_in_use, 4);
}

TEST(Scheduler, PreemptsItselfWhenNoOtherCanGo) {
    Scheduler s(SchedulerConfig{3, 2, 64, 8, false});
    ASSERT_TRUE(s.add(1, {1, 2}, 6).is_ok());
    ASSERT_TRUE(s.add(2, {3, 4}, 6).is_ok());
    ScheduledBatch b = s.schedule();
    s.complete(b, fake_samples(s, b));
    b = s.schedule();  // seq 1 takes the last block; seq 2's only candidate victim is itself
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.seqs[0].id, 1);
    EXPECT_EQ(b.preempted, (std::vector<SeqId>{2}));
    EXPECT_FALSE(s.pool().num_free() < 0);
    s.complete(b, fake_samples(s, b));
    b = s.schedule();  // seq 2 (3 tokens, 2 blocks) cannot be admitted while 1 holds 2 of the 3 blocks
    ASSERT_EQ(b.seqs.size(), 1u);
    EXPECT_EQ(b.seqs[0].id, 1);
    EXPECT_EQ(s.stats().num_waiting, 1);
}

TEST(Scheduler, RemoveReleasesBlocksInAnyState) {
    Scheduler s(SchedulerConfig{8, 2, 4, 8, true});
    ASSERT_TRUE(s.add(1, iota_tokens(6, 0), 8).is_ok());
    ASSERT_TRUE(s.add(2, iota_tokens(3, 10), 8).is_ok());
    ScheduledBatch b = s.schedule();  // seq 1 gets a 4-token chunk; seq 2 waits
    ASSERT_EQ(b.seqs.size(), 1u);
    s.complete(b, fake_samples(s, b));
    EXPECT_EQ(s.stats().blocks_in_use, 2);
    s.remove(2);
    EXPECT_FALSE(s.contains(2));
    EXPECT_EQ(s.stats().num_waiting, 0);
    s.remove(1);
    s.remove(12345);  // unknown: no-op
    EXPECT_EQ(s.stats().blocks_in_use, 0);
    EXPECT_FALSE(s.has_work());
    for (int32_t i = 0; i < 8; ++i) EXPECT_EQ(s.pool().ref_count(i), 0);
}

TEST(Scheduler, CompleteSkipsSequencesRemovedMidStep) {
    Scheduler s(SchedulerConfig{8, 2, 64, 8, false});
    ASSERT_TRUE(s.add(1, {1, 2}, 8).is_ok());
    ASSERT_TRUE(s.add(2, {3, 4}, 8).is_ok());
    ScheduledBatch b = s.schedule();
    s.remove(1);  // aborted while the step ran
    s.complete(b, std::vector<int32_t>{42, 43});
    EXPECT_EQ(s.tokens(2), (Tokens{3, 4, 43}));
    EXPECT_EQ(s.stats().blocks_in_use, 1);
}

}  // namespace
}  // namespace kiln::sched
