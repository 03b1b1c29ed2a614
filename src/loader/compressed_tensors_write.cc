// compressed-tensors: scheme names, the quantization_config JSON and the writer of one Linear's
// tensors (see compressed_tensors.h for the layouts).
#include <nlohmann/json.hpp>

#include "loader/compressed_tensors.h"
#include "quant/fp8.h"
#include "quant/int_quant.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;
using json = nlohmann::ordered_json;

constexpr const char* kWrittenSchemes = "int8, w4-g32, w4-g64, w4-g128, fp8, fp8-block, mxfp8, mxfp4, nvfp4";

// Appends a tensor that owns `data`.
template <typename T>
void add(std::vector<formats::SafetensorsTensorIn>* out, std::vector<std::shared_ptr<const void>>* owners,
         std::string name, DType dtype, std::vector<uint64_t> shape, std::vector<T> data) {
    auto buf = std::make_shared<std::vector<T>>(std::move(data));
    out->push_back({std::move(name), dtype, std::move(shape), buf->data(), buf->size() * sizeof(T)});
    owners->push_back(std::move(buf));
}

json weight_args(const QuantScheme& s) {
    json w = {{"num_bits", 8},         {"type", "int"},         {"symmetric", true},
              {"strategy", "channel"}, {"group_size", nullptr}, {"block_structure", nullptr},
              {"dynamic", false},      {"actorder", nullptr},   {"observer", "minmax"}};
    switch (s.format) {
        case QuantFormat::kInt8:
        case QuantFormat::kAwq:  // not written (compress_weight refuses them)
        case QuantFormat::kGptq:
            break;
        case QuantFormat::kPackedInt:
            w["num_bits"] = s.bits;
            w["symmetric"] = !s.zero_point;
            w["strategy"] = "group";
            w["group_size"] = s.group_size;
            break;
        case QuantFormat::kFp8:
            w["type"] = "float";
            break;
        case QuantFormat::kFp8Block:
            w["type"] = "float";
            w["strategy"] = "block";
            w["block_structure"] = {128, 128};
            break;
        case QuantFormat::kMxfp8:
        case QuantFormat::kMxfp4:
            w["num_bits"] = s.format == QuantFormat::kMxfp8 ? 8 : 4;
            w["type"] = "float";
            w["strategy"] = "group";
            w["group_size"] = 32;
            w["scale_dtype"] = "uint8";
            break;
        case QuantFormat::kNvfp4:
            w["num_bits"] = 4;
            w["type"] = "float";
            w["strategy"] = "tensor_group";
            w["group_size"] = 16;
            break;
    }
    return w;
}

// Dynamic per-token activations for int8 and fp8 (kiln quantizes activations at run time); the
// 4-bit and MX schemes are weight-only.
json input_args(const QuantScheme& s) {
    switch (s.format) {
        case QuantFormat::kInt8:
            return {{"num_bits", 8},       {"type", "int"},   {"symmetric", true},
                    {"strategy", "token"}, {"dynamic", true}, {"observer", nullptr}};
        case QuantFormat::kFp8:
            return {{"num_bits", 8},       {"type", "float"}, {"symmetric", true},
                    {"strategy", "token"}, {"dynamic", true}, {"observer", nullptr}};
        case QuantFormat::kFp8Block:
            return {{"num_bits", 8},     {"type", "float"}, {"symmetric", true},  {"strategy", "group"},
                    {"group_size", 128}, {"dynamic", true}, {"observer", nullptr}};
        default:
            return nullptr;
    }
}

const char* format_string(QuantFormat f) {
    switch (f) {
        case QuantFormat::kInt8:
            return "int-quantized";
        case QuantFormat::kPackedInt:
            return "pack-quantized";
        case QuantFormat::kFp8:
        case QuantFormat::kFp8Block:
            return "float-quantized";
        case QuantFormat::kMxfp8:
            return "mxfp8-quantized";
        case QuantFormat::kMxfp4:
            return "mxfp4-pack-quantized";
        case QuantFormat::kNvfp4:
            return "nvfp4-pack-quantized";
        case QuantFormat::kAwq:  // not written
        case QuantFormat::kGptq:
            return "";
    }
    return "";
}

// INT4 codes of int_quant.h -> compressed-tensors' stored nibble (signed value + 8).
uint32_t stored_nibble(const quant::Int4Matrix& m, int64_t r, int64_t c) {
    const uint8_t byte = m.data[size_t(r * m.row_bytes + c / 2)];
    const uint8_t code = c % 2 == 0 ? byte & 0x0F : byte >> 4;
    if (m.mode == quant::Int4Mode::kAsymmetric) return code;  // q in 0..15: (q - 8) + 8
    return uint32_t((code ^ 0x8) & 0x0F);                     // two's complement -7..7, + 8
}

}  // namespace

std::string QuantScheme::name() const {
    // "w4-g32", "w8-channel-zp", ...: appended piece by piece (GCC 12 warns on "w" + std::to_string).
    auto int_name = [this](const char* prefix) {
        std::string n = prefix;
        n += std::to_string(bits);
        n += group_size ? "-g" : "-channel";
        if (group_size) n += std::to_string(group_size);
        if (zero_point) n += "-zp";
        if (act_order) n += "-actorder";
        return n;
    };
    switch (format) {
        case QuantFormat::kInt8:
            return tensor_scale ? "int8-tensor" : "int8";
        case QuantFormat::kPackedInt:
            return int_name("w");
        case QuantFormat::kFp8:
            return tensor_scale ? "fp8-tensor" : "fp8";
        case QuantFormat::kFp8Block:
            return "fp8-block";
        case QuantFormat::kMxfp8:
            return "mxfp8";
        case QuantFormat::kMxfp4:
            return "mxfp4";
        case QuantFormat::kNvfp4:
            return "nvfp4";
        case QuantFormat::kAwq:
            return "awq-w4-g" + std::to_string(group_size);
        case QuantFormat::kGptq:
            return int_name("gptq-w") + (gptq_v2 ? "-v2" : "");
    }
    return "";
}

core::Result<QuantScheme> parse_quant_scheme(std::string_view name) {
    static const std::pair<const char*, QuantFormat> kNames[] = {
        {"int8", QuantFormat::kInt8},   {"fp8", QuantFormat::kFp8},     {"fp8-block", QuantFormat::kFp8Block},
        {"mxfp8", QuantFormat::kMxfp8}, {"mxfp4", QuantFormat::kMxfp4}, {"nvfp4", QuantFormat::kNvfp4}};
    for (const auto& [n, f] : kNames)
        if (name == n) return QuantScheme{f, 0, false};
    for (int64_t g : {32, 64, 128})
        if (name == "w4-g" + std::to_string(g)) return QuantScheme{QuantFormat::kPackedInt, g, false};
    return core::error(StatusCode::kInvalidArgument)
           << "unknown quantization format '" << name << "' (" << kWrittenSchemes << ")";
}

std::string quantization_config_json(const QuantScheme& s, const std::vector<std::string>& ignore) {
    json group = {{"targets", {"Linear"}},
                  {"weights", weight_args(s)},
                  {"input_activations", input_args(s)},
                  {"output_activations", nullptr}};
    json j = {{"quant_method", "compressed-tensors"},
              {"format", format_string(s.format)},
              {"quantization_status", "compressed"},
              {"config_groups", {{"group_0", group}}},
              {"ignore", ignore},
              {"kv_cache_scheme", nullptr},
              {"sparsity_config", json::object()}};
    return j.dump();
}

core::Status write_int4_weight(const quant::Int4Matrix& q, const std::string& m,
                               std::vector<formats::SafetensorsTensorIn>* out,
                               std::vector<std::shared_ptr<const void>>* owners) {
    const int64_t rows = q.rows, cols = q.cols;
    const uint64_t R = uint64_t(rows);
    const int64_t words = (cols + 7) / 8, groups = q.groups_per_row();
    std::vector<int32_t> packed(size_t(rows * words), 0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            packed[size_t(r * words + c / 8)] =
                int32_t(uint32_t(packed[size_t(r * words + c / 8)]) | (stored_nibble(q, r, c) << (4 * (c % 8))));
    add(out, owners, m + ".weight_packed", DType::kI32, {R, uint64_t(words)}, std::move(packed));
    add(out, owners, m + ".weight_scale", DType::kF32, {R, uint64_t(groups)}, std::vector<float>(q.scales));
    add(out, owners, m + ".weight_shape", DType::kI64, {2}, std::vector<int64_t>{rows, cols});
    if (q.mode == quant::Int4Mode::kAsymmetric) {
        std::vector<int32_t> zp(size_t((rows + 7) / 8 * groups), 0);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t g = 0; g < groups; ++g) {
                const uint32_t z = q.zeros[size_t(r * groups + g)];  // (zero - 8) + 8
                int32_t& word = zp[size_t(r / 8 * groups + g)];
                word = int32_t(uint32_t(word) | (z << (4 * (r % 8))));
            }
        add(out, owners, m + ".weight_zero_point", DType::kI32, {(R + 7) / 8, uint64_t(groups)}, std::move(zp));
    }
    return core::Status::ok();
}

core::Status compress_weight(const QuantScheme& s, const std::string& m, std::span<const float> w, int64_t rows,
                             int64_t cols, std::vector<formats::SafetensorsTensorIn>* out,
                             std::vector<std::shared_ptr<const void>>* owners) {
    const uint64_t R = uint64_t(rows), C = uint64_t(cols);
    if (s.tensor_scale || s.format == QuantFormat::kAwq || s.format == QuantFormat::kGptq ||
        (s.format == QuantFormat::kPackedInt && (s.bits != 4 || s.group_size == 0 || s.act_order)))
        return core::error(StatusCode::kUnsupported)
               << "kiln quantize does not write " << s.name() << " (it reads it; it writes " << kWrittenSchemes << ")";
    switch (s.format) {
        case QuantFormat::kAwq:  // refused above
        case QuantFormat::kGptq:
            break;
        case QuantFormat::kInt8: {
            KILN_ASSIGN_OR_RETURN(quant::Int8Matrix q, quant::quantize_int8_rows(w, rows, cols));
            add(out, owners, m + ".weight", DType::kI8, {R, C}, std::move(q.data));
            add(out, owners, m + ".weight_scale", DType::kF32, {R, 1}, std::move(q.scales));
            return core::Status::ok();
        }
        case QuantFormat::kPackedInt: {
            const auto mode = s.zero_point ? quant::Int4Mode::kAsymmetric : quant::Int4Mode::kSymmetric;
            KILN_ASSIGN_OR_RETURN(quant::Int4Matrix q, quant::quantize_int4(w, rows, cols, s.group_size, mode));
            return write_int4_weight(q, m, out, owners);
        }
        case QuantFormat::kFp8:
        case QuantFormat::kFp8Block: {
            const bool block = s.format == QuantFormat::kFp8Block;
            KILN_ASSIGN_OR_RETURN(quant::Fp8Matrix q, quant::quantize_fp8(w, rows, cols,
                                                                          block ? quant::Fp8Granularity::kBlock128
                                                                                : quant::Fp8Granularity::kPerChannel));
            std::vector<uint64_t> scale_shape = {R, 1};
            if (block) scale_shape = {(R + 127) / 128, (C + 127) / 128};
            add(out, owners, m + ".weight", DType::kF8E4M3, {R, C}, std::move(q.data));
            add(out, owners, m + ".weight_scale", DType::kF32, scale_shape, std::move(q.scales));
            return core::Status::ok();
        }
        case QuantFormat::kMxfp8:
        case QuantFormat::kMxfp4: {
            const bool fp4 = s.format == QuantFormat::kMxfp4;
            KILN_ASSIGN_OR_RETURN(quant::MxMatrix q,
                                  fp4 ? quant::quantize_mxfp4(w, rows, cols) : quant::quantize_mxfp8(w, rows, cols));
            const uint64_t blocks = uint64_t(q.blocks_per_row());
            add(out, owners, m + (fp4 ? ".weight_packed" : ".weight"), fp4 ? DType::kU8 : DType::kF8E4M3,
                {R, uint64_t(q.row_bytes)}, std::move(q.data));
            add(out, owners, m + ".weight_scale", DType::kU8, {R, blocks}, std::move(q.scales));
            return core::Status::ok();
        }
        case QuantFormat::kNvfp4: {
            KILN_ASSIGN_OR_RETURN(quant::Nvfp4Matrix q, quant::quantize_nvfp4(w, rows, cols));
            add(out, owners, m + ".weight_packed", DType::kU8, {R, uint64_t(q.row_bytes)}, std::move(q.data));
            add(out, owners, m + ".weight_scale", DType::kF8E4M3, {R, uint64_t(q.blocks_per_row())},
                std::move(q.block_scales));
            add(out, owners, m + ".weight_global_scale", DType::kF32, {1}, std::vector<float>{1.0f / q.tensor_scale});
            return core::Status::ok();
        }
    }
    return core::error(StatusCode::kInternal) << "unhandled quantization scheme";
}

}  // namespace kiln::loader
