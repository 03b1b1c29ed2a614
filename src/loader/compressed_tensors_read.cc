// compressed-tensors: reading quantization_config and turning one Linear's stored parts back into
// a runtime weight (see compressed_tensors.h). Every dtype and shape is checked before any
// quant:: routine (which asserts its invariants) sees the data. Runtime dtypes: INT8 -> I8 with row
// scales (TensorRef::row_scale, any row length), INT4 ->
// Q4_0/Q4_1, MXFP4 -> kMxfp4, NVFP4 -> kNvfp4, FP8 -> kE4m3B32, MXFP8 -> kMxfp8 when the row length
// is whole kernel blocks (32), f32 otherwise. E4M3 NaN codes in FP8 weights are kCorrupt.
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loader/compressed_tensors.h"
#include "quant/fp4_blocks.h"
#include "quant/fp8.h"
#include "quant/fp8_blocks.h"
#include "quant/ggml_blocks.h"
#include "quant/int_quant.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;
using json = nlohmann::json;

core::Status unsupported(const std::string& what) {
    return core::error(StatusCode::kUnsupported) << "compressed-tensors checkpoint: " << what;
}

const json* get(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& j, const char* key, int64_t fallback) {
    const json* v = get(j, key);
    return v && v->is_number_integer() ? v->get<int64_t>() : fallback;
}

std::string get_str(const json& j, const char* key) {
    const json* v = get(j, key);
    return v && v->is_string() ? v->get<std::string>() : "";
}

core::Result<QuantScheme> scheme_from(const std::string& format, const json& w) {
    const int64_t bits = get_int(w, "num_bits", 0);
    const std::string type = get_str(w, "type"), strategy = get_str(w, "strategy");
    const bool symmetric = !get(w, "symmetric") || (*get(w, "symmetric")).get<bool>();
    if (get(w, "actorder")) return unsupported("activation-ordered weights (actorder) are not supported");
    if (format == "int-quantized" && bits == 8 && type == "int" && strategy == "channel" && symmetric)
        return QuantScheme{QuantFormat::kInt8, 0, false};
    if (format == "pack-quantized" && bits == 4 && type == "int" && strategy == "group") {
        const int64_t g = get_int(w, "group_size", 0);
        if (g != 32 && g != 64 && g != 128)
            return unsupported("INT4 group size " + std::to_string(g) + " (32, 64, 128)");
        return QuantScheme{QuantFormat::kW4, g, !symmetric};
    }
    if ((format == "float-quantized" || format == "naive-quantized") && bits == 8 && type == "float") {
        if (strategy == "channel") return QuantScheme{QuantFormat::kFp8, 0, false};
        const json* b = get(w, "block_structure");
        if (strategy == "block" && b && *b == json::array({128, 128}))
            return QuantScheme{QuantFormat::kFp8Block, 0, false};
        return unsupported("FP8 weight strategy '" + strategy + "' (channel, or block with 128x128)");
    }
    if (format == "mxfp8-quantized" && bits == 8) return QuantScheme{QuantFormat::kMxfp8, 0, false};
    if (format == "mxfp4-pack-quantized" && bits == 4) return QuantScheme{QuantFormat::kMxfp4, 0, false};
    if (format == "nvfp4-pack-quantized" && bits == 4) return QuantScheme{QuantFormat::kNvfp4, 0, false};
    return unsupported("format '" + format + "' with " + std::to_string(bits) + "-bit " + type + " weights (" +
                       strategy + ")");
}

// ---- part checks ----
core::Result<const TensorPart*> part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                     const char* name, DType dtype, const std::vector<uint64_t>& shape) {
    auto it = parts.find(name);
    if (it == parts.end())
        return core::error(StatusCode::kCorrupt) << "quantized module '" << module << "' has no " << name;
    const TensorPart& p = it->second;
    if (p.dtype != dtype || p.shape != shape) {
        std::ostringstream want;
        for (uint64_t d : shape) want << (want.tellp() ? "," : "") << d;
        return core::error(StatusCode::kCorrupt)
               << "'" << module << "." << name << "' is " << core::dtype_name(p.dtype) << " of another shape; expected "
               << core::dtype_name(dtype) << " [" << want.str() << "]";
    }
    return &p;
}

template <typename T>
std::vector<T> copy_of(const TensorPart& p) {
    std::vector<T> v(p.num_bytes / sizeof(T));
    std::memcpy(v.data(), p.data, v.size() * sizeof(T));
    return v;
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
    TensorRef t{std::move(name), dtype, {rows, cols}, buf->data(), buf->size()};
    t.storage = std::move(buf);
    return t;
}

TensorRef own_f32(std::string name, uint64_t rows, uint64_t cols, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return own(std::move(name), DType::kF32, rows, cols, std::move(bytes));
}

// The weight's [out, in] from weight_shape (packed schemes) or the weight itself.
core::Result<std::pair<uint64_t, uint64_t>> weight_dims(const std::map<std::string, TensorPart>& parts,
                                                        const std::string& module, const char* main) {
    auto it = parts.find(main);
    if (it == parts.end())
        return core::error(StatusCode::kCorrupt) << "quantized module '" << module << "' has no " << main;
    if (it->second.shape.size() != 2)
        return core::error(StatusCode::kCorrupt) << "'" << module << "." << main << "' is not a matrix";
    uint64_t rows = it->second.shape[0], cols = it->second.shape[1];
    if (std::string(main) == "weight_packed") {
        auto sh = parts.find("weight_shape");
        if (sh != parts.end()) {
            KILN_ASSIGN_OR_RETURN(const TensorPart* p, part(parts, module, "weight_shape", DType::kI64, {2}));
            std::vector<int64_t> dims = copy_of<int64_t>(*p);
            if (dims[0] != int64_t(rows) || dims[1] <= 0 || dims[1] > int64_t(1) << 31)
                return core::error(StatusCode::kCorrupt)
                       << "'" << module << ".weight_shape' disagrees with weight_packed";
            cols = uint64_t(dims[1]);
        } else {
            cols *= it->second.dtype == DType::kI32 ? 8 : 2;  // eight INT4 per int32, two FP4 per byte
        }
    }
    if (rows == 0 || cols == 0) return core::error(StatusCode::kCorrupt) << "'" << module << "' has an empty weight";
    return std::make_pair(rows, cols);
}

}  // namespace

core::Result<std::optional<CompressedConfig>> read_quantization_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return core::error(StatusCode::kIo) << path << ": cannot open";
    std::stringstream ss;
    ss << in.rdbuf();
    const json j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return core::error(StatusCode::kCorrupt) << path << ": not a JSON object";
    const json* q = get(j, "quantization_config");
    if (!q) q = get(j, "compression_config");
    if (!q) return std::optional<CompressedConfig>();
    if (!q->is_object() || get_str(*q, "quant_method") != "compressed-tensors")
        return unsupported(path + ": quant_method '" + (q->is_object() ? get_str(*q, "quant_method") : "") +
                           "' (kiln loads compressed-tensors checkpoints)");
    const json* groups = get(*q, "config_groups");
    if (!groups || !groups->is_object() || groups->size() != 1)
        return unsupported("exactly one config group is supported");
    const json& g = groups->begin().value();
    const json* targets = get(g, "targets");
    if (!targets || *targets != json::array({"Linear"}))
        return unsupported("config group targets other than [\"Linear\"]");
    const json* w = get(g, "weights");
    if (!w || !w->is_object()) return unsupported("a config group without weight quantization");
    if (const json* a = get(g, "input_activations"); a && a->is_object()) {
        const json* dyn = get(*a, "dynamic");
        if (!dyn || *dyn == false)
            return unsupported("static activation scales (kiln quantizes activations dynamically)");
    }
    std::string format = get_str(*q, "format");
    if (const std::string gf = get_str(g, "format"); !gf.empty()) format = gf;
    CompressedConfig c;
    KILN_ASSIGN_OR_RETURN(c.scheme, scheme_from(format, *w));
    if (const json* ig = get(*q, "ignore"); ig && ig->is_array())
        for (const json& x : *ig)
            if (x.is_string()) c.ignore.push_back(x.get<std::string>());
    return std::optional<CompressedConfig>(std::move(c));
}

std::optional<std::pair<std::string, std::string>> split_quant_part(const std::string& name) {
    static const char* const kParts[] = {"weight_packed",      "weight_scale",        "weight_zero_point",
                                         "weight_shape",       "weight_global_scale", "input_scale",
                                         "input_global_scale", "input_zero_point",    "weight_g_idx"};
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) return std::nullopt;
    const std::string suffix = name.substr(dot + 1);
    for (const char* p : kParts)
        if (suffix == p) return std::make_pair(name.substr(0, dot), suffix);
    return std::nullopt;
}

core::Result<TensorRef> decompress_weight(const CompressedConfig& config, const std::string& m,
                                          const std::map<std::string, TensorPart>& parts,
                                          std::vector<std::shared_ptr<const void>>* owners) {
    const QuantScheme& s = config.scheme;
    const bool packed =
        s.format == QuantFormat::kW4 || s.format == QuantFormat::kMxfp4 || s.format == QuantFormat::kNvfp4;
    KILN_ASSIGN_OR_RETURN(auto dims, weight_dims(parts, m, packed ? "weight_packed" : "weight"));
    const auto [R, C] = dims;
    const int64_t rows = int64_t(R), cols = int64_t(C);
    const std::string name = m + ".weight";
    switch (s.format) {
        case QuantFormat::kInt8: {
            quant::Int8Matrix q{rows, cols, {}, {}};
            KILN_ASSIGN_OR_RETURN(const TensorPart* w, part(parts, m, "weight", DType::kI8, {R, C}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* sc, part(parts, m, "weight_scale", DType::kF32, {R, 1}));
            q.data = copy_of<int8_t>(*w);
            q.scales = copy_of<float>(*sc);
            KILN_RETURN_IF_ERROR(check_scales(q.scales, m));
            // I8 rows with their row scales as stored (the W8A8 kernels, any row length); the quant::
            // reference values are q * scale, exactly what weight_row decodes.
            auto scales = std::make_shared<std::vector<float>>(std::move(q.scales));
            std::vector<uint8_t> bytes(q.data.size());
            std::memcpy(bytes.data(), q.data.data(), bytes.size());
            TensorRef t = own(name, DType::kI8, R, C, std::move(bytes));
            t.row_scale = scales->data();
            owners->push_back(std::move(scales));
            return t;
        }
        case QuantFormat::kW4: {
            const int64_t words = (cols + 7) / 8, groups = (cols + s.group_size - 1) / s.group_size;
            KILN_ASSIGN_OR_RETURN(const TensorPart* w,
                                  part(parts, m, "weight_packed", DType::kI32, {R, uint64_t(words)}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* sc,
                                  part(parts, m, "weight_scale", DType::kF32, {R, uint64_t(groups)}));
            quant::Int4Matrix q;
            q.mode = s.zero_point ? quant::Int4Mode::kAsymmetric : quant::Int4Mode::kSymmetric;
            q.rows = rows;
            q.cols = cols;
            q.group_size = s.group_size;
            q.row_bytes = (cols + 1) / 2;
            q.data.assign(size_t(rows * q.row_bytes), 0);
            q.scales = copy_of<float>(*sc);
            KILN_RETURN_IF_ERROR(check_scales(q.scales, m));
            const std::vector<int32_t> pk = copy_of<int32_t>(*w);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    const uint32_t u = (uint32_t(pk[size_t(r * words + c / 8)]) >> (4 * (c % 8))) & 0xF;
                    // Stored: signed value + 8. Ours: asymmetric q = u; symmetric two's complement.
                    const uint8_t code = s.zero_point ? uint8_t(u) : uint8_t((u ^ 0x8) & 0xF);
                    uint8_t& byte = q.data[size_t(r * q.row_bytes + c / 2)];
                    byte = uint8_t(byte | (c % 2 == 0 ? code : code << 4));
                }
            if (s.zero_point) {
                KILN_ASSIGN_OR_RETURN(const TensorPart* zp, part(parts, m, "weight_zero_point", DType::kI32,
                                                                 {(R + 7) / 8, uint64_t(groups)}));
                const std::vector<int32_t> z = copy_of<int32_t>(*zp);
                q.zeros.resize(size_t(rows * groups));
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t g = 0; g < groups; ++g)
                        q.zeros[size_t(r * groups + g)] =
                            uint8_t((uint32_t(z[size_t(r / 8 * groups + g)]) >> (4 * (r % 8))) & 0xF);
            }
            if (cols % 32 == 0) {
                KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b, s.zero_point ? quant::to_q4_1(q) : quant::to_q4_0(q));
                return own(name, s.zero_point ? DType::kQ4_1 : DType::kQ4_0, R, C, std::move(b));
            }
            return own_f32(name, R, C, quant::dequantize(q));
        }
        case QuantFormat::kFp8:
        case QuantFormat::kFp8Block: {
            const bool block = s.format == QuantFormat::kFp8Block;
            quant::Fp8Matrix q;
            q.granularity = block ? quant::Fp8Granularity::kBlock128 : quant::Fp8Granularity::kPerChannel;
            q.rows = rows;
            q.cols = cols;
            std::vector<uint64_t> scale_shape = {R, 1};
            if (block) scale_shape = {(R + 127) / 128, (C + 127) / 128};
            KILN_ASSIGN_OR_RETURN(const TensorPart* w, part(parts, m, "weight", DType::kF8E4M3, {R, C}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* sc, part(parts, m, "weight_scale", DType::kF32, scale_shape));
            q.data = copy_of<uint8_t>(*w);
            q.scales = copy_of<float>(*sc);
            KILN_RETURN_IF_ERROR(check_scales(q.scales, m));
            KILN_RETURN_IF_ERROR(check_e4m3_codes(q.data, cols, m));
            if (cols % 32 == 0) {  // the FP8 kernels' blocks, exact
                KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b, quant::to_e4m3_b32_blocks(q));
                return own(name, DType::kE4m3B32, R, C, std::move(b));
            }
            return own_f32(name, R, C, quant::dequantize(q));
        }
        case QuantFormat::kMxfp8:
        case QuantFormat::kMxfp4: {
            const bool fp4 = s.format == QuantFormat::kMxfp4;
            quant::MxMatrix q;
            q.element = fp4 ? quant::kE2M1 : quant::kE4M3;
            q.rows = rows;
            q.cols = cols;
            q.row_bytes = fp4 ? (cols + 1) / 2 : cols;
            KILN_ASSIGN_OR_RETURN(const TensorPart* w,
                                  part(parts, m, fp4 ? "weight_packed" : "weight", fp4 ? DType::kU8 : DType::kF8E4M3,
                                       {R, uint64_t(q.row_bytes)}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* sc,
                                  part(parts, m, "weight_scale", DType::kU8, {R, uint64_t(q.blocks_per_row())}));
            q.data = copy_of<uint8_t>(*w);
            q.scales = copy_of<uint8_t>(*sc);
            for (uint8_t e : q.scales)
                if (e == 0xFF)
                    return core::error(StatusCode::kCorrupt) << "'" << m << "': a block scale is NaN (E8M0 0xFF)";
            if (!fp4) KILN_RETURN_IF_ERROR(check_e4m3_codes(q.data, cols, m));
            if (cols % quant::kMxBlockSize == 0) {  // the FP4 / FP8 kernels' blocks, exact
                KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b,
                                      fp4 ? quant::to_mxfp4_blocks(q) : quant::to_mxfp8_blocks(q));
                return own(name, fp4 ? DType::kMxfp4 : DType::kMxfp8, R, C, std::move(b));
            }
            return own_f32(name, R, C, quant::dequantize(q));
        }
        case QuantFormat::kNvfp4: {
            quant::Nvfp4Matrix q;
            q.rows = rows;
            q.cols = cols;
            q.row_bytes = (cols + 1) / 2;
            KILN_ASSIGN_OR_RETURN(const TensorPart* w,
                                  part(parts, m, "weight_packed", DType::kU8, {R, uint64_t(q.row_bytes)}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* sc,
                                  part(parts, m, "weight_scale", DType::kF8E4M3, {R, uint64_t(q.blocks_per_row())}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* gs, part(parts, m, "weight_global_scale", DType::kF32, {1}));
            const std::vector<float> global = copy_of<float>(*gs);
            KILN_RETURN_IF_ERROR(check_scales(global, m));
            q.data = copy_of<uint8_t>(*w);
            q.block_scales = copy_of<uint8_t>(*sc);
            q.tensor_scale = 1.0f / global[0];
            // The NVFP4 kernels take two 16-element blocks per 32-element activation block. A scale
            // product outside fp16 makes to_nvfp4_blocks fail: such a matrix stays f32.
            if (cols % 32 == 0) {
                if (auto b = quant::to_nvfp4_blocks(q); b.is_ok())
                    return own(name, DType::kNvfp4, R, C, std::move(*b));
            }
            return own_f32(name, R, C, quant::dequantize(q));
        }
    }
    return core::error(StatusCode::kInternal) << "unhandled quantization scheme";
}

}  // namespace kiln::loader
