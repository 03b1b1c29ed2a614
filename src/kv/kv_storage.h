// KvStorage: the K/V rows of a paged KV cache (the block pool's data; BlockPool keeps the metadata), in
// any of the row formats of kernels/kernel_params.h KvDtype (f32, f16, int8 or fp8 codes with per-head
// scales: row_bytes each). Per layer, K and V are each [num_blocks, block_size] rows: token slot s =
// block * block_size + offset is row s, so one block of one layer is block_size * row_bytes contiguous
// bytes. See docs/kv.md "Storage layout".
// The memory is one anonymous mapping, 2 MiB aligned, committed lazily by the OS as blocks are first
// written (so a large budget costs nothing until it is used), on 4 KiB pages; collapse_blocks() hands
// the 2 MiB ranges that blocks [0, end) touch to core's background thread, which makes them huge
// pages (core/huge_pages.h): a new block range never waits on huge-page faults, which are slow on some
// VMs. prefault() commits it all at once instead (see docs/kv.md "Storage layout").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace kiln::kv {

class KvStorage {
public:
    // Bytes one block takes across every layer, K and V, for rows of row_bytes (kernels::kv_row_bytes).
    static int64_t bytes_per_block(int64_t num_layers, int64_t block_size, int64_t row_bytes);
    // kInvalidArgument for non-positive sizes; kOutOfMemory when the mapping fails.
    static core::Result<std::unique_ptr<KvStorage>> create(int64_t num_layers, int64_t num_blocks, int64_t block_size,
                                                           int64_t row_bytes);
    // Commits every page of the pool now, on huge pages where the kernel gives them (MADV_HUGEPAGE, then
    // MADV_POPULATE_WRITE per 2 MiB range, or a write per page where the kernel lacks it), the ranges
    // split over the pool's threads; nothing is left for collapse_blocks. The contents stay zero.
    void prefault(core::ThreadPool& pool);
    // Blocks [0, end) are in use or about to be: the 2 MiB ranges they touch in every layer's K and V
    // that were not handed over yet go to the background collapse. Cheap when nothing is new (one
    // comparison); call it from one thread.
    void collapse_blocks(int64_t end);
    KvStorage(const KvStorage&) = delete;
    KvStorage& operator=(const KvStorage&) = delete;

    // [num_blocks * block_size] rows of row_bytes()
    void* k(int64_t layer) const { return mem_.get() + (2 * layer) * layer_bytes_; }
    void* v(int64_t layer) const { return mem_.get() + (2 * layer + 1) * layer_bytes_; }
    int64_t row_bytes() const { return row_bytes_; }
    int64_t num_layers() const { return num_layers_; }
    int64_t num_blocks() const { return num_blocks_; }
    int64_t block_size() const { return block_size_; }
    size_t bytes() const { return bytes_; }

private:
    KvStorage() = default;
    std::shared_ptr<uint8_t> mem_;
    size_t bytes_ = 0;
    int64_t collapsed_end_ = 0;        // blocks [0, collapsed_end_) handed over
    std::vector<bool> region_handed_;  // per 2 MiB of the mapping
    int64_t num_layers_ = 0, num_blocks_ = 0, block_size_ = 0, row_bytes_ = 0, layer_bytes_ = 0;
};

}  // namespace kiln::kv
