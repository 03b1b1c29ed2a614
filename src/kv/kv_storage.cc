// KvStorage (see kv_storage.h).
#include "kv/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>

namespace kiln::kv {

int64_t KvStorage::bytes_per_block(int64_t num_layers, int64_t block_size, int64_t kv_dim, int64_t elem_bytes) {
    return 2 * num_layers * block_size * kv_dim * elem_bytes;
}

core::Result<std::unique_ptr<KvStorage>> KvStorage::create(int64_t num_layers, int64_t num_blocks, int64_t block_size,
                                                           int64_t kv_dim, int64_t elem_bytes) {
    if (elem_bytes != 4 && elem_bytes != 2)
        return core::error(core::StatusCode::kInvalidArgument) << "KV storage: elements of 4 (f32) or 2 (f16) bytes";
    if (num_layers <= 0 || num_blocks <= 0 || block_size <= 0 || kv_dim <= 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "KV storage: layers, blocks, block size and kv_dim must be positive (" << num_layers << ", "
               << num_blocks << ", " << block_size << ", " << kv_dim << ")";
    std::unique_ptr<KvStorage> s(new KvStorage());
    s->num_layers_ = num_layers;
    s->num_blocks_ = num_blocks;
    s->block_size_ = block_size;
    s->kv_dim_ = kv_dim;
    s->elem_bytes_ = elem_bytes;
    s->layer_bytes_ = num_blocks * block_size * kv_dim * elem_bytes;
    s->bytes_ = size_t(2 * num_layers) * size_t(s->layer_bytes_);
    void* p = mmap(nullptr, s->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return core::error(core::StatusCode::kOutOfMemory)
               << "KV storage: cannot map " << s->bytes_ / (1 << 20) << " MiB for " << num_blocks << " blocks";
#ifdef MADV_HUGEPAGE
    madvise(p, s->bytes_, MADV_HUGEPAGE);
#endif
    s->base_ = static_cast<uint8_t*>(p);
    return s;
}

void KvStorage::prefault(core::ThreadPool& pool) {
    constexpr size_t kRange = size_t(2) << 20, kPage = 4096;
    const int64_t num_ranges = int64_t((bytes_ + kRange - 1) / kRange);
    pool.parallel_for(num_ranges, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            uint8_t* p = base_ + size_t(r) * kRange;
            const size_t n = std::min(kRange, bytes_ - size_t(r) * kRange);
#ifdef MADV_POPULATE_WRITE
            if (madvise(p, n, MADV_POPULATE_WRITE) == 0) continue;
#endif
            for (size_t o = 0; o < n; o += kPage) reinterpret_cast<volatile uint8_t*>(p)[o] = 0;
        }
    });
}

KvStorage::~KvStorage() {
    if (base_) munmap(base_, bytes_);
}

}  // namespace kiln::kv
