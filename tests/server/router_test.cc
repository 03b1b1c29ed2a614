// Data parallelism's router (server/router.h): a prompt whose prefix went to a replica goes there
// again unless that replica is busier than the least busy by more than the slack; other prompts go
// to the least busy replica, ties in turn; prefixes count in whole blocks; forgotten beyond capacity.
#include "server/router.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::server {
namespace {

std::vector<int32_t> prompt(int32_t seed, int len) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(seed * 1000 + i);
    return p;
}

TEST(PrefixRouter, NewPromptsSpreadOverIdleReplicas) {
    PrefixRouter r(3, 4);
    const std::vector<int64_t> idle = {0, 0, 0};
    EXPECT_EQ(r.pick(prompt(1, 20), idle), 0);
    EXPECT_EQ(r.pick(prompt(2, 20), idle), 1);
    EXPECT_EQ(r.pick(prompt(3, 20), idle), 2);
    EXPECT_EQ(r.pick(prompt(4, 20), idle), 0);
    EXPECT_EQ(r.prefix_routed(), 0);
    EXPECT_EQ(r.routed(), 4);
}

TEST(PrefixRouter, NewPromptsGoToTheLeastBusy) {
    PrefixRouter r(3, 4);
    EXPECT_EQ(r.pick(prompt(1, 20), std::vector<int64_t>{5, 2, 7}), 1);
    EXPECT_EQ(r.pick(prompt(2, 20), std::vector<int64_t>{1, 2, 0}), 2);
}

TEST(PrefixRouter, ASharedPrefixGoesWhereItWent) {
    PrefixRouter r(2, 4, /*slack=*/2);
    std::vector<int32_t> a = prompt(7, 16);  // 4 blocks
    EXPECT_EQ(r.pick(a, std::vector<int64_t>{0, 0}), 0);
    EXPECT_EQ(r.pick(prompt(8, 16), std::vector<int64_t>{1, 0}), 1);
    // a's first 2 blocks and then something else: still replica 0, though it is the busier one
    std::vector<int32_t> b(a.begin(), a.begin() + 8);
    for (int i = 0; i < 9; ++i) b.push_back(-i);
    EXPECT_EQ(r.pick(b, std::vector<int64_t>{2, 1}), 0);
    EXPECT_EQ(r.prefix_routed(), 1);
    // too busy (3 more than the least busy, slack 2): the prefix is given up for the idle replica,
    // which then owns those blocks
    EXPECT_EQ(r.pick(b, std::vector<int64_t>{3, 0}), 1);
    EXPECT_EQ(r.pick(b, std::vector<int64_t>{0, 0}), 1);
}

TEST(PrefixRouter, OnlyWholeBlocksCount) {
    PrefixRouter r(2, 8);
    EXPECT_EQ(r.pick(prompt(1, 7), std::vector<int64_t>{0, 0}), 0);  // shorter than a block: nothing remembered
    EXPECT_EQ(r.pick(prompt(1, 7), std::vector<int64_t>{0, 0}), 1);  // so the same prompt goes in turn
    EXPECT_EQ(r.pick(prompt(2, 8), std::vector<int64_t>{0, 0}), 0);
    // the first 8 tokens match; the 7 that follow do not matter
    std::vector<int32_t> longer = prompt(2, 15);
    EXPECT_EQ(r.pick(longer, std::vector<int64_t>{0, 0}), 0);
    // a different first block shares nothing, even with the same second block
    std::vector<int32_t> other = prompt(3, 8);
    for (int i = 8; i < 16; ++i) other.push_back(longer[size_t(i % 15)]);
    EXPECT_EQ(r.pick(other, std::vector<int64_t>{1, 0}), 1);
}

TEST(PrefixRouter, ForgetsTheOldestBeyondCapacity) {
    PrefixRouter r(2, 4, 2, /*capacity=*/4);
    EXPECT_EQ(r.pick(prompt(1, 16), std::vector<int64_t>{0, 0}), 0);  // 4 blocks: full
    EXPECT_EQ(r.pick(prompt(2, 8), std::vector<int64_t>{0, 1}), 0);   // 2 more: prompt 1's first 2 forgotten
    EXPECT_EQ(r.pick(prompt(1, 4), std::vector<int64_t>{1, 0}), 1);   // its first block is gone
    EXPECT_EQ(r.pick(prompt(2, 8), std::vector<int64_t>{1, 0}), 0);   // prompt 2 is still known
}

}  // namespace
}  // namespace kiln::server
