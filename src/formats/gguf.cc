// GGUF v2/v3 parser (see gguf.h for the layout and the invariants it establishes).
// Spec: ggml docs/gguf.md. v2 and v3 share one little-endian layout (v3 only added big-endian files,
// which kiln rejects); v1 used 32-bit counts and is rejected too.
#include "formats/gguf.h"

#include <algorithm>
#include <limits>

#include "formats/byte_reader.h"
#include "formats/ggml_type.h"

namespace kiln::formats {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
// Smallest possible encodings, used to cap counts before anything is allocated.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

core::StatusBuilder corrupt(std::string_view name) {
    core::StatusBuilder b(core::StatusCode::kCorrupt);
    b << name << ": ";
    return b;
}

bool is_valid_type(uint32_t t) {
    return t <= uint32_t(GgufType::kF64);
}

// Bytes one element of `t` takes at least in the file (strings: the length; arrays: type + count).
uint64_t min_encoded_bytes(GgufType t) {
    switch (t) {
        case GgufType::kU8:
        case GgufType::kI8:
        case GgufType::kBool:
            return 1;
        case GgufType::kU16:
        case GgufType::kI16:
            return 2;
        case GgufType::kU32:
        case GgufType::kI32:
        case GgufType::kF32:
            return 4;
        case GgufType::kU64:
        case GgufType::kI64:
        case GgufType::kF64:
        case GgufType::kString:
            return 8;
        case GgufType::kArray:
            return 12;
    }
    return 1;
}

// Everything parse() collects before it builds the GgufFile.
struct ParsedGguf {
    uint32_t version = 0;
    uint64_t alignment = kGgufDefaultAlignment;
    uint64_t data_offset = 0;
    std::vector<std::string> key_order;
    std::map<std::string, GgufValue> kv;
    std::vector<GgufTensorInfo> tensors;
    std::vector<size_t> info_offsets;  // byte offset of each tensor info, for error messages
    std::map<std::string, size_t> tensor_index;
};

// Reads a T from the file and widens it into the GgufValue field that holds its kind.
template <typename T, typename Dst>
core::Status read_scalar(ByteReader& r, const std::string& field, Dst& dst) {
    KILN_ASSIGN_OR_RETURN(T x, r.read<T>(field));
    dst = Dst(x);
    return core::Status::ok();
}

// Adds "(array element k)" to an error from inside an array, once: the innermost index is the
// useful one, and the byte offset already locates it exactly.
core::Status with_element(const core::Status& st, uint64_t k) {
    if (st.message().find(" (array element ") != std::string::npos) return st;
    return core::Status(st.code(), st.message() + " (array element " + std::to_string(k) + ")");
}

class Parser {
public:
    Parser(const uint8_t* data, size_t size, const std::string& name) : r_(data, size, name), name_(name) {}

    core::Status parse_header(ParsedGguf& h, uint64_t& tensor_count, uint64_t& kv_count);
    core::Status parse_kv(uint64_t kv_count, ParsedGguf& h);
    core::Status parse_tensor_infos(uint64_t tensor_count, ParsedGguf& h);
    core::Status check_tensor_data(ParsedGguf& h);

private:
    core::Result<GgufValue> read_value(GgufType type, const std::string& field, uint32_t depth);
    core::Result<GgufValue> read_array(const std::string& field, uint32_t depth);

    ByteReader r_;
    const std::string& name_;
    uint64_t num_elements_ = 0;  // metadata array elements materialized so far
};

core::Status Parser::parse_header(ParsedGguf& h, uint64_t& tensor_count, uint64_t& kv_count) {
    KILN_ASSIGN_OR_RETURN(uint32_t magic, r_.read<uint32_t>("magic"));
    if (magic != kGgufMagic) {
        return corrupt(name_) << "bad magic 0x" << std::hex << magic << std::dec
                              << " (expected \"GGUF\"), not a GGUF file, at byte offset 0";
    }
    KILN_ASSIGN_OR_RETURN(h.version, r_.read<uint32_t>("version"));
    if (h.version == 1) {
        return core::error(core::StatusCode::kUnsupported)
               << name_ << ": GGUF version 1 is not supported (only v2 and v3), at byte offset 4";
    }
    if (h.version != 2 && h.version != 3) {
        uint32_t swapped = __builtin_bswap32(h.version);
        if (swapped >= 1 && swapped <= 3) {
            return core::error(core::StatusCode::kUnsupported)
                   << name_ << ": big-endian GGUF file (version field reads 0x" << std::hex << h.version << std::dec
                   << ") is not supported, at byte offset 4";
        }
        return core::error(core::StatusCode::kUnsupported)
               << name_ << ": unsupported GGUF version " << h.version << " (only v2 and v3), at byte offset 4";
    }
    size_t count_off = r_.offset();
    KILN_ASSIGN_OR_RETURN(tensor_count, r_.read<uint64_t>("tensor_count"));
    KILN_ASSIGN_OR_RETURN(kv_count, r_.read<uint64_t>("kv_count"));
    uint64_t left = r_.remaining();
    if (tensor_count > left / kMinTensorInfoBytes || kv_count > left / kMinKvBytes ||
        tensor_count * kMinTensorInfoBytes + kv_count * kMinKvBytes > left) {
        return corrupt(name_) << "header longer than the file: tensor_count " << tensor_count << " and kv_count "
                              << kv_count << " need more than the " << left << " bytes left, at byte offset "
                              << count_off;
    }
    return core::Status::ok();
}

core::Result<GgufValue> Parser::read_value(GgufType type, const std::string& field, uint32_t depth) {
    GgufValue v;
    v.type = type;
    switch (type) {
        case GgufType::kU8:
            KILN_RETURN_IF_ERROR(read_scalar<uint8_t>(r_, field, v.u));
            break;
        case GgufType::kI8:
            KILN_RETURN_IF_ERROR(read_scalar<int8_t>(r_, field, v.i));
            break;
        case GgufType::kU16:
            KILN_RETURN_IF_ERROR(read_scalar<uint16_t>(r_, field, v.u));
            break;
        case GgufType::kI16:
            KILN_RETURN_IF_ERROR(read_scalar<int16_t>(r_, field, v.i));
            break;
        case GgufType::kU32:
            KILN_RETURN_IF_ERROR(read_scalar<uint32_t>(r_, field, v.u));
            break;
        case GgufType::kI32:
            KILN_RETURN_IF_ERROR(read_scalar<int32_t>(r_, field, v.i));
            break;
        case GgufType::kU64:
            KILN_RETURN_IF_ERROR(read_scalar<uint64_t>(r_, field, v.u));
            break;
        case GgufType::kI64:
            KILN_RETURN_IF_ERROR(read_scalar<int64_t>(r_, field, v.i));
            break;
        case GgufType::kF32:
            KILN_RETURN_IF_ERROR(read_scalar<float>(r_, field, v.f));
            break;
        case GgufType::kF64:
            KILN_RETURN_IF_ERROR(read_scalar<double>(r_, field, v.f));
            break;
        case GgufType::kString: {
            KILN_ASSIGN_OR_RETURN(v.s, r_.read_string(field));
            break;
        }
        case GgufType::kBool: {
            size_t off = r_.offset();
            KILN_ASSIGN_OR_RETURN(uint8_t b, r_.read<uint8_t>(field));
            if (b > 1)
                return corrupt(name_) << field << ": bool byte " << int(b) << " is not 0 or 1, at byte offset " << off;
            v.u = b;
            break;
        }
        case GgufType::kArray:
            return read_array(field, depth + 1);
    }
    return v;
}

core::Result<GgufValue> Parser::read_array(const std::string& field, uint32_t depth) {
    size_t off = r_.offset();
    if (depth > kGgufMaxArrayDepth) {
        return corrupt(name_) << field << ": arrays nested more than " << kGgufMaxArrayDepth << " deep, at byte offset "
                              << off;
    }
    // The detail strings are only joined to `field` on error: a file of millions of tiny nested
    // arrays under one long key must not copy the key once per array.
    KILN_ASSIGN_OR_RETURN(uint32_t elem, r_.read<uint32_t>(field, " (array element type)"));
    if (!is_valid_type(elem)) {
        return corrupt(name_) << field << ": unknown array element type " << elem << " at byte offset " << off;
    }
    GgufValue v;
    v.type = GgufType::kArray;
    v.elem_type = GgufType(elem);
    size_t count_off = r_.offset();
    KILN_ASSIGN_OR_RETURN(uint64_t count, r_.read<uint64_t>(field, " (array count)"));
    if (count > r_.remaining() / min_encoded_bytes(v.elem_type)) {
        return corrupt(name_) << field << ": array count " << count << " of " << gguf_type_name(v.elem_type)
                              << " exceeds the " << r_.remaining() << " bytes left, at byte offset " << count_off;
    }
    if (count > kGgufMaxMetadataElements - num_elements_) {
        return corrupt(name_) << field << ": more than " << kGgufMaxMetadataElements
                              << " metadata array elements in all, at byte offset " << count_off;
    }
    num_elements_ += count;
    v.array.reserve(size_t(count));
    for (uint64_t k = 0; k < count; ++k) {
        core::Result<GgufValue> item = read_value(v.elem_type, field, depth);
        if (!item.is_ok()) return with_element(item.status(), k);
        v.array.push_back(std::move(item).value());
    }
    return v;
}

core::Status Parser::parse_kv(uint64_t kv_count, ParsedGguf& h) {
    for (uint64_t k = 0; k < kv_count; ++k) {
        size_t key_off = r_.offset();
        KILN_ASSIGN_OR_RETURN(std::string key, r_.read_string("key of metadata entry #" + std::to_string(k)));
        if (h.kv.count(key))
            return corrupt(name_) << "duplicate metadata key '" << key << "' at byte offset " << key_off;
        size_t type_off = r_.offset();
        std::string field = "value of key '" + key + "'";
        KILN_ASSIGN_OR_RETURN(uint32_t type, r_.read<uint32_t>("type of key '" + key + "'"));
        if (!is_valid_type(type)) {
            return corrupt(name_) << "key '" << key << "' has unknown value type " << type << " at byte offset "
                                  << type_off;
        }
        size_t value_off = r_.offset();
        KILN_ASSIGN_OR_RETURN(GgufValue value, read_value(GgufType(type), field, 0));
        if (key == "general.alignment") {
            if (value.type != GgufType::kU32) {
                return corrupt(name_) << "general.alignment must be u32, not " << gguf_type_name(value.type)
                                      << ", at byte offset " << value_off;
            }
            if (value.u == 0 || (value.u & (value.u - 1)) != 0) {
                return corrupt(name_) << "general.alignment " << value.u
                                      << " is not a nonzero power of two, at byte offset " << value_off;
            }
            h.alignment = value.u;
        }
        h.key_order.push_back(key);
        h.kv.emplace(std::move(key), std::move(value));
    }
    return core::Status::ok();
}

core::Status Parser::parse_tensor_infos(uint64_t tensor_count, ParsedGguf& h) {
    // tensor_count is capped by the bytes left (parse_header), but a GgufTensorInfo is far larger than
    // its smallest encoding: reserve only a sane amount up front and let the vector grow past it.
    h.tensors.reserve(size_t(std::min<uint64_t>(tensor_count, 65536)));
    for (uint64_t k = 0; k < tensor_count; ++k) {
        size_t info_off = r_.offset();
        GgufTensorInfo t;
        KILN_ASSIGN_OR_RETURN(t.name, r_.read_string("name of tensor #" + std::to_string(k)));
        if (h.tensor_index.count(t.name)) {
            return corrupt(name_) << "duplicate tensor name '" << t.name << "' at byte offset " << info_off;
        }
        const std::string what = "tensor '" + t.name + "'";
        size_t dims_off = r_.offset();
        KILN_ASSIGN_OR_RETURN(uint32_t n_dims, r_.read<uint32_t>("n_dims of " + what));
        if (n_dims > kGgufMaxDims) {
            return corrupt(name_) << what << " has n_dims " << n_dims << " (at most " << kGgufMaxDims
                                  << "), at byte offset " << dims_off;
        }
        uint64_t ne[kGgufMaxDims] = {1, 1, 1, 1};  // GGUF order: ne[0] is the innermost (row) length
        uint64_t num_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            size_t dim_off = r_.offset();
            KILN_ASSIGN_OR_RETURN(ne[d], r_.read<uint64_t>("dimension " + std::to_string(d) + " of " + what));
            if (ne[d] != 0 && num_elements > uint64_t(std::numeric_limits<int64_t>::max()) / ne[d]) {
                return corrupt(name_) << what << ": element count overflows at dimension " << d << ", at byte offset "
                                      << dim_off;
            }
            num_elements *= ne[d];
        }
        for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(ne[d]);
        size_t type_off = r_.offset();
        KILN_ASSIGN_OR_RETURN(t.ggml_type, r_.read<uint32_t>("type of " + what));
        std::optional<core::DType> dtype = dtype_from_ggml(t.ggml_type);
        if (!dtype) {
            return core::error(core::StatusCode::kUnsupported)
                   << name_ << ": " << what << " has ggml type " << t.ggml_type << " (" << ggml_type_name(t.ggml_type)
                   << "), which kiln does not support, at byte offset " << type_off;
        }
        t.dtype = *dtype;
        const core::DTypeInfo& info = core::dtype_info(t.dtype);
        if (ne[0] % info.block_size != 0) {
            return corrupt(name_) << what << ": row length " << ne[0] << " is not a multiple of the " << info.name
                                  << " block size " << info.block_size << ", at byte offset " << dims_off;
        }
        std::optional<uint64_t> num_bytes = core::dtype_bytes(t.dtype, num_elements);
        if (!num_bytes) return corrupt(name_) << what << ": byte size overflows, at byte offset " << dims_off;
        t.num_bytes = *num_bytes;
        size_t offset_off = r_.offset();
        KILN_ASSIGN_OR_RETURN(t.offset, r_.read<uint64_t>("data offset of " + what));
        if (t.offset % h.alignment != 0) {
            return corrupt(name_) << what << ": data offset " << t.offset << " is not a multiple of the alignment "
                                  << h.alignment << ", at byte offset " << offset_off;
        }
        h.tensor_index.emplace(t.name, h.tensors.size());
        h.info_offsets.push_back(info_off);
        h.tensors.push_back(std::move(t));
    }
    return core::Status::ok();
}

core::Status Parser::check_tensor_data(ParsedGguf& h) {
    uint64_t end_of_infos = r_.offset();
    h.data_offset = (end_of_infos + h.alignment - 1) / h.alignment * h.alignment;
    if (h.tensors.empty()) return core::Status::ok();
    if (h.data_offset > r_.size()) {
        return corrupt(name_) << "header longer than the file: tensor data would start at byte offset " << h.data_offset
                              << " but the file has " << r_.size() << " bytes";
    }
    uint64_t data_size = r_.size() - h.data_offset;
    for (size_t k = 0; k < h.tensors.size(); ++k) {
        const GgufTensorInfo& t = h.tensors[k];
        if (t.offset > data_size || t.num_bytes > data_size - t.offset) {
            return corrupt(name_) << "tensor '" << t.name << "' data (" << t.num_bytes << " bytes at data offset "
                                  << t.offset << ") extends past the end of the file (" << data_size
                                  << " data bytes), tensor info at byte offset " << h.info_offsets[k];
        }
    }
    std::vector<size_t> order(h.tensors.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return h.tensors[a].offset < h.tensors[b].offset; });
    const GgufTensorInfo* prev = nullptr;
    for (size_t k : order) {
        const GgufTensorInfo& t = h.tensors[k];
        if (t.num_bytes == 0) continue;
        if (prev && t.offset < prev->offset + prev->num_bytes) {
            return corrupt(name_) << "tensors '" << prev->name << "' and '" << t.name << "' overlap at byte offset "
                                  << h.data_offset + t.offset;
        }
        prev = &t;
    }
    return core::Status::ok();
}

}  // namespace

uint64_t GgufTensorInfo::num_elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
}

core::Result<GgufFile> GgufFile::open(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(core::MappedFile mapped, core::MappedFile::open(path));
    auto file = std::make_shared<core::MappedFile>(std::move(mapped));
    KILN_ASSIGN_OR_RETURN(GgufFile g, parse(file->data(), file->size(), path));
    g.file_ = std::move(file);
    return g;
}

core::Result<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
    static const uint8_t kEmpty = 0;
    if (data == nullptr) data = &kEmpty;  // an empty mapping; every read then fails as truncated
    Parser p(data, size, name);
    ParsedGguf h;
    uint64_t tensor_count = 0, kv_count = 0;
    KILN_RETURN_IF_ERROR(p.parse_header(h, tensor_count, kv_count));
    KILN_RETURN_IF_ERROR(p.parse_kv(kv_count, h));
    KILN_RETURN_IF_ERROR(p.parse_tensor_infos(tensor_count, h));
    KILN_RETURN_IF_ERROR(p.check_tensor_data(h));

    GgufFile g;
    g.base_ = data;
    g.size_ = size;
    g.path_ = name;
    g.version_ = h.version;
    g.alignment_ = h.alignment;
    g.data_offset_ = h.data_offset;
    g.key_order_ = std::move(h.key_order);
    g.kv_ = std::move(h.kv);
    g.tensors_ = std::move(h.tensors);
    g.tensor_index_ = std::move(h.tensor_index);
    return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::kString) return std::nullopt;
    return v->s;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
    const GgufValue* v = find(key);
    return v ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
    const GgufValue* v = find(key);
    return v ? v->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::kBool) return std::nullopt;
    return v->u != 0;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::kArray || v->elem_type != GgufType::kString) return std::nullopt;
    std::vector<std::string> out;
    out.reserve(v->array.size());
    for (const GgufValue& x : v->array) out.push_back(x.s);
    return out;
}

std::optional<std::vector<float>> GgufFile::get_float_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::kArray || v->elem_type == GgufType::kBool) return std::nullopt;
    std::vector<float> out;
    out.reserve(v->array.size());
    for (const GgufValue& x : v->array) {
        std::optional<double> f = x.as_float();
        if (!f) return std::nullopt;
        out.push_back(float(*f));
    }
    return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::kArray || v->elem_type == GgufType::kBool) return std::nullopt;
    std::vector<int64_t> out;
    out.reserve(v->array.size());
    for (const GgufValue& x : v->array) {
        std::optional<int64_t> i = x.as_int();
        if (!i) return std::nullopt;
        out.push_back(*i);
    }
    return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kiln::formats
