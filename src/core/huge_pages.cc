// map_huge_pages: over-map by 2 MiB and trim to an aligned start. huge_page_buffer: a bump allocator
// over the current chunk, which the arena holds only weakly (its buffers own it).
#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace kiln::core {

Result<std::shared_ptr<uint8_t>> map_huge_pages(size_t bytes) {
    if (bytes == 0) return error(StatusCode::kInvalidArgument) << "map_huge_pages: 0 bytes";
    const size_t len = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* p = mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return error(StatusCode::kOutOfMemory) << "cannot map " << bytes << " bytes: " << std::strerror(errno);
    const uintptr_t start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    if (aligned > start) munmap(p, aligned - start);
    const uintptr_t end = start + len + kHugePageBytes;
    if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
    auto* q = reinterpret_cast<uint8_t*>(aligned);
#ifdef MADV_HUGEPAGE
    madvise(q, len, MADV_HUGEPAGE);  // advisory: without THP the mapping simply keeps 4 KiB pages
#endif
    return std::shared_ptr<uint8_t>(q, [len](uint8_t* r) { munmap(r, len); });
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
        KILN_ASSIGN_OR_RETURN(c, map_huge_pages(chunk_bytes));
        chunk = c;
        used = 0;
        size = (chunk_bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    }
    uint8_t* p = c.get() + used;
    used += need;
    return std::shared_ptr<uint8_t>(c, p);  // shares ownership of the chunk
}

}  // namespace kiln::core
