// BPE merge loop and pair table (see bpe_merge.h).
#include "tokenizer/bpe_merge.h"

#include <algorithm>
#include <climits>
#include <cstddef>

namespace kiln::tokenizer {
namespace {

constexpr size_t kLinearMaxSymbols = 48;  // above this the heap wins over rescanning the ranks

void merge_linear(const PairTable& pairs, std::vector<int32_t>& ids, MergeScratch& s) {
    size_t n = ids.size();
    s.ranks.resize(n);
    s.merged.resize(n);
    auto score = [&](size_t i) {
        const PairTable::Entry* e = pairs.find(ids[i], ids[i + 1]);
        s.ranks[i] = e ? e->rank : INT_MAX;
        s.merged[i] = e ? e->merged : -1;
    };
    for (size_t i = 0; i + 1 < n; ++i) score(i);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; ++i)
            if (s.ranks[i] < s.ranks[best]) best = i;
        if (s.ranks[best] == INT_MAX) break;
        ids[best] = s.merged[best];
        ids.erase(ids.begin() + std::ptrdiff_t(best) + 1);
        s.ranks.erase(s.ranks.begin() + std::ptrdiff_t(best) + 1);
        s.merged.erase(s.merged.begin() + std::ptrdiff_t(best) + 1);
        --n;
        if (best > 0) score(best - 1);
        if (best + 1 < n) score(best);
    }
}

void merge_heap(const PairTable& pairs, std::vector<int32_t>& ids, MergeScratch& s) {
    const int32_t n = int32_t(ids.size());
    s.prev.resize(size_t(n));
    s.next.resize(size_t(n));
    s.heap.clear();
    auto later = [](const MergeScratch::Item& a, const MergeScratch::Item& b) {
        return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
    };
    auto push = [&](int32_t pos) {
        if (pos < 0) return;
        int32_t nx = s.next[size_t(pos)];
        if (nx < 0) return;
        const PairTable::Entry* e = pairs.find(ids[size_t(pos)], ids[size_t(nx)]);
        if (!e) return;
        s.heap.push_back({e->rank, pos, ids[size_t(pos)], ids[size_t(nx)]});
        std::push_heap(s.heap.begin(), s.heap.end(), later);
    };
    for (int32_t i = 0; i < n; ++i) {
        s.prev[size_t(i)] = i - 1;
        s.next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    }
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!s.heap.empty()) {
        std::pop_heap(s.heap.begin(), s.heap.end(), later);
        MergeScratch::Item it = s.heap.back();
        s.heap.pop_back();
        // Stale entries: a merged symbol always gets a new (longer) token, so id checks suffice.
        int32_t right = s.next[size_t(it.pos)];
        if (ids[size_t(it.pos)] != it.left || right < 0 || ids[size_t(right)] != it.right) continue;
        const PairTable::Entry* e = pairs.find(it.left, it.right);
        ids[size_t(it.pos)] = e->merged;
        ids[size_t(right)] = -1;  // dead
        int32_t after = s.next[size_t(right)];
        s.next[size_t(it.pos)] = after;
        if (after >= 0) s.prev[size_t(after)] = it.pos;
        push(s.prev[size_t(it.pos)]);
        push(it.pos);
    }
    size_t out = 0;
    for (int32_t i = 0; i >= 0 && i < n; i = s.next[size_t(i)]) ids[out++] = ids[size_t(i)];
    ids.resize(out);
}

}  // namespace

void PairTable::insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    uint64_t key = make_key(a, b);
    for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        Entry& e = slots_[i];
        if (e.key == key) {
            if (rank < e.rank) e = {key, rank, merged};
            return;
        }
        if (e.key == kEmpty) {
            e = {key, rank, merged};
            ++size_;
            return;
        }
    }
}

void PairTable::grow() {
    std::vector<Entry> old = std::move(slots_);
    size_t cap = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(cap, Entry{kEmpty, 0, 0});
    mask_ = cap - 1;
    size_ = 0;
    for (const Entry& e : old)
        if (e.key != kEmpty) insert(int32_t(e.key >> 32), int32_t(uint32_t(e.key)), e.rank, e.merged);
}

void bpe_merge(const PairTable& pairs, std::vector<int32_t>& ids, MergeScratch& scratch) {
    if (ids.size() < 2) return;
    if (ids.size() <= kLinearMaxSymbols)
        merge_linear(pairs, ids, scratch);
    else
        merge_heap(pairs, ids, scratch);
}

}  // namespace kiln::tokenizer
