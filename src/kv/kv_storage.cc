// KvStorage (see kv_storage.h).
#include "kv/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>

#include "core/huge_pages.h"

namespace kiln::kv {

int64_t KvStorage::bytes_per_block(int64_t num_layers, int64_t block_size, int64_t row_bytes) {
    return 2 * num_layers * block_size * row_bytes;
}

core::Result<std::unique_ptr<KvStorage>> KvStorage::create(int64_t num_layers, int64_t num_blocks, int64_t block_size,
                                                           int64_t row_bytes) {
    if (num_layers <= 0 || num_blocks <= 0 || block_size <= 0 || row_bytes <= 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "KV storage: layers, blocks, block size and row bytes must be positive (" << num_layers << ", "
               << num_blocks << ", " << block_size << ", " << row_bytes << ")";
    std::unique_ptr<KvStorage> s(new KvStorage());
    s->num_layers_ = num_layers;
    s->num_blocks_ = num_blocks;
    s->block_size_ = block_size;
    s->row_bytes_ = row_bytes;
    s->layer_bytes_ = num_blocks * block_size * row_bytes;
    s->bytes_ = size_t(2 * num_layers) * size_t(s->layer_bytes_);
    auto mem = core::map_huge_pages(s->bytes_, core::HugePages::kOnRequest);
    if (!mem.is_ok())
        return core::error(core::StatusCode::kOutOfMemory)
               << "KV storage: cannot map " << s->bytes_ / (1 << 20) << " MiB for " << num_blocks << " blocks";
    s->mem_ = std::move(mem).value();
    s->region_handed_.assign((s->bytes_ + core::kHugePageBytes - 1) / core::kHugePageBytes, false);
    return s;
}

void KvStorage::collapse_blocks(int64_t end) {
    end = std::min(end, num_blocks_);
    if (end <= collapsed_end_) return;
    const size_t block_bytes = size_t(block_size_ * row_bytes_), R = core::kHugePageBytes;
    for (int64_t plane = 0; plane < 2 * num_layers_; ++plane) {
        const size_t lo = size_t(plane * layer_bytes_) + size_t(collapsed_end_) * block_bytes;
        const size_t hi = size_t(plane * layer_bytes_) + size_t(end) * block_bytes;
        for (size_t r = lo / R; r * R < hi; ++r) {
            if (region_handed_[r]) continue;
            region_handed_[r] = true;
            core::collapse_in_background(mem_, r * R, std::min(R, bytes_ - r * R));
        }
    }
    collapsed_end_ = end;
}

void KvStorage::prefault(core::ThreadPool& pool) {
    constexpr size_t R = core::kHugePageBytes, kPage = 4096;
    const int64_t num_ranges = int64_t((bytes_ + R - 1) / R);
    // Huge pages from the first touch (advisory: 4 KiB pages where THP is off or a fault falls back;
    // those stay so): committing the pool is what a prefault pays for at start, and 4 KiB pages
    // collapsed later would copy every range once more in the background while steps run. One call
    // for the whole mapping (its length is whole 2 MiB): the flag change takes the mmap lock.
    madvise(mem_.get(), size_t(num_ranges) * R, MADV_HUGEPAGE);
    pool.parallel_for(num_ranges, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            uint8_t* p = mem_.get() + size_t(r) * R;
            const size_t n = std::min(R, bytes_ - size_t(r) * R);
#ifdef MADV_POPULATE_WRITE
            if (madvise(p, n, MADV_POPULATE_WRITE) == 0) continue;
#endif
            for (size_t o = 0; o < n; o += kPage) reinterpret_cast<volatile uint8_t*>(p)[o] = 0;
        }
    });
    region_handed_.assign(region_handed_.size(), true);
    collapsed_end_ = num_blocks_;
}

}  // namespace kiln::kv
