// BlockPool: allocation until exhaustion, ref counts, LRU eviction of cached blocks, prefix-cache lookup
// and publish (exact token/parent comparison, chained keys, stale children after a parent is evicted), and
// the disabled cache.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace kiln::kv {
namespace {

using Tokens = std::vector<int32_t>;

TEST(BlockPool, AllocateAllThenNone) {
    BlockPool pool(4, 16, true);
    EXPECT_EQ(pool.num_blocks(), 4);
    EXPECT_EQ(pool.block_size(), 16);
    EXPECT_EQ(pool.num_free(), 4);
    std::set<BlockId> got;
    for (int i = 0; i < 4; ++i) {
        std::optional<BlockId> b = pool.allocate();
        ASSERT_TRUE(b.has_value());
        EXPECT_GE(*b, 0);
        EXPECT_LT(*b, 4);
        EXPECT_EQ(pool.ref_count(*b), 1);
        got.insert(*b);
        EXPECT_EQ(pool.num_free(), 3 - i);
        EXPECT_EQ(pool.num_in_use(), i + 1);
    }
    EXPECT_EQ(got.size(), 4u);
    EXPECT_FALSE(pool.allocate().has_value());
    pool.release(2);
    EXPECT_EQ(pool.num_free(), 1);
    EXPECT_EQ(pool.allocate(), std::optional<BlockId>(2));
}

TEST(BlockPool, RetainReleaseRefCounts) {
    BlockPool pool(2, 4, false);
    BlockId b = *pool.allocate();
    pool.retain(b);
    pool.retain(b);
    EXPECT_EQ(pool.ref_count(b), 3);
    EXPECT_EQ(pool.num_in_use(), 1);
    pool.release(b);
    pool.release(b);
    EXPECT_EQ(pool.ref_count(b), 1);
    EXPECT_EQ(pool.num_free(), 1);
    pool.release(b);
    EXPECT_EQ(pool.ref_count(b), 0);
    EXPECT_EQ(pool.num_in_use(), 0);
    EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPool, ReleaseAtZeroAborts) {
    BlockPool pool(2, 4, false);
    BlockId b = *pool.allocate();
    pool.release(b);
    EXPECT_DEATH(pool.release(b), "ref 0");
    EXPECT_DEATH(pool.retain(b), "free block");  // an uncached free block cannot be a cache hit
}

TEST(BlockPool, LookupAfterPublish) {
    BlockPool pool(4, 2, true);
    Tokens t0 = {1, 2}, t1 = {3, 4};
    BlockId a = *pool.allocate(), b = *pool.allocate();
    uint64_t k0 = pool.publish(a, BlockPool::kNoParent, t0);
    EXPECT_EQ(k0, BlockPool::block_key(BlockPool::kNoParent, t0));
    EXPECT_NE(k0, BlockPool::kNoParent);
    uint64_t k1 = pool.publish(b, k0, t1);
    EXPECT_EQ(k1, BlockPool::block_key(k0, t1));
    EXPECT_NE(k0, k1);
    EXPECT_EQ(pool.num_cached(), 2);
    EXPECT_EQ(pool.lookup(BlockPool::kNoParent, t0), std::optional<BlockId>(a));
    EXPECT_EQ(pool.lookup(k0, t1), std::optional<BlockId>(b));
    EXPECT_EQ(pool.ref_count(a), 1);  // lookup does not retain
    // Same tokens under another parent, or the second block as a first block: misses.
    EXPECT_FALSE(pool.lookup(BlockPool::kNoParent, t1).has_value());
    EXPECT_FALSE(pool.lookup(k1, t1).has_value());
    EXPECT_FALSE(pool.lookup(k0, Tokens{3, 5}).has_value());
    EXPECT_FALSE(pool.lookup(k0, Tokens{3}).has_value());  // wrong length
    // Released cached blocks stay findable and count as free; a hit takes them back.
    pool.release(b);
    pool.release(a);
    EXPECT_EQ(pool.num_in_use(), 0);
    EXPECT_EQ(pool.num_free(), 4);
    EXPECT_EQ(pool.lookup(k0, t1), std::optional<BlockId>(b));
    pool.retain(a);
    EXPECT_EQ(pool.ref_count(a), 1);
    EXPECT_EQ(pool.num_free(), 3);
    EXPECT_EQ(pool.num_in_use(), 1);
}

TEST(BlockPool, PublishOfACachedKeyIsANoOp) {
    BlockPool pool(3, 2, true);
    Tokens t = {7, 8};
    BlockId a = *pool.allocate(), b = *pool.allocate();
    uint64_t ka = pool.publish(a, BlockPool::kNoParent, t);
    uint64_t kb = pool.publish(b, BlockPool::kNoParent, t);
    EXPECT_EQ(ka, kb);
    EXPECT_EQ(pool.num_cached(), 1);
    EXPECT_EQ(pool.lookup(BlockPool::kNoParent, t), std::optional<BlockId>(a));
    EXPECT_EQ(pool.publish(a, BlockPool::kNoParent, t), ka);  // republishing the same block: still cached once
    EXPECT_EQ(pool.num_cached(), 1);
    pool.release(b);  // uncached: back on the free stack, not evictable
    EXPECT_EQ(pool.num_free(), 2);
    EXPECT_EQ(pool.num_cached(), 1);
    EXPECT_EQ(pool.allocate(), std::optional<BlockId>(b));  // free uncached blocks go before evicting
    EXPECT_EQ(pool.num_cached(), 1);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedFirst) {
    BlockPool pool(4, 1, true);
    std::vector<BlockId> blocks;
    for (int32_t i = 0; i < 4; ++i) {
        blocks.push_back(*pool.allocate());
        pool.publish(blocks[i], BlockPool::kNoParent, Tokens{i});
    }
    EXPECT_EQ(pool.num_cached(), 4);
    // Release order 2, 0, 3, 1; retaining 0 again (a hit) and releasing it makes it the most recent.
    for (int i : {2, 0, 3, 1}) pool.release(blocks[i]);
    pool.retain(blocks[0]);
    pool.release(blocks[0]);
    EXPECT_EQ(pool.num_free(), 4);
    for (int i : {2, 3, 1, 0}) {
        std::optional<BlockId> b = pool.allocate();
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(*b, blocks[i]);
        EXPECT_FALSE(pool.lookup(BlockPool::kNoParent, Tokens{i}).has_value()) << "evicted entry " << i;
    }
    EXPECT_EQ(pool.num_cached(), 0);
    EXPECT_FALSE(pool.allocate().has_value());
}

TEST(BlockPool, MissAfterEviction) {
    BlockPool pool(1, 2, true);
    Tokens t = {5, 6};
    BlockId a = *pool.allocate();
    pool.publish(a, BlockPool::kNoParent, t);
    pool.release(a);
    EXPECT_EQ(pool.lookup(BlockPool::kNoParent, t), std::optional<BlockId>(a));
    BlockId b = *pool.allocate();  // evicts a's entry
    EXPECT_EQ(b, a);
    EXPECT_FALSE(pool.lookup(BlockPool::kNoParent, t).has_value());
    EXPECT_EQ(pool.num_cached(), 0);
}

TEST(BlockPool, CollisionSafety) {
    BlockPool pool(4, 3, true);
    Tokens t = {1, 2, 3};
    BlockId a = *pool.allocate();
    uint64_t k = pool.publish(a, BlockPool::kNoParent, t);
    // A lookup that lands on the same hash-map slot with other tokens or another parent is a miss: the
    // entry's tokens and parent are compared exactly, not only the 64-bit key.
    EXPECT_FALSE(pool.lookup(BlockPool::kNoParent, Tokens{1, 2, 4}).has_value());
    EXPECT_FALSE(pool.lookup(k, t).has_value());
    // Keys are deterministic, depend on order, parent and every token, and are never kNoParent.
    EXPECT_EQ(BlockPool::block_key(7, t), BlockPool::block_key(7, t));
    EXPECT_NE(BlockPool::block_key(7, t), BlockPool::block_key(8, t));
    EXPECT_NE(BlockPool::block_key(7, Tokens{1, 2, 3}), BlockPool::block_key(7, Tokens{3, 2, 1}));
    EXPECT_NE(BlockPool::block_key(7, Tokens{0}), BlockPool::block_key(7, Tokens{0, 0}));
    std::set<uint64_t> keys;
    for (int32_t x = -50; x < 5000; ++x) {
        uint64_t key = BlockPool::block_key(BlockPool::kNoParent, Tokens{x, x + 1});
        EXPECT_NE(key, BlockPool::kNoParent);
        keys.insert(key);
    }
    EXPECT_EQ(keys.size(), 5050u);
}

TEST(BlockPool, ChildOfAnEvictedParentIsUnreachable) {
    // Parent P (tokens {1,1}) and child C under P's key. When P is evicted and cached again (a new entry
    // under the same key, which is what different content with a colliding key would look like), C must
    // not be found under it: C's KV was computed after the old P.
    BlockPool pool(3, 2, true);
    Tokens tp = {1, 1}, tc = {2, 2};
    BlockId p = *pool.allocate(), c = *pool.allocate();
    uint64_t kp = pool.publish(p, BlockPool::kNoParent, tp);
    pool.publish(c, kp, tc);
    EXPECT_EQ(pool.lookup(kp, tc), std::optional<BlockId>(c));
    pool.release(p);  // P evictable first, C stays in use
    BlockId x = *pool.allocate();
    BlockId y = *pool.allocate();  // pool exhausted: evicts P
    EXPECT_EQ(y, p);
    EXPECT_FALSE(pool.lookup(BlockPool::kNoParent, tp).has_value());
    EXPECT_FALSE(pool.lookup(kp, tc).has_value());  // parent gone
    EXPECT_EQ(pool.publish(y, BlockPool::kNoParent, tp), kp);
    EXPECT_EQ(pool.lookup(BlockPool::kNoParent, tp), std::optional<BlockId>(y));
    EXPECT_FALSE(pool.lookup(kp, tc).has_value());  // C belongs to the old parent entry
    // A child published while its parent is not cached is not cached either.
    uint64_t orphan_parent = BlockPool::block_key(BlockPool::kNoParent, Tokens{9, 9});
    pool.publish(x, orphan_parent, Tokens{3, 3});
    EXPECT_FALSE(pool.lookup(orphan_parent, Tokens{3, 3}).has_value());
    EXPECT_EQ(pool.num_cached(), 2);  // c (stale) and y
    pool.release(c);
    pool.release(x);
    pool.release(y);
    EXPECT_EQ(pool.num_in_use(), 0);
    EXPECT_EQ(pool.num_free(), 3);
}

TEST(BlockPool, DisabledCache) {
    BlockPool pool(2, 2, false);
    Tokens t = {1, 2};
    BlockId a = *pool.allocate();
    EXPECT_EQ(pool.publish(a, BlockPool::kNoParent, t), BlockPool::block_key(BlockPool::kNoParent, t));
    EXPECT_FALSE(pool.lookup(BlockPool::kNoParent, t).has_value());
    EXPECT_EQ(pool.num_cached(), 0);
    pool.release(a);
    EXPECT_EQ(pool.num_free(), 2);
    EXPECT_EQ(pool.allocate(), std::optional<BlockId>(a));
}

TEST(BlockPool, InvalidSizesAbort) {
    EXPECT_DEATH(BlockPool(0, 16, true), "num_blocks");
    EXPECT_DEATH(BlockPool(4, 0, true), "block_size");
}

}  // namespace
}  // namespace kiln::kv
