// Test helper: assembles GGUF byte images field by field (little-endian), for hand-built v2 files and
// corrupt inputs in gguf_test.cc / gguf_corrupt_test.cc. Layout per ggml docs/gguf.md.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::test {

class GgufBytes {
public:
    GgufBytes& raw(const void* p, size_t n) {
        const uint8_t* b = static_cast<const uint8_t*>(p);
        bytes.insert(bytes.end(), b, b + n);
        return *this;
    }
    GgufBytes& u8(uint8_t v) { return raw(&v, 1); }
    GgufBytes& u32(uint32_t v) { return raw(&v, 4); }
    GgufBytes& u64(uint64_t v) { return raw(&v, 8); }
    GgufBytes& f32(float v) { return raw(&v, 4); }
    GgufBytes& str(const std::string& s) {
        u64(s.size());
        return raw(s.data(), s.size());
    }
    // magic, version, tensor_count, kv_count
    GgufBytes& header(uint32_t version, uint64_t tensor_count, uint64_t kv_count) {
        raw("GGUF", 4);
        u32(version);
        u64(tensor_count);
        return u64(kv_count);
    }
    GgufBytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
    GgufBytes& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
    // Tensor info with GGUF-order dims (ne[0] innermost first).
    GgufBytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type, uint64_t offset) {
        str(name).u32(uint32_t(ne.size()));
        for (uint64_t d : ne) u64(d);
        return u32(ggml_type).u64(offset);
    }
    GgufBytes& pad_to(size_t alignment) {
        while (bytes.size() % alignment) bytes.push_back(0);
        return *this;
    }
    GgufBytes& zeros(size_t n) {
        bytes.resize(bytes.size() + n, 0);
        return *this;
    }
    size_t size() const { return bytes.size(); }

    std::vector<uint8_t> bytes;
};

}  // namespace kiln::test
