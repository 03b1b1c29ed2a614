// The BPE merge loop shared by both tokenizer kinds, over token ids.
//
// A word starts as a list of symbol ids (one per byte for byte-level BPE, one per character for
// SentencePiece-style BPE). The loop repeatedly merges the adjacent pair with the lowest rank,
// the leftmost one on ties, into the token the pair table names, until no adjacent pair has a
// rank. This is HF tokenizers' BPE::merge_word and llama.cpp's llm_tokenizer_bpe/_spm sessions:
// for SentencePiece vocabularies the rank of a pair is the dense rank of the merged token's score
// (higher score = lower rank, equal scores = equal rank), which reproduces sentencepiece's "best
// score, leftmost on ties" order.
//
// Short words use a rank array scanned linearly; long ones (whole SentencePiece lines) a binary
// heap with lazy invalidation, so the loop is O(n log n). No state survives a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::tokenizer {

// Open-addressing hash map (a, b) -> (rank, merged id). Immutable once built; lookups are
// lock-free reads.
class PairTable {
public:
    struct Entry {
        uint64_t key;
        int32_t rank;
        int32_t merged;
    };

    // Adds the pair unless it is already present with a lower or equal rank.
    void insert(int32_t a, int32_t b, int32_t rank, int32_t merged);
    size_t size() const { return size_; }

    const Entry* find(int32_t a, int32_t b) const {
        if (slots_.empty()) return nullptr;
        uint64_t key = make_key(a, b);
        for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            const Entry& e = slots_[i];
            if (e.key == key) return &e;
            if (e.key == kEmpty) return nullptr;
        }
    }

private:
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    static uint64_t make_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
    static uint64_t hash(uint64_t key) {
        uint64_t h = key * 0x9E3779B97F4A7C15ull;
        return h ^ (h >> 31);
    }
    void grow();

    std::vector<Entry> slots_;
    uint64_t mask_ = 0;
    size_t size_ = 0;
};

// Scratch buffers reused across words of one encode call.
struct MergeScratch {
    std::vector<int32_t> ranks, merged, prev, next;
    struct Item {
        int32_t rank, pos, left, right;
    };
    std::vector<Item> heap;
};

// Merges `ids` in place (see the file comment).
void bpe_merge(const PairTable& pairs, std::vector<int32_t>& ids, MergeScratch& scratch);

}  // namespace kiln::tokenizer
