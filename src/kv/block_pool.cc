// BlockPool implementation. See block_pool.h for the block states and the prefix-cache rules.
#include "kv/block_pool.h"

#include <algorithm>

#include "core/check.h"

namespace kiln::kv {
namespace {

// splitmix64 / murmur3 finalizer: full avalanche of a 64-bit state.
uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool prefix_cache)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_cache_(prefix_cache) {
    KILN_CHECK(num_blocks > 0) << "num_blocks " << num_blocks;
    KILN_CHECK(block_size > 0) << "block_size " << block_size;
    ref_.assign(num_blocks, 0);
    free_.resize(num_blocks);
    for (int32_t i = 0; i < num_blocks; ++i) free_[i] = num_blocks - 1 - i;  // block 0 is taken first
    lru_prev_.assign(num_blocks, kNil);
    lru_next_.assign(num_blocks, kNil);
    uid_.assign(num_blocks, kNoUid);
    key_.assign(num_blocks, 0);
    parent_key_.assign(num_blocks, 0);
    parent_uid_.assign(num_blocks, kNoUid);
    if (prefix_cache) tokens_.assign(size_t(num_blocks) * size_t(block_size), 0);
}

void BlockPool::check_id(BlockId b) const {
    KILN_CHECK(b >= 0 && b < num_blocks_) << "block id " << b;
}

int32_t BlockPool::ref_count(BlockId b) const {
    check_id(b);
    return ref_[b];
}

void BlockPool::lru_push_back(BlockId b) {
    lru_prev_[b] = lru_tail_;
    lru_next_[b] = kNil;
    if (lru_tail_ != kNil) {
        lru_next_[lru_tail_] = b;
    } else {
        lru_head_ = b;
    }
    lru_tail_ = b;
    ++num_evictable_;
}

void BlockPool::lru_unlink(BlockId b) {
    BlockId prev = lru_prev_[b], next = lru_next_[b];
    if (prev != kNil) {
        lru_next_[prev] = next;
    } else {
        lru_head_ = next;
    }
    if (next != kNil) {
        lru_prev_[next] = prev;
    } else {
        lru_tail_ = prev;
    }
    lru_prev_[b] = lru_next_[b] = kNil;
    --num_evictable_;
}

void BlockPool::uncache(BlockId b) {
    auto it = cache_.find(key_[b]);
    KILN_CHECK(it != cache_.end() && it->second == b) << "cache entry of block " << b << " missing";
    cache_.erase(it);
    uid_[b] = kNoUid;
}

std::optional<BlockId> BlockPool::allocate() {
    BlockId b;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else if (lru_head_ != kNil) {
        b = lru_head_;
        lru_unlink(b);
        uncache(b);
    } else {
        return std::nullopt;
    }
    KILN_CHECK(ref_[b] == 0) << "allocated block " << b << " has ref " << ref_[b];
    ref_[b] = 1;
    ++num_in_use_;
    return b;
}

void BlockPool::retain(BlockId b) {
    check_id(b);
    if (ref_[b] == 0) {
        KILN_CHECK(uid_[b] != kNoUid) << "retain of free block " << b;
        lru_unlink(b);
        ++num_in_use_;
    }
    ++ref_[b];
}

void BlockPool::release(BlockId b) {
    check_id(b);
    KILN_CHECK(ref_[b] > 0) << "release of block " << b << " with ref 0";
    if (--ref_[b] > 0) return;
    --num_in_use_;
    if (uid_[b] != kNoUid) {
        lru_push_back(b);
    } else {
        free_.push_back(b);
    }
}

uint64_t BlockPool::block_key(uint64_t parent, std::span<const int32_t> tokens) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull) + tokens.size();
    for (int32_t t : tokens) h = mix64(h ^ (uint64_t(uint32_t(t)) * 0xff51afd7ed558ccdull));
    return h == kNoParent ? 1 : h;
}

std::optional<uint64_t> BlockPool::entry_uid(uint64_t key) const {
    if (key == kNoParent) return kNoUid;
    auto it = cache_.find(key);
    if (it == cache_.end()) return std::nullopt;
    return uid_[it->second];
}

std::optional<BlockId> BlockPool::lookup(uint64_t parent, std::span<const int32_t> tokens) const {
    if (!prefix_cache_ || tokens.size() != size_t(block_size_)) return std::nullopt;
    auto it = cache_.find(block_key(parent, tokens));
    if (it == cache_.end()) return std::nullopt;
    BlockId b = it->second;
    std::optional<uint64_t> puid = entry_uid(parent);
    if (!puid || parent_key_[b] != parent || parent_uid_[b] != *puid) return std::nullopt;
    const int32_t* stored = tokens_.data() + size_t(b) * size_t(block_size_);
    if (!std::equal(tokens.begin(), tokens.end(), stored)) return std::nullopt;
    return b;
}

uint64_t BlockPool::publish(BlockId b, uint64_t parent, std::span<const int32_t> tokens) {
    check_id(b);
    KILN_CHECK(ref_[b] > 0) << "publish of block " << b << " with ref 0";
    KILN_CHECK(tokens.size() == size_t(block_size_)) << "publish of " << tokens.size() << " tokens";
    uint64_t key = block_key(parent, tokens);
    if (!prefix_cache_) return key;
    if (uid_[b] != kNoUid) {
        KILN_CHECK(key_[b] == key) << "block " << b << " published again under another key";
        return key;
    }
    if (cache_.count(key)) return key;
    std::optional<uint64_t> puid = entry_uid(parent);
    if (!puid) return key;  // the parent is not cached: this block could never be reached
    cache_.emplace(key, b);
    uid_[b] = next_uid_++;
    key_[b] = key;
    parent_key_[b] = parent;
    parent_uid_[b] = *puid;
    std::copy(tokens.begin(), tokens.end(), tokens_.begin() + size_t(b) * size_t(block_size_));
    return key;
}

}  // namespace kiln::kv
