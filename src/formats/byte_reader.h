// ByteReader: a bounds-checked little-endian cursor over an in-memory file image, for the binary
// format readers (GGUF). Every read names the field it is for; a short read returns kCorrupt
// "<name>: truncated reading <field><detail> at byte offset <off> (need N bytes, M left)". The
// field name is only pasted together when a read fails (a caller reading millions of values must not
// build a string per value). The cursor never moves past the end and never reads outside
// [data, data + size).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/status.h"

namespace kiln::formats {

static_assert(std::endian::native == std::endian::little, "kiln's file readers assume a little-endian host");

class ByteReader {
public:
    ByteReader(const uint8_t* data, size_t size, std::string_view name) : data_(data), size_(size), name_(name) {}

    size_t offset() const { return pos_; }
    size_t size() const { return size_; }
    size_t remaining() const { return size_ - pos_; }
    std::string_view name() const { return name_; }

    // Reads one trivially copyable value (integers, float, double) in file (little-endian) order.
    // `detail` is appended to `field` in the error message.
    template <typename T>
    core::Result<T> read(std::string_view field, std::string_view detail = {}) {
        static_assert(std::is_trivially_copyable_v<T>);
        KILN_RETURN_IF_ERROR(need(sizeof(T), field, detail));
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    // A GGUF string: u64 byte length, then that many bytes (not NUL-terminated). The length is
    // checked against the bytes left before anything is allocated.
    core::Result<std::string> read_string(std::string_view field) {
        size_t start = pos_;
        KILN_ASSIGN_OR_RETURN(uint64_t len, read<uint64_t>(field));
        if (len > remaining()) {
            pos_ = start;
            return core::error(core::StatusCode::kCorrupt)
                   << name_ << ": " << field << " has length " << len << " but only " << remaining()
                   << " bytes follow, at byte offset " << start;
        }
        std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
        pos_ += size_t(len);
        return s;
    }

private:
    core::Status need(uint64_t n, std::string_view field, std::string_view detail = {}) const {
        if (n <= remaining()) return core::Status::ok();
        return core::error(core::StatusCode::kCorrupt)
               << name_ << ": truncated reading " << field << detail << " at byte offset " << pos_ << " (need " << n
               << " bytes, " << remaining() << " left)";
    }

    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    std::string name_;
};

}  // namespace kiln::formats
