// GGUF reader (v2 and v3) over a memory map. Spec: ggml docs/gguf.md. Layout: magic "GGUF",
// u32 version, u64 tensor_count, u64 kv_count, kv pairs, tensor infos, padding to
// general.alignment (default 32), tensor data. Every count is capped and every read bounds-checked;
// a malformed file yields a Status naming the file, the field and the byte offset.
// Invariants after a successful open/parse: keys and tensor names are unique; general.alignment (if
// present) is a nonzero power-of-two u32; every tensor has a supported dtype, at most 4 dims, a row
// length that is a whole number of blocks, an aligned offset, lies inside the file and overlaps no
// other tensor. v1 and big-endian files are rejected as kUnsupported. Metadata arrays nest at most
// kGgufMaxArrayDepth deep and hold at most kGgufMaxMetadataElements elements in all (each element
// becomes a GgufValue, so this bounds the memory a small hostile file can make us allocate).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace kiln::formats {

constexpr uint32_t kGgufMaxArrayDepth = 8;
// 4M elements (~350 MB of GgufValues at worst); the largest real vocabularies (256K tokens with
// scores, types and merges) need under 1M.
constexpr uint64_t kGgufMaxMetadataElements = uint64_t(1) << 22;
constexpr uint32_t kGgufMaxDims = 4;
constexpr uint64_t kGgufDefaultAlignment = 32;

// clang-format off
enum class GgufType : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
    kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
// clang-format on
const char* gguf_type_name(GgufType t);
// Integer kinds; bool is neither.
constexpr bool gguf_is_unsigned(GgufType t) {
    return t == GgufType::kU8 || t == GgufType::kU16 || t == GgufType::kU32 || t == GgufType::kU64;
}
constexpr bool gguf_is_signed(GgufType t) {
    return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

// One metadata value. Scalars live in the matching field; arrays in `array` (nested arrays allowed).
struct GgufValue {
    GgufType type = GgufType::kU8;
    GgufType elem_type = GgufType::kU8;  // for kArray
    uint64_t u = 0;                      // unsigned ints and bool
    int64_t i = 0;                       // signed ints
    double f = 0;                        // f32 / f64
    std::string s;                       // kString
    std::vector<GgufValue> array;        // kArray

    std::optional<int64_t> as_int() const;              // any integer type or bool
    std::optional<double> as_float() const;             // any numeric type
    std::string to_string(size_t max_items = 8) const;  // for inspect
    // Same type (and element type) and same value; floats compare by bit pattern, so NaN == NaN.
    bool operator==(const GgufValue& o) const;
};

// Value makers (writer input, test expectations). Arrays carry their element type; nested arrays are
// built with gguf_array(GgufType::kArray, {...}).
GgufValue gguf_u8(uint8_t v);
GgufValue gguf_i8(int8_t v);
GgufValue gguf_u16(uint16_t v);
GgufValue gguf_i16(int16_t v);
GgufValue gguf_u32(uint32_t v);
GgufValue gguf_i32(int32_t v);
GgufValue gguf_u64(uint64_t v);
GgufValue gguf_i64(int64_t v);
GgufValue gguf_f32(float v);
GgufValue gguf_f64(double v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items);
GgufValue gguf_string_array(const std::vector<std::string>& v);
GgufValue gguf_f32_array(const std::vector<float>& v);
GgufValue gguf_i32_array(const std::vector<int32_t>& v);

struct GgufTensorInfo {
    std::string name;
    std::vector<uint64_t> shape;  // row-major, innermost last (reversed from GGUF's ne[] order)
    core::DType dtype = core::DType::kF32;
    uint32_t ggml_type = 0;  // raw ggml type id
    uint64_t offset = 0;     // relative to data_offset
    uint64_t num_bytes = 0;
    uint64_t num_elements() const;
};

class GgufFile {
public:
    static core::Result<GgufFile> open(const std::string& path);
    // Parses an in-memory image (fuzzing, tests). `name` is used in error messages. The buffer is not
    // copied: it must outlive the GgufFile (tensor_data() points into it).
    static core::Result<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name);

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    size_t file_size() const { return size_; }
    const std::string& path() const { return path_; }

    const std::vector<std::string>& keys() const { return key_order_; }  // file order
    const GgufValue* find(const std::string& key) const;
    std::optional<std::string> get_string(const std::string& key) const;
    std::optional<int64_t> get_int(const std::string& key) const;
    std::optional<double> get_float(const std::string& key) const;
    std::optional<bool> get_bool(const std::string& key) const;
    // Typed array access; nullopt if absent or elements of another kind.
    std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;
    std::optional<std::vector<float>> get_float_array(const std::string& key) const;
    std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(const std::string& name) const;
    // Raw bytes of a tensor inside the map (bounds were checked at open).
    const uint8_t* tensor_data(const GgufTensorInfo& t) const { return base_ + data_offset_ + t.offset; }

private:
    std::shared_ptr<core::MappedFile> file_;  // null when parsed from memory
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    std::string path_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::string> key_order_;
    std::map<std::string, GgufValue> kv_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace kiln::formats
