// KvStorage: the K/V elements (f32, or f16 for the half-size cache) of a paged KV cache (the block pool's data;
// BlockPool keeps the metadata). Per layer, K and V are each [num_blocks, block_size, kv_dim] f32 (kv_dim =
// num_kv_heads * head_dim): token slot s = block * block_size + offset is row s, so one block of one
// layer is block_size * kv_dim contiguous floats. See docs/kv.md "Storage layout".
// The memory is one anonymous mapping (committed lazily by the OS as blocks are first written,
// MADV_HUGEPAGE advised), so a large budget costs nothing until it is used; prefault() commits it all
// at once instead, for hosts where a first touch is slow (see docs/kv.md "Storage layout").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"

namespace kiln::kv {

class KvStorage {
public:
    // Bytes one block takes across every layer, K and V.
    // elem_bytes: 4 (f32) or 2 (f16).
    static int64_t bytes_per_block(int64_t num_layers, int64_t block_size, int64_t kv_dim, int64_t elem_bytes = 4);
    // kInvalidArgument for non-positive sizes or another element size; kOutOfMemory when the mapping fails.
    static core::Result<std::unique_ptr<KvStorage>> create(int64_t num_layers, int64_t num_blocks, int64_t block_size,
                                                           int64_t kv_dim, int64_t elem_bytes = 4);
    ~KvStorage();
    // Commits every page of the pool now (MADV_POPULATE_WRITE per 2 MiB range, or a write per page where
    // the kernel lacks it), the ranges split over the pool's threads. The contents stay zero.
    void prefault(core::ThreadPool& pool);
    KvStorage(const KvStorage&) = delete;
    KvStorage& operator=(const KvStorage&) = delete;

    // [num_blocks * block_size, kv_dim] elements of elem_bytes()
    void* k(int64_t layer) const { return base_ + (2 * layer) * layer_bytes_; }
    void* v(int64_t layer) const { return base_ + (2 * layer + 1) * layer_bytes_; }
    int64_t elem_bytes() const { return elem_bytes_; }
    int64_t num_layers() const { return num_layers_; }
    int64_t num_blocks() const { return num_blocks_; }
    int64_t block_size() const { return block_size_; }
    int64_t kv_dim() const { return kv_dim_; }
    size_t bytes() const { return bytes_; }

private:
    KvStorage() = default;
    uint8_t* base_ = nullptr;
    size_t bytes_ = 0;
    int64_t num_layers_ = 0, num_blocks_ = 0, block_size_ = 0, kv_dim_ = 0, elem_bytes_ = 4, layer_bytes_ = 0;
};

}  // namespace kiln::kv
