// GGUF v3 writer (see gguf_writer.h). Little-endian host assumed (byte_reader.h asserts it).
#include "formats/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "formats/byte_reader.h"
#include "formats/ggml_type.h"

namespace kiln::formats {
namespace {

constexpr uint32_t kVersion = 3;

core::Status check_value(const GgufValue& v, const std::string& key, uint32_t depth) {
    if (v.type != GgufType::kArray) return core::Status::ok();
    if (depth >= kGgufMaxArrayDepth) {
        return core::error(core::StatusCode::kInvalidArgument)
               << "gguf writer: key '" << key << "': arrays nested more than " << kGgufMaxArrayDepth << " deep";
    }
    for (const GgufValue& item : v.array) {
        if (item.type != v.elem_type) {
            return core::error(core::StatusCode::kInvalidArgument)
                   << "gguf writer: key '" << key << "': array of " << gguf_type_name(v.elem_type) << " holds a "
                   << gguf_type_name(item.type);
        }
        KILN_RETURN_IF_ERROR(check_value(item, key, depth + 1));
    }
    return core::Status::ok();
}

}  // namespace

// Where emit() sends bytes: a vector or a FILE*. Counts bytes so padding can be computed.
class GgufWriter::Sink {
public:
    virtual ~Sink() = default;
    void bytes(const void* p, size_t n) {
        if (n == 0) return;
        put(p, n);
        written_ += n;
    }
    template <typename T>
    void pod(T v) {
        bytes(&v, sizeof(v));
    }
    void str(const std::string& s) {
        pod<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) {
        static const uint8_t kZeros[256] = {};
        while (written_ % alignment != 0) {
            uint64_t n = std::min<uint64_t>(alignment - written_ % alignment, sizeof(kZeros));
            bytes(kZeros, size_t(n));
        }
    }

protected:
    virtual void put(const void* p, size_t n) = 0;

private:
    uint64_t written_ = 0;
};

namespace {

class VectorSink : public GgufWriter::Sink {
public:
    std::vector<uint8_t> out;

protected:
    void put(const void* p, size_t n) override {
        const uint8_t* b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + n);
    }
};

class FileSink : public GgufWriter::Sink {
public:
    explicit FileSink(std::FILE* f) : f_(f) {}
    bool failed = false;

protected:
    void put(const void* p, size_t n) override {
        if (!failed && std::fwrite(p, 1, n, f_) != n) failed = true;
    }

private:
    std::FILE* f_;
};

void emit_value(GgufWriter::Sink& out, const GgufValue& v) {
    switch (v.type) {
        case GgufType::kU8:
            out.pod(uint8_t(v.u));
            break;
        case GgufType::kI8:
            out.pod(int8_t(v.i));
            break;
        case GgufType::kU16:
            out.pod(uint16_t(v.u));
            break;
        case GgufType::kI16:
            out.pod(int16_t(v.i));
            break;
        case GgufType::kU32:
            out.pod(uint32_t(v.u));
            break;
        case GgufType::kI32:
            out.pod(int32_t(v.i));
            break;
        case GgufType::kU64:
            out.pod(uint64_t(v.u));
            break;
        case GgufType::kI64:
            out.pod(int64_t(v.i));
            break;
        case GgufType::kF32:
            out.pod(float(v.f));
            break;
        case GgufType::kF64:
            out.pod(double(v.f));
            break;
        case GgufType::kBool:
            out.pod(uint8_t(v.u ? 1 : 0));
            break;
        case GgufType::kString:
            out.str(v.s);
            break;
        case GgufType::kArray:
            out.pod(uint32_t(v.elem_type));
            out.pod(uint64_t(v.array.size()));
            for (const GgufValue& item : v.array) emit_value(out, item);
            break;
    }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue v) {
    auto it = kv_index_.find(key);
    if (it != kv_index_.end()) {
        kv_[it->second].second = std::move(v);
        return;
    }
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(std::string name, core::DType dtype, std::vector<uint64_t> shape, const void* data,
                            uint64_t num_bytes) {
    KILN_CHECK(!tensor_index_.count(name)) << "gguf writer: duplicate tensor '" << name << "'";
    KILN_CHECK(shape.size() <= kGgufMaxDims) << "gguf writer: tensor '" << name << "' has " << shape.size() << " dims";
    KILN_CHECK(ggml_from_dtype(dtype).has_value())
        << "gguf writer: tensor '" << name << "': dtype " << core::dtype_name(dtype) << " has no ggml type";
    uint64_t row = shape.empty() ? 1 : shape.back();
    KILN_CHECK(row % core::dtype_info(dtype).block_size == 0)
        << "gguf writer: tensor '" << name << "': row length " << row << " is not a whole number of blocks";
    uint64_t num_elements = 1;
    for (uint64_t d : shape) num_elements *= d;
    std::optional<uint64_t> expect = core::dtype_bytes(dtype, num_elements);
    KILN_CHECK(expect && *expect == num_bytes)
        << "gguf writer: tensor '" << name << "': " << num_bytes << " bytes given for its shape";
    KILN_CHECK(data != nullptr || num_bytes == 0) << "gguf writer: tensor '" << name << "' has no data";
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(Tensor{std::move(name), dtype, std::move(shape), data, num_bytes});
}

uint64_t GgufWriter::alignment() const {
    auto it = kv_index_.find("general.alignment");
    if (it == kv_index_.end()) return kGgufDefaultAlignment;
    return kv_[it->second].second.u;
}

core::Status GgufWriter::validate() const {
    for (const auto& [key, value] : kv_) KILN_RETURN_IF_ERROR(check_value(value, key, 0));
    auto it = kv_index_.find("general.alignment");
    if (it != kv_index_.end()) {
        const GgufValue& a = kv_[it->second].second;
        if (a.type != GgufType::kU32 || a.u == 0 || (a.u & (a.u - 1)) != 0 || a.u > UINT32_MAX) {
            return core::error(core::StatusCode::kInvalidArgument)
                   << "gguf writer: general.alignment must be a nonzero power-of-two u32, got " << a.to_string();
        }
    }
    return core::Status::ok();
}

void GgufWriter::emit(Sink& out) const {
    const uint64_t align = alignment();
    out.bytes("GGUF", 4);
    out.pod(kVersion);
    out.pod(uint64_t(tensors_.size()));
    out.pod(uint64_t(kv_.size()));
    for (const auto& [key, value] : kv_) {
        out.str(key);
        out.pod(uint32_t(value.type));
        emit_value(out, value);
    }
    uint64_t offset = 0;  // relative to the start of the data section
    for (const Tensor& t : tensors_) {
        out.str(t.name);
        out.pod(uint32_t(t.shape.size()));
        for (size_t d = t.shape.size(); d-- > 0;) out.pod(t.shape[d]);  // GGUF stores ne[0] (innermost) first
        out.pod(*ggml_from_dtype(t.dtype));
        out.pod(offset);
        offset += (t.num_bytes + align - 1) / align * align;
    }
    if (tensors_.empty()) return;  // no data section, so no padding (as gguf-py writes vocab-only files)
    out.pad_to(align);
    for (const Tensor& t : tensors_) {
        out.bytes(t.data, size_t(t.num_bytes));
        out.pad_to(align);
    }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    core::Status st = validate();
    KILN_CHECK(st.is_ok()) << st.to_string();
    VectorSink sink;
    emit(sink);
    return std::move(sink.out);
}

core::Status GgufWriter::write(const std::string& path) const {
    KILN_RETURN_IF_ERROR(validate());
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) return core::error(core::StatusCode::kIo) << path << ": cannot create: " << std::strerror(errno);
    FileSink sink(f.get());
    emit(sink);
    if (sink.failed) return core::error(core::StatusCode::kIo) << path << ": write failed: " << std::strerror(errno);
    if (std::fclose(f.release()) != 0) {
        return core::error(core::StatusCode::kIo) << path << ": close failed: " << std::strerror(errno);
    }
    return core::Status::ok();
}

}  // namespace kiln::formats
