// Reading one quantized Linear's stored parts (see quant_parts.h).
#include "loader/quant_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/numeric.h"
#include "quant/fp8_blocks.h"
#include "quant/ggml_blocks.h"
#include "quant/int_quant.h"

namespace kiln::loader::quant_parts {

using core::DType;
using core::StatusCode;

std::string shape_text(const std::vector<uint64_t>& shape) {
    std::ostringstream o;
    o << "[";
    for (size_t i = 0; i < shape.size(); ++i) o << (i ? "," : "") << shape[i];
    o << "]";
    return o.str();
}

core::Result<const TensorPart*> find_part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                          const char* name) {
    auto it = parts.find(name);
    if (it == parts.end())
        return core::error(StatusCode::kCorrupt) << "quantized module '" << module << "' has no " << name;
    return &it->second;
}

core::Status wrong_part(const std::string& module, const char* name, const TensorPart& p, const std::string& want) {
    return core::error(StatusCode::kCorrupt) << "'" << module << "." << name << "' is " << core::dtype_name(p.dtype)
                                             << " " << shape_text(p.shape) << "; expected " << want;
}

core::Result<const TensorPart*> part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                     const char* name, DType dtype, const std::vector<uint64_t>& shape) {
    KILN_ASSIGN_OR_RETURN(const TensorPart* p, find_part(parts, module, name));
    if (p->dtype != dtype || p->shape != shape)
        return wrong_part(module, name, *p, std::string(core::dtype_name(dtype)) + " " + shape_text(shape));
    return p;
}

// A float part (f32 as kiln writes it; bf16 or f16 as llmcompressor writes scales, in the model's
// dtype) as f32, exactly. With `tensor`, any shape of one element, repeated to `shape`'s size.
core::Result<std::vector<float>> float_part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                            const char* name, const std::vector<uint64_t>& shape, bool tensor) {
    KILN_ASSIGN_OR_RETURN(const TensorPart* p, find_part(parts, module, name));
    uint64_t stored = 1, want = 1;
    for (uint64_t d : p->shape) stored *= d;
    for (uint64_t d : shape) want *= d;
    const bool shape_ok = tensor ? stored == 1 && p->shape.size() <= 2 : p->shape == shape;
    const bool dtype_ok = p->dtype == DType::kF32 || p->dtype == DType::kBF16 || p->dtype == DType::kF16;
    if (!shape_ok || !dtype_ok)
        return wrong_part(module, name, *p, "F32, BF16 or F16 " + (tensor ? std::string("[1]") : shape_text(shape)));
    std::vector<float> v(static_cast<size_t>(stored));
    for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h = 0;
        if (p->dtype == DType::kF32) {
            std::memcpy(&v[i], p->data + 4 * i, 4);
            continue;
        }
        std::memcpy(&h, p->data + 2 * i, 2);
        v[i] = p->dtype == DType::kBF16 ? core::bf16_to_f32(h) : core::fp16_to_f32(h);
    }
    if (tensor) v.assign(size_t(want), v[0]);
    return v;
}

// Field i of `bits` bits in int32 words packed densely (field i at bit i * bits, possibly straddling
// two words; compressed-tensors' pack_to_int32), as stored (unsigned). Word k is words[k * stride].
uint32_t packed_field(const int32_t* words, int64_t stride, int64_t i, int bits) {
    const int64_t bit = i * bits, k = bit / 32;
    const int off = int(bit % 32);
    uint64_t v = uint64_t(uint32_t(words[k * stride])) >> off;
    if (off + bits > 32) v |= uint64_t(uint32_t(words[(k + 1) * stride])) << (32 - off);
    return uint32_t(v) & ((1u << bits) - 1);
}

core::Status check_scales(const std::vector<float>& s, const std::string& module) {
    for (float x : s)
        if (!std::isfinite(x) || x <= 0)
            return core::error(StatusCode::kCorrupt)
                   << "'" << module << "': a weight scale is " << x << " (must be > 0)";
    return core::Status::ok();
}

core::Status check_e4m3_codes(const std::vector<uint8_t>& codes, int64_t cols, const std::string& module) {
    const int64_t i = quant::find_e4m3_nan(codes);
    if (i < 0) return core::Status::ok();
    return core::error(StatusCode::kCorrupt) << "'" << module << "': weight element (" << i / cols << ", " << i % cols
                                             << ") is an E4M3 NaN code (0x" << std::hex << int(codes[size_t(i)]) << ")";
}

// A tensor that owns its bytes (TensorRef::storage).
TensorRef own(std::string name, DType dtype, uint64_t rows, uint64_t cols, std::vector<uint8_t> bytes) {
    auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    TensorRef t{std::move(name), dtype, {rows, cols}, buf->data(), buf->size(), nullptr, {}};
    t.storage = std::move(buf);
    return t;
}

TensorRef own_f32(std::string name, uint64_t rows, uint64_t cols, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return own(std::move(name), DType::kF32, rows, cols, std::move(bytes));
}

// I8 rows with their row scales as stored (the W8A8 kernels, any row length); the values are
// q * scale, what weight_row decodes.
TensorRef int8_rows(std::string name, uint64_t rows, uint64_t cols, std::vector<uint8_t> q, std::vector<float> scales,
                    std::vector<std::shared_ptr<const void>>* owners) {
    auto kept = std::make_shared<std::vector<float>>(std::move(scales));
    TensorRef t = own(std::move(name), DType::kI8, rows, cols, std::move(q));
    t.row_scale = kept->data();
    owners->push_back(std::move(kept));
    return t;
}

core::Result<std::vector<int32_t>> group_index(const std::map<std::string, TensorPart>& parts, const std::string& m,
                                               const char* name, int64_t cols, int64_t group, bool required) {
    if (!parts.count(name) && !required) return std::vector<int32_t>();
    const int64_t groups = (cols + group - 1) / group;
    KILN_ASSIGN_OR_RETURN(const TensorPart* gi, part(parts, m, name, DType::kI32, {uint64_t(cols)}));
    std::vector<int32_t> g_idx = copy_of<int32_t>(*gi);
    bool contiguous = true;
    for (int64_t c = 0; c < cols; ++c) {
        if (g_idx[size_t(c)] < 0 || g_idx[size_t(c)] >= groups)
            return core::error(StatusCode::kCorrupt) << "'" << m << "." << name << "' names group " << g_idx[size_t(c)]
                                                     << " of " << groups << " (column " << c << ")";
        contiguous = contiguous && g_idx[size_t(c)] == c / group;
    }
    if (contiguous) g_idx.clear();
    return g_idx;
}

core::Result<TensorRef> int_weight(const std::string& name, int64_t rows, int64_t cols, int64_t group, int bits,
                                   const std::vector<uint8_t>& codes, const std::vector<int32_t>& zeros,
                                   std::vector<float> scales, const std::vector<int32_t>& g_idx,
                                   std::vector<std::shared_ptr<const void>>* owners) {
    const int64_t groups = int64_t(scales.size()) / rows;
    const uint64_t R = uint64_t(rows), C = uint64_t(cols);
    auto all_zeros = [&](int32_t v) { return std::all_of(zeros.begin(), zeros.end(), [v](int32_t z) { return z == v; }); };
    const bool blocks = g_idx.empty() && cols % 32 == 0 && group % 32 == 0;
    const bool zeros_fit = std::all_of(zeros.begin(), zeros.end(), [](int32_t z) { return z >= 0 && z <= 255; });
    if (blocks && bits == 4 && zeros_fit) {
        const bool symmetric = all_zeros(8);
        quant::Int4Matrix q = quant::empty_int4(rows, cols, group, symmetric ? quant::Int4Mode::kSymmetric
                                                                              : quant::Int4Mode::kAsymmetric);
        q.scales = std::move(scales);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                const uint8_t u = codes[size_t(r * cols + c)];
                const uint8_t code = symmetric ? uint8_t((u ^ 0x8) & 0xF) : u;  // symmetric: two's complement
                uint8_t& byte = q.data[size_t(r * q.row_bytes + c / 2)];
                byte = uint8_t(byte | (c % 2 == 0 ? code : code << 4));
            }
        if (!symmetric)
            for (size_t i = 0; i < zeros.size(); ++i) q.zeros[i] = uint8_t(zeros[i]);
        KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b, symmetric ? quant::to_q4_0(q) : quant::to_q4_1(q));
        return own(name, symmetric ? DType::kQ4_0 : DType::kQ4_1, R, C, std::move(b));
    }
    if (g_idx.empty() && bits == 8 && all_zeros(128) && (groups == 1 || blocks)) {
        std::vector<int8_t> q(codes.size());  // symmetric 8-bit: code - 128 is exact in int8
        for (size_t i = 0; i < q.size(); ++i) q[i] = int8_t(int32_t(codes[i]) - 128);
        if (groups == 1) {
            std::vector<uint8_t> bytes(q.size());
            std::memcpy(bytes.data(), q.data(), bytes.size());
            return int8_rows(name, R, C, std::move(bytes), std::move(scales), owners);
        }
        KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b, quant::to_q8_0(q, rows, cols, scales, group));
        return own(name, DType::kQ8_0, R, C, std::move(b));
    }
    std::vector<float> f(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t k = r * groups + (g_idx.empty() ? c / group : g_idx[size_t(c)]);
            f[size_t(r * cols + c)] = float(int32_t(codes[size_t(r * cols + c)]) - zeros[size_t(k)]) * scales[size_t(k)];
        }
    return own_f32(name, R, C, f);
}

}  // namespace kiln::loader::quant_parts
