// BlockPool: host metadata of a paged KV cache (vLLM PagedAttention, nano-vllm BlockManager). The pool
// holds num_blocks blocks of block_size token slots; the storage itself lives elsewhere and is indexed by
// BlockId. Blocks are reference counted so sequences sharing a prefix share its blocks.
//
// Prefix cache (vLLM automatic prefix caching): a full block can be published under the key
// block_key(parent key, its tokens), chaining the keys of all earlier blocks of the sequence. Cached blocks
// whose ref count drops to 0 stay cached ("evictable") and are reused on a later lookup hit; allocate()
// prefers never-used/freed blocks and otherwise evicts the least recently released cached block.
//
// Invariants:
// - Every block is in exactly one state: free (ref 0, uncached, on the free stack), evictable (ref 0,
//   cached, on the LRU list) or in use (ref > 0, cached or not). num_free() = free + evictable.
// - A hash collision never returns wrong KV: each entry keeps its parent key and tokens, which lookup()
//   compares exactly, and the unique id (never reused) of the entry its parent key named when it was
//   published; lookup() requires that entry to still be the one cached under the parent key. So once a
//   parent is evicted, its children can no longer be reached, even if different content later takes the
//   parent's key. Callers must pass as parent only kNoParent or the key of a block they hold (publish) or
//   found by walking lookups from the first block (lookup).
// - allocate(), release(), retain() are O(1) (intrusive LRU list, free stack); publish()/lookup() cost
//   O(block_size) plus a hash-map access.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace kiln::kv {

using BlockId = int32_t;

class BlockPool {
public:
    static constexpr uint64_t kNoParent = 0;

    BlockPool(int32_t num_blocks, int32_t block_size, bool prefix_cache);

    int32_t num_blocks() const { return num_blocks_; }
    int32_t block_size() const { return block_size_; }
    bool prefix_cache() const { return prefix_cache_; }
    // Blocks allocate() can return now: free ones plus evictable cached ones (ref 0).
    int32_t num_free() const { return int32_t(free_.size()) + num_evictable_; }
    int32_t num_in_use() const { return num_in_use_; }
    int32_t num_cached() const { return int32_t(cache_.size()); }

    // A block with ref 1, or nullopt when none is free. Takes a free uncached block first, else evicts
    // the least recently released cached block (dropping its cache entry).
    std::optional<BlockId> allocate();
    // ref++ (a prefix-cache hit). The block must be in use or cached; a cached block at ref 0 stops
    // being evictable.
    void retain(BlockId b);
    // ref--. At 0 a cached block becomes evictable (most recently released last), any other is freed.
    void release(BlockId b);
    int32_t ref_count(BlockId b) const;

    // Chained 64-bit hash of (parent key, tokens); never kNoParent.
    static uint64_t block_key(uint64_t parent, std::span<const int32_t> tokens);
    // The cached block for exactly (parent, tokens), or nullopt (also when the cache is disabled).
    // Does not retain the block.
    std::optional<BlockId> lookup(uint64_t parent, std::span<const int32_t> tokens) const;
    // Marks block b (ref > 0, tokens.size() == block_size) as cached under (parent, tokens) and returns
    // its key. Nothing happens when the key is already cached by another block (b stays uncached and is
    // freed normally on release), when parent is not cached, or when the cache is disabled;
    // lookup(parent, tokens) == b tells whether b was cached.
    uint64_t publish(BlockId b, uint64_t parent, std::span<const int32_t> tokens);

private:
    static constexpr BlockId kNil = -1;
    static constexpr uint64_t kNoUid = 0;

    void check_id(BlockId b) const;
    // The unique id of the entry now cached under key (kNoUid for kNoParent), or nullopt if none.
    std::optional<uint64_t> entry_uid(uint64_t key) const;
    void lru_push_back(BlockId b);
    void lru_unlink(BlockId b);
    void uncache(BlockId b);

    int32_t num_blocks_;
    int32_t block_size_;
    bool prefix_cache_;
    int32_t num_in_use_ = 0;
    int32_t num_evictable_ = 0;

    std::vector<int32_t> ref_;       // [num_blocks]
    std::vector<BlockId> free_;      // stack of free uncached blocks; back is taken first
    std::vector<BlockId> lru_prev_;  // [num_blocks] intrusive list of evictable blocks
    std::vector<BlockId> lru_next_;  // [num_blocks]
    BlockId lru_head_ = kNil;        // least recently released
    BlockId lru_tail_ = kNil;        // most recently released

    // Cache entry of each block (valid while uid_[b] != kNoUid).
    std::vector<uint64_t> uid_;         // [num_blocks] unique per publish, never reused
    std::vector<uint64_t> key_;         // [num_blocks]
    std::vector<uint64_t> parent_key_;  // [num_blocks]
    std::vector<uint64_t> parent_uid_;  // [num_blocks] kNoUid for a first block
    std::vector<int32_t> tokens_;       // [num_blocks * block_size]
    uint64_t next_uid_ = 1;
    std::unordered_map<uint64_t, BlockId> cache_;  // key -> cached block
};

}  // namespace kiln::kv
