// MappedFile: a read-only memory map of a whole file. Readers parse straight out of the mapping and
// must bounds-check every access against size(). Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kiln::core {

class MappedFile {
public:
    static Result<MappedFile> open(const std::string& path);

    MappedFile() = default;
    MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string path_;
};

// Drops this process's page-table entries for the whole pages inside [p, p + n) when that range lies
// in a live MappedFile (MADV_DONTNEED). The file's contents are untouched: a later read faults the
// page back in from the page cache or the disk, so this is always safe; it only stops pages the
// process no longer reads (weights copied or repacked elsewhere) from counting in its resident set.
// Returns the bytes released (0 when the range is not file-mapped or holds no whole page).
size_t release_mapped_pages(const void* p, size_t n);

// Starts reading the pages of [p, p + n) from the file when that range lies in a live MappedFile
// (MADV_WILLNEED: the kernel queues the reads and returns), so that later first touches find them in
// the page cache instead of each faulting a small read of its own. For loads that will read the
// whole range soon (weights about to be copied or repacked by several threads in slices, whose
// faults the kernel's sequential readahead does not recognise). Returns the bytes advised (0 when
// the range is not file-mapped).
size_t prefetch_mapped_pages(const void* p, size_t n);

// Reads a whole (small) text file, e.g. config.json. Caps the size to refuse absurd inputs.
Result<std::string> read_text_file(const std::string& path, size_t max_bytes = size_t(256) << 20);

}  // namespace kiln::core
