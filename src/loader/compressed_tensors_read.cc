// compressed-tensors: reading quantization_config and turning one Linear's stored parts back into
// a runtime weight (see compressed_tensors.h). Every dtype and shape is checked before any
// quant:: routine (which asserts its invariants) sees the data. Runtime dtypes: INT8 -> I8 with row
// scales (TensorRef::row_scale, any row length), packed INT4 -> Q4_0/Q4_1, packed INT8 -> I8 rows or
// Q8_0, MXFP4 -> kMxfp4, NVFP4 -> kNvfp4, FP8 -> kE4m3B32, MXFP8 -> kMxfp8 when the row length is
// whole kernel blocks (32), f32 otherwise. E4M3 NaN codes in FP8 weights are kCorrupt.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/numeric.h"
#include "loader/compressed_tensors.h"
#include "loader/quant_parts.h"
#include "quant/fp4_blocks.h"
#include "quant/fp8.h"
#include "quant/fp8_blocks.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;
using json = nlohmann::json;
using namespace quant_parts;

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

// GPTQ's "actorder": null / false / "static" / "weight" only changed the order in which it visited
// columns (groups stay contiguous); "group" / true group columns by weight_g_idx.
core::Result<bool> act_order_groups(const json& w) {
    const json* a = get(w, "actorder");
    if (!a || *a == false || *a == "static" || *a == "weight") return false;
    if (*a == true || *a == "group") return true;
    return unsupported("actorder " + a->dump());
}

core::Result<QuantScheme> scheme_from(const std::string& format, const json& w) {
    const int64_t bits = get_int(w, "num_bits", 0);
    const std::string type = get_str(w, "type"), strategy = get_str(w, "strategy");
    const json* sym = get(w, "symmetric");
    const bool symmetric = !sym || *sym == true;
    const std::string what = "format '" + format + "' with " + std::to_string(bits) + "-bit " + type + " weights (" +
                             strategy + (symmetric ? "" : ", asymmetric") + ")";
    KILN_ASSIGN_OR_RETURN(const bool act_order, act_order_groups(w));
    if (act_order && format != "pack-quantized") return unsupported("act-order groups (g_idx) in " + what);
    QuantScheme s;
    if (format == "int-quantized" && bits == 8 && type == "int" && symmetric &&
        (strategy == "channel" || strategy == "tensor")) {
        s.format = QuantFormat::kInt8;
        s.tensor_scale = strategy == "tensor";
        return s;
    }
    if (format == "pack-quantized" && type == "int" && bits >= 2 && bits <= 8 &&
        (strategy == "group" || strategy == "channel")) {
        s.format = QuantFormat::kPackedInt;
        s.bits = int(bits);
        s.zero_point = !symmetric;
        s.act_order = act_order;
        if (strategy == "group") {
            s.group_size = get_int(w, "group_size", 0);
            if (s.group_size <= 0 || s.group_size > int64_t(1) << 31)
                return unsupported(what + " without a valid group_size");
        }
        return s;
    }
    if ((format == "float-quantized" || format == "naive-quantized") && bits == 8 && type == "float" && symmetric) {
        const json* b = get(w, "block_structure");
        if (strategy == "channel" || strategy == "tensor") {
            s.format = QuantFormat::kFp8;
            s.tensor_scale = strategy == "tensor";
        } else if (strategy == "block" && b && *b == json::array({128, 128})) {
            s.format = QuantFormat::kFp8Block;
        } else {
            return unsupported(what + ": FP8 weights per channel, per tensor or in 128x128 blocks");
        }
        return s;
    }
    if (format == "mxfp8-quantized" && bits == 8) s.format = QuantFormat::kMxfp8;
    else if (format == "mxfp4-pack-quantized" && bits == 4) s.format = QuantFormat::kMxfp4;
    else if (format == "nvfp4-pack-quantized" && bits == 4) s.format = QuantFormat::kNvfp4;
    else return unsupported(what);
    return s;
}

// The weight's [out, in] from weight_shape (packed schemes) or the weight itself.
core::Result<std::pair<uint64_t, uint64_t>> weight_dims(const std::map<std::string, TensorPart>& parts,
                                                        const std::string& module, const char* main, int int_bits) {
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
        } else if (it->second.dtype == DType::kI32 && 32 % int_bits == 0) {
            cols *= uint64_t(32 / int_bits);  // fields per int32
        } else if (it->second.dtype == DType::kI32) {
            return core::error(StatusCode::kCorrupt) << "'" << module << "' has no weight_shape";
        } else {
            cols *= 2;  // two FP4 per byte
        }
    }
    if (rows == 0 || cols == 0) return core::error(StatusCode::kCorrupt) << "'" << module << "' has an empty weight";
    return std::make_pair(rows, cols);
}

// pack-quantized integers: w = (q - zp) * scale per group (of contiguous columns, or by
// weight_g_idx), to a runtime weight through int_weight (quant_parts.h).
core::Result<TensorRef> packed_int(const QuantScheme& s, const std::string& m,
                                   const std::map<std::string, TensorPart>& parts, uint64_t R, uint64_t C,
                                   std::vector<std::shared_ptr<const void>>* owners) {
    const int64_t rows = int64_t(R), cols = int64_t(C), bits = s.bits, offset = int64_t(1) << (bits - 1);
    const int64_t group = s.group_size ? std::min(s.group_size, cols) : cols, groups = (cols + group - 1) / group;
    KILN_ASSIGN_OR_RETURN(const TensorPart* w, part(parts, m, "weight_packed", DType::kI32,
                                                    {R, uint64_t((cols * bits + 31) / 32)}));
    KILN_ASSIGN_OR_RETURN(std::vector<float> scales, float_part(parts, m, "weight_scale", {R, uint64_t(groups)}));
    KILN_RETURN_IF_ERROR(check_scales(scales, m));
    // Codes and zero points as stored (value + 2^(bits-1)); no zero points: the offset itself.
    std::vector<int32_t> zeros(size_t(rows * groups), int32_t(offset));
    if (s.zero_point) {
        KILN_ASSIGN_OR_RETURN(const TensorPart* z, part(parts, m, "weight_zero_point", DType::kI32,
                                                        {uint64_t((rows * bits + 31) / 32), uint64_t(groups)}));
        const std::vector<int32_t> packed = copy_of<int32_t>(*z);
        for (int64_t g = 0; g < groups; ++g)
            for (int64_t r = 0; r < rows; ++r)
                zeros[size_t(r * groups + g)] = int32_t(packed_field(packed.data() + g, groups, r, int(bits)));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> g_idx, group_index(parts, m, "weight_g_idx", cols, group, s.act_order));
    const std::vector<int32_t> words = copy_of<int32_t>(*w);
    const int64_t row_words = (cols * bits + 31) / 32;
    std::vector<uint8_t> codes(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            codes[size_t(r * cols + c)] = uint8_t(packed_field(words.data() + r * row_words, 1, c, int(bits)));
    return int_weight(m + ".weight", rows, cols, group, int(bits), codes, zeros, std::move(scales), g_idx, owners);
}

// NVIDIA ModelOpt's quant_algo (compressed_tensors.h): FP8 and NVFP4 (group 16); `q` holds
// group_size where the config gives one; `ignore`: the modules left unquantized.
core::Result<CompressedConfig> modelopt_config(const std::string& algo, const json& q, const json* ignore) {
    CompressedConfig c;
    if (algo == "FP8") {
        c.scheme.format = QuantFormat::kFp8;
        c.scheme.tensor_scale = true;
    } else if (algo == "NVFP4") {
        if (const int64_t g = get_int(q, "group_size", 16); g != 16)
            return core::error(StatusCode::kUnsupported) << "ModelOpt checkpoint: NVFP4 with group_size " << g;
        c.scheme.format = QuantFormat::kNvfp4;
        c.scheme.modelopt = true;
    } else {
        return core::error(StatusCode::kUnsupported)
               << "ModelOpt checkpoint: quant_algo '" << algo << "' (kiln loads FP8 and NVFP4)";
    }
    c.scheme.static_inputs = true;
    if (ignore && ignore->is_array())
        for (const json& x : *ignore)
            if (x.is_string()) c.ignore.push_back(x.get<std::string>());
    return c;
}

// hf_quant_config.json as ModelOpt writes it beside config.json ({"producer": {"name": "modelopt"},
// "quantization": {"quant_algo", "exclude_modules", ...}}); nullopt when there is none.
core::Result<std::optional<CompressedConfig>> modelopt_file_config(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::optional<CompressedConfig>();
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const json j = json::parse(ss.str(), nullptr, false);
    const json* producer = j.is_object() ? get(j, "producer") : nullptr;
    const json* q = j.is_object() ? get(j, "quantization") : nullptr;
    if (!producer || !producer->is_object() || get_str(*producer, "name") != "modelopt" || !q || !q->is_object())
        return core::error(StatusCode::kCorrupt)
               << path.string() << ": not a ModelOpt hf_quant_config.json (producer.name \"modelopt\", quantization)";
    KILN_ASSIGN_OR_RETURN(CompressedConfig c, modelopt_config(get_str(*q, "quant_algo"), *q, get(*q, "exclude_modules")));
    return std::optional<CompressedConfig>(std::move(c));
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
    if (!q) return modelopt_file_config(std::filesystem::path(path).parent_path() / "hf_quant_config.json");
    if (q->is_object() && get_str(*q, "quant_method") == "modelopt") {
        KILN_ASSIGN_OR_RETURN(CompressedConfig c, modelopt_config(get_str(*q, "quant_algo"), *q, get(*q, "ignore")));
        return std::optional<CompressedConfig>(std::move(c));
    }
    if (q->is_object() && (get_str(*q, "quant_method") == "awq" || get_str(*q, "quant_method") == "gptq")) {
        KILN_ASSIGN_OR_RETURN(CompressedConfig c, awq_gptq_config(q->dump()));
        return std::optional<CompressedConfig>(std::move(c));
    }
    if (!q->is_object() || get_str(*q, "quant_method") != "compressed-tensors")
        return unsupported(path + ": quant_method '" + (q->is_object() ? get_str(*q, "quant_method") : "") +
                           "' (kiln loads compressed-tensors, AutoAWQ, GPTQ and ModelOpt checkpoints)");
    const json* groups = get(*q, "config_groups");
    if (!groups || !groups->is_object() || groups->size() != 1)
        return unsupported("exactly one config group is supported");
    const json& g = groups->begin().value();
    const json* targets = get(g, "targets");
    if (!targets || *targets != json::array({"Linear"}))
        return unsupported("config group targets other than [\"Linear\"]");
    const json* w = get(g, "weights");
    if (!w || !w->is_object()) return unsupported("a config group without weight quantization");
    // Weights stored rotated or sparse need more than their parts: refused by name.
    if (const json* t = get(*q, "transform_config"); t && !t->empty())
        return unsupported("transform_config (rotated weights: SpinQuant / QuIP transforms)");
    if (const json* sp = get(*q, "sparsity_config"); sp && !sp->empty() && get_str(*sp, "format") != "dense")
        return unsupported("sparsity_config format '" + get_str(*sp, "format") + "' (sparse compressed weights)");
    std::string format = get_str(*q, "format");
    if (const std::string gf = get_str(g, "format"); !gf.empty()) format = gf;
    CompressedConfig c;
    KILN_ASSIGN_OR_RETURN(c.scheme, scheme_from(format, *w));
    // Activations: kiln quantizes its own way at run time; static scales are recorded, not used.
    if (const json* a = get(g, "input_activations"); a && a->is_object()) {
        const json* dyn = get(*a, "dynamic");
        c.scheme.static_inputs = !dyn || *dyn == false;
    }
    if (const json* ig = get(*q, "ignore"); ig && ig->is_array())
        for (const json& x : *ig)
            if (x.is_string()) c.ignore.push_back(x.get<std::string>());
    return std::optional<CompressedConfig>(std::move(c));
}

std::optional<std::pair<std::string, std::string>> split_quant_part(const std::string& name) {
    static const char* const kParts[] = {"weight_packed",      "weight_scale",        "weight_zero_point",
                                         "weight_shape",       "weight_global_scale", "input_scale",
                                         "input_global_scale", "input_zero_point",    "weight_g_idx",
                                         "qweight",            "qzeros",              "scales",
                                         "g_idx",              "weight_scale_2",      "k_scale",
                                         "v_scale"};
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
    if (s.format == QuantFormat::kAwq || s.format == QuantFormat::kGptq) return decompress_awq_gptq(config, m, parts, owners);
    const bool packed = s.format == QuantFormat::kPackedInt || s.format == QuantFormat::kMxfp4 ||
                        (s.format == QuantFormat::kNvfp4 && !s.modelopt);
    KILN_ASSIGN_OR_RETURN(auto dims, weight_dims(parts, m, packed ? "weight_packed" : "weight", s.bits));
    if (s.modelopt) dims.second *= 2;  // ModelOpt's NVFP4 weight: two codes per byte
    const auto [R, C] = dims;
    const int64_t rows = int64_t(R), cols = int64_t(C);
    const std::string name = m + ".weight";
    switch (s.format) {
        case QuantFormat::kAwq:  // handled above
        case QuantFormat::kGptq:
            break;
        case QuantFormat::kInt8: {
            KILN_ASSIGN_OR_RETURN(const TensorPart* w, part(parts, m, "weight", DType::kI8, {R, C}));
            KILN_ASSIGN_OR_RETURN(std::vector<float> scales, float_part(parts, m, "weight_scale", {R, 1}, s.tensor_scale));
            KILN_RETURN_IF_ERROR(check_scales(scales, m));
            return int8_rows(name, R, C, copy_of<uint8_t>(*w), std::move(scales), owners);
        }
        case QuantFormat::kPackedInt:
            return packed_int(s, m, parts, R, C, owners);
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
            KILN_ASSIGN_OR_RETURN(q.scales, float_part(parts, m, "weight_scale", scale_shape, s.tensor_scale));
            q.data = copy_of<uint8_t>(*w);
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
            KILN_ASSIGN_OR_RETURN(const TensorPart* w, part(parts, m, s.modelopt ? "weight" : "weight_packed",
                                                            DType::kU8, {R, uint64_t(q.row_bytes)}));
            KILN_ASSIGN_OR_RETURN(const TensorPart* sc,
                                  part(parts, m, "weight_scale", DType::kF8E4M3, {R, uint64_t(q.blocks_per_row())}));
            // compressed-tensors stores the tensor scale's inverse (weight_global_scale), ModelOpt the
            // scale itself (weight_scale_2).
            KILN_ASSIGN_OR_RETURN(const std::vector<float> global,
                                  float_part(parts, m, s.modelopt ? "weight_scale_2" : "weight_global_scale", {1},
                                             /*tensor=*/true));
            KILN_RETURN_IF_ERROR(check_scales(global, m));
            q.data = copy_of<uint8_t>(*w);
            q.block_scales = copy_of<uint8_t>(*sc);
            q.tensor_scale = s.modelopt ? global[0] : 1.0f / global[0];
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
