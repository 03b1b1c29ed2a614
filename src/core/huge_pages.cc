// map_huge_pages: over-map by 2 MiB and trim to an aligned start. huge_page_buffer: a bump allocator
// over the current chunk, which the arena holds only weakly (its buffers own it). Deferred mappings
// wait in a list (weakly held) until start_huge_page_collapse() queues them for one detached thread.
#include "core/huge_pages.h"

#include <sched.h>
#include <sys/mman.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack it (the kernel then answers EINVAL)
#endif

namespace kiln::core {
namespace {

struct Deferred {
    std::weak_ptr<uint8_t> map;
    size_t offset = 0, len = 0;
};

// Never destroyed: the detached thread may still use it while the process exits.
struct Collapser {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Deferred> waiting;  // mapped, not yet handed over
    std::deque<Deferred> queue;     // handed over, not yet taken by the thread
    int busy = 0;                   // taken, being collapsed
    bool thread_started = false;
};

Collapser& collapser() {
    static Collapser* c = new Collapser;
    return *c;
}

// len (a multiple of 2 MiB) bytes of anonymous memory on a 2 MiB boundary: over-map by 2 MiB and trim.
// nullptr (errno set) when mmap fails.
void* aligned_map(size_t len) {
    void* p = mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const uintptr_t start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    if (aligned > start) munmap(p, aligned - start);
    const uintptr_t end = start + len + kHugePageBytes;
    if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
    return reinterpret_cast<void*>(aligned);
}

// Makes the kernel's next free 2 MiB page, most likely, one the host already backs. MADV_COLLAPSE
// copies into a new huge page while it holds the process's mmap lock for writing; on a VM whose host
// backs memory lazily the first writes to that page fault on the host for milliseconds (6-20 ms per
// 2 MiB measured), and every mmap / munmap / mprotect of the process (malloc growing a thread's heap,
// Python's allocator) waits that long: the engine thread stalled behind it (docs/performance.md
// "Huge-page collapse and the mmap lock"). A fault into a scratch mapping pays that cost instead under
// the scratch mapping's own lock (per-VMA fault locking, Linux 6.4 on; older kernels hold the mmap
// lock for reading meanwhile); unmapped at once, the page goes back to this CPU's free list, where the
// collapse right after finds it unless the thread moved to another CPU (a heuristic: measured 6.9 ->
// 0.44 ms of collapse per 2 MiB). Costs one more 2 MiB of zeroing per range.
void warm_free_huge_page() {
    void* s = aligned_map(kHugePageBytes);
    if (!s) return;
    madvise(s, kHugePageBytes, MADV_HUGEPAGE);
    static_cast<volatile uint8_t*>(s)[0] = 0;  // faults the whole 2 MiB in (zeroed by the kernel)
    munmap(s, kHugePageBytes);
}

void collapse(const Deferred& d) {
    {
        std::shared_ptr<uint8_t> m = d.map.lock();
        if (!m) return;
        madvise(m.get() + d.offset, d.len, MADV_HUGEPAGE);
    }
    // One 2 MiB at a time, the mapping held only meanwhile: its owner may let it go between steps.
    for (size_t off = d.offset; off < d.offset + d.len; off += kHugePageBytes) {
        std::shared_ptr<uint8_t> m = d.map.lock();
        if (!m) return;
        warm_free_huge_page();
        if (madvise(m.get() + off, kHugePageBytes, MADV_COLLAPSE) != 0 && errno == EINVAL) return;  // no MADV_COLLAPSE
    }
}

void collapse_loop() {
    sched_param idle{};
    sched_setscheduler(0, SCHED_IDLE, &idle);  // this thread only (Linux): best effort
    Collapser& c = collapser();
    for (;;) {
        Deferred d;
        {
            std::unique_lock<std::mutex> lock(c.mu);
            c.cv.wait(lock, [&] { return !c.queue.empty(); });
            d = std::move(c.queue.front());
            c.queue.pop_front();
            ++c.busy;
        }
        collapse(d);
        {
            std::lock_guard<std::mutex> lock(c.mu);
            --c.busy;
        }
        c.cv.notify_all();
    }
}

// Queues `ds` for the thread (started on first use).
void hand_over(std::vector<Deferred>& ds) {
    Collapser& c = collapser();
    {
        std::lock_guard<std::mutex> lock(c.mu);
        if (ds.empty()) return;
        for (Deferred& d : ds) c.queue.push_back(std::move(d));
        ds.clear();
        if (!c.thread_started) {
            std::thread(collapse_loop).detach();
            c.thread_started = true;
        }
    }
    c.cv.notify_all();
}

}  // namespace

void start_huge_page_collapse() {
    Collapser& c = collapser();
    std::vector<Deferred> ds;
    {
        std::lock_guard<std::mutex> lock(c.mu);
        ds.swap(c.waiting);
    }
    hand_over(ds);
}

void collapse_in_background(std::weak_ptr<uint8_t> map, size_t offset, size_t len) {
    std::vector<Deferred> ds{{std::move(map), offset, len}};
    hand_over(ds);
}

void wait_huge_page_collapse() {
    Collapser& c = collapser();
    std::unique_lock<std::mutex> lock(c.mu);
    c.cv.wait(lock, [&] { return c.queue.empty() && c.busy == 0; });
}

void* huge_alloc(size_t bytes) {
    const size_t len = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* p = aligned_map(len);
    if (p) madvise(p, len, MADV_HUGEPAGE);  // advisory: without THP the block keeps 4 KiB pages
    return p;
}

void huge_free(void* p, size_t bytes) {
    if (p) munmap(p, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
}

Result<std::shared_ptr<uint8_t>> map_huge_pages(size_t bytes, HugePages when) {
    if (bytes == 0) return error(StatusCode::kInvalidArgument) << "map_huge_pages: 0 bytes";
    const size_t len = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    auto* q = static_cast<uint8_t*>(aligned_map(len));
    if (!q) return error(StatusCode::kOutOfMemory) << "cannot map " << bytes << " bytes: " << std::strerror(errno);
    std::shared_ptr<uint8_t> owner(q, [len](uint8_t* r) { munmap(r, len); });
    if (when == HugePages::kAtFirstTouch) {
        madvise(q, len, MADV_HUGEPAGE);  // advisory: without THP the mapping simply keeps 4 KiB pages
    } else {
        madvise(q, len, MADV_NOHUGEPAGE);  // (under THP "always", first touches would take huge pages)
        if (when == HugePages::kOnRequest) return owner;
        Collapser& c = collapser();
        std::lock_guard<std::mutex> lock(c.mu);
        std::erase_if(c.waiting, [](const Deferred& d) { return d.map.expired(); });
        c.waiting.push_back({owner, 0, len});
    }
    return owner;
}

Result<std::shared_ptr<uint8_t>> huge_page_buffer(size_t bytes) {
    if (bytes == 0) return error(StatusCode::kInvalidArgument) << "huge_page_buffer: 0 bytes";
    const size_t need = (bytes + 63) / 64 * 64;
    static std::mutex mu;
    static std::weak_ptr<uint8_t> chunk;  // the chunk being filled; its buffers keep it alive
    static size_t used = 0, size = 0;
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<uint8_t> c = chunk.lock();
    if (!c || size - used < need) {
        const size_t chunk_bytes = need > kArenaChunkBytes ? need : kArenaChunkBytes;
        KILN_ASSIGN_OR_RETURN(c, map_huge_pages(chunk_bytes, HugePages::kDeferred));
        chunk = c;
        used = 0;
        size = (chunk_bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    }
    uint8_t* p = c.get() + used;
    used += need;
    return std::shared_ptr<uint8_t>(c, p);  // shares ownership of the chunk
}

}  // namespace kiln::core
