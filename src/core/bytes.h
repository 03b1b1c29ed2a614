// Small byte and text helpers shared by the file readers and the tools: little-endian loads and
// stores from raw bytes (file headers read before any cursor exists), suffix tests and shape
// printing. Header-only; loads assemble bytes explicitly, so they need no alignment and behave the
// same on any host.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::core {

inline uint32_t load_u32_le(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

inline int32_t load_i32_le(const uint8_t* p) {
    uint32_t v = load_u32_le(p);
    int32_t out;
    std::memcpy(&out, &v, 4);
    return out;
}

inline uint64_t load_u64_le(const uint8_t* p) {
    return uint64_t(load_u32_le(p)) | uint64_t(load_u32_le(p + 4)) << 32;
}

inline void store_u64_le(uint64_t v, uint8_t* out) {
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(v >> (8 * i));
}

inline bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "[4096, 32000]" (row-major, innermost last, as kiln stores shapes).
inline std::string shape_string(const std::vector<uint64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace kiln::core
