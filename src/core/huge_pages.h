// Anonymous memory for large buffers that kernels stream (packed weights, the checkpoint's anonymous
// copy): mappings that start on a 2 MiB boundary, with MADV_HUGEPAGE, so that under transparent huge
// pages ("always" or "madvise") every whole 2 MiB of them can be one huge page. A 4 KiB-paged
// matrix streams 15-25% slower on the AVX-512 dev VM (TLB misses; the hardware prefetchers stop at
// each 4 KiB page), and a mapping that starts anywhere else gets no huge page for its first and last
// partial 2 MiB: a separate mapping per packed matrix of 2-13 MB left a quarter of tinyllama's packed
// weights on 4 KiB pages (docs/performance.md).
// Where a huge page's first touch is slow (a VM whose host backs memory lazily: ~20 ms per 2 MiB,
// against ~1.5 ms on 4 KiB pages), loading a model onto huge pages took seconds; so weights are mapped
// with HugePages::kDeferred: 4 KiB pages while they are written, turned into huge pages afterwards by
// a background thread at idle priority (MADV_COLLAPSE) once start_huge_page_collapse() is called.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "core/status.h"

namespace kiln::core {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

// kAtFirstTouch: MADV_HUGEPAGE at once, every whole 2 MiB a huge page from its first write on.
// kDeferred: 4 KiB pages until start_huge_page_collapse() hands the mapping to the background thread.
// kOnRequest: 4 KiB pages until the owner hands ranges over (collapse_in_background).
enum class HugePages { kAtFirstTouch, kDeferred, kOnRequest };

// A zero-filled mapping of `bytes` (> 0) starting on a 2 MiB boundary, huge pages advised (now or
// deferred); unmapped when the last owner goes. kInvalidArgument for 0 bytes, kOutOfMemory when the
// mapping fails.
Result<std::shared_ptr<uint8_t>> map_huge_pages(size_t bytes, HugePages when = HugePages::kAtFirstTouch);

// Hands every kDeferred mapping made so far to the background thread (started on first use, at
// SCHED_IDLE priority: it runs on cores nothing else wants), which advises huge pages and collapses
// each whole 2 MiB of them (MADV_COLLAPSE; where the kernel lacks it, khugepaged does it in its own
// time). The contents are unchanged; a mapping freed meanwhile is skipped. Thread safe.
void start_huge_page_collapse();
// Hands [offset, offset + len) of a kOnRequest mapping (offset 2 MiB aligned) to the same thread.
void collapse_in_background(std::weak_ptr<uint8_t> map, size_t offset, size_t len);
// Blocks until the mappings handed over so far are done (benchmarks: measure on huge pages).
void wait_huge_page_collapse();

// `bytes` (> 0) of zero-filled memory, 64-byte aligned, carved out of shared map_huge_pages chunks of
// kArenaChunkBytes (or one of its own when larger), one after the other, so that many buffers of a
// few MB (a model's packed matrices) are covered by huge pages end to end (kDeferred chunks). A chunk
// is unmapped when every buffer carved from it is gone; the unused end of a chunk costs address space
// only. Thread safe. Errors as map_huge_pages.
inline constexpr size_t kArenaChunkBytes = size_t(64) << 20;
Result<std::shared_ptr<uint8_t>> huge_page_buffer(size_t bytes);

// Raw blocks for HugePageAllocator: huge_alloc(bytes) maps bytes (> 0) rounded up to 2 MiB, 2 MiB
// aligned, huge pages advised (kAtFirstTouch); nullptr when the mapping fails. huge_free(p, bytes)
// with the same bytes unmaps it.
void* huge_alloc(size_t bytes);
void huge_free(void* p, size_t bytes);

// A std::allocator for growing buffers that kernels walk with strides across pages (model::KvCache's
// K and V, which decode reads one KV head's slice of each row at a time: one TLB miss per key on
// 4 KiB pages): blocks of kHugeAllocMin bytes or more come from huge_alloc, smaller ones from
// operator new. Huge pages at first touch, so a buffer written inside a timed region pays for its
// faults there (see kDeferred above); the threshold keeps short caches on the heap.
inline constexpr size_t kHugeAllocMin = size_t(16) << 20;
template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) {}
    T* allocate(size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes < kHugeAllocMin) return static_cast<T*>(::operator new(bytes));
        void* p = huge_alloc(bytes);
        if (!p) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes < kHugeAllocMin) return ::operator delete(p);
        huge_free(p, bytes);
    }
    template <class U>
    bool operator==(const HugePageAllocator<U>&) const { return true; }
};

}  // namespace kiln::core
