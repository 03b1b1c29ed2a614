// mmap-backed MappedFile. Empty files map to a null pointer with size 0.
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace kiln::core {
namespace {

// The live mappings, start -> size, for release_mapped_pages.
std::mutex g_mappings_mutex;
std::map<uintptr_t, size_t>& mappings() {
    static std::map<uintptr_t, size_t> m;
    return m;
}

void unmap(const uint8_t* data, size_t size) {
    if (!data) return;
    {
        std::lock_guard<std::mutex> lock(g_mappings_mutex);
        mappings().erase(uintptr_t(data));
    }
    ::munmap(const_cast<uint8_t*>(data), size);
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        StatusCode code = errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIo;
        return error(code) << path << ": cannot open: " << std::strerror(errno);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return error(StatusCode::kIo) << path << ": not a regular file";
    }
    MappedFile f;
    f.path_ = path;
    f.size_ = size_t(st.st_size);
    if (f.size_ > 0) {
        void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            return error(StatusCode::kIo) << path << ": mmap failed: " << std::strerror(err);
        }
        f.data_ = static_cast<const uint8_t*>(p);
        std::lock_guard<std::mutex> lock(g_mappings_mutex);
        mappings()[uintptr_t(p)] = f.size_;
    }
    ::close(fd);
    return f;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        unmap(data_, size_);
        data_ = o.data_;
        size_ = o.size_;
        path_ = std::move(o.path_);
        o.data_ = nullptr;
        o.size_ = 0;
    }
    return *this;
}

MappedFile::~MappedFile() {
    unmap(data_, size_);
}

namespace {

// madvise(advice) over the pages of [p, p + n) when that range lies in a live MappedFile: the whole
// pages inside it (inner) or every page it touches (outer). Returns the bytes advised.
size_t advise_mapped(const void* p, size_t n, int advice, bool inner) {
    const uintptr_t b = uintptr_t(p), e = b + n;
    if (!p || n == 0 || e < b) return 0;
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    std::lock_guard<std::mutex> lock(g_mappings_mutex);
    auto it = mappings().upper_bound(b);  // the first mapping starting after b
    if (it == mappings().begin()) return 0;
    --it;
    if (e > it->first + it->second) return 0;  // not (wholly) inside that mapping
    const uintptr_t lo = inner ? (b + page - 1) / page * page : b / page * page;
    const uintptr_t hi = inner ? e / page * page : (e + page - 1) / page * page;
    if (hi <= lo) return 0;
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, advice) != 0) return 0;
    return hi - lo;
}

}  // namespace

size_t release_mapped_pages(const void* p, size_t n) {
    return advise_mapped(p, n, MADV_DONTNEED, true);
}

size_t prefetch_mapped_pages(const void* p, size_t n) {
    return advise_mapped(p, n, MADV_WILLNEED, false);
}

Result<std::string> read_text_file(const std::string& path, size_t max_bytes) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error(StatusCode::kNotFound) << path << ": cannot open";
    in.seekg(0, std::ios::end);
    std::streamoff n = in.tellg();
    if (n < 0) return error(StatusCode::kIo) << path << ": cannot read";
    if (size_t(n) > max_bytes) return error(StatusCode::kInvalidArgument) << path << ": " << n << " bytes, over the " << max_bytes << " byte limit";
    in.seekg(0);
    std::string s(size_t(n), '\0');
    in.read(s.data(), n);
    if (!in) return error(StatusCode::kIo) << path << ": short read";
    return s;
}

}  // namespace kiln::core
