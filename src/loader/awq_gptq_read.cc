// AutoAWQ's GEMM layout and GPTQ's (AutoGPTQ / GPTQModel) layout: their quantization_config and one
// Linear's parts back to a runtime weight (see compressed_tensors.h for what each becomes).
//
// AutoAWQ ("quant_method": "awq", "version": "gemm", 4-bit, zero points), per Linear M with in
// inputs and out outputs, groups of g inputs:
//   M.qweight I32 [in, out / 8]: word c of input row i holds outputs 8c .. 8c + 7, output 8c + o
//             in nibble kAwqNibble[o] (AutoAWQ packs in the order 0 2 4 6 1 3 5 7)
//   M.qzeros  I32 [in / g, out / 8], packed like qweight; M.scales F16 [in / g, out]
//   w[o][i] = (q - zero) * scale of (group i / g, output o)           (awq/utils/packing_utils.py)
// GPTQ ("quant_method": "gptq", bits 4 or 8, "sym", "desc_act", "checkpoint_format" gptq | gptq_v2):
//   M.qweight I32 [in * bits / 32, out]: input i of output o is field i % (32 / bits) of word
//             (i / (32 / bits), o), at bit bits * (i % (32 / bits))
//   M.qzeros  I32 [groups, out * bits / 32], packed along the outputs; format "gptq" (v1) stores
//             zero - 1, "gptq_v2" the zero itself
//   M.scales  F16 [groups, out]; M.g_idx I32 [in]: the group of each input (desc_act reorders
//             them; without it i / g); group_size -1: one group
//   w[o][i] = scale[g_idx[i]][o] * (q - zero[g_idx[i]][o])   (auto_gptq qlinear_cuda.py's dequantization)
#include <nlohmann/json.hpp>

#include "loader/compressed_tensors.h"
#include "loader/quant_parts.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;
using json = nlohmann::json;
using namespace quant_parts;

// Nibble of output 8c + o inside AutoAWQ's word c (the inverse of its pack order 0 2 4 6 1 3 5 7).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// scales stored [groups, out] -> [out, groups].
std::vector<float> transpose(const std::vector<float>& s, int64_t groups, int64_t out) {
    std::vector<float> t(s.size());
    for (int64_t k = 0; k < groups; ++k)
        for (int64_t o = 0; o < out; ++o) t[size_t(o * groups + k)] = s[size_t(k * out + o)];
    return t;
}

core::Result<TensorRef> awq(const QuantScheme& s, const std::string& m, const std::map<std::string, TensorPart>& parts,
                            std::vector<std::shared_ptr<const void>>* owners) {
    KILN_ASSIGN_OR_RETURN(const TensorPart* qw, find_part(parts, m, "qweight"));
    if (qw->dtype != DType::kI32 || qw->shape.size() != 2 || qw->shape[0] == 0 || qw->shape[1] == 0)
        return wrong_part(m, "qweight", *qw, "I32 [in, out / 8]");
    const int64_t in = int64_t(qw->shape[0]), out = int64_t(qw->shape[1]) * 8;
    const int64_t g = s.group_size ? s.group_size : in;
    if (in % g != 0)
        return core::error(StatusCode::kCorrupt) << "'" << m << "': " << in << " inputs are not whole groups of " << g;
    const int64_t groups = in / g;
    KILN_ASSIGN_OR_RETURN(const TensorPart* qz, part(parts, m, "qzeros", DType::kI32,
                                                     {uint64_t(groups), uint64_t(out / 8)}));
    KILN_ASSIGN_OR_RETURN(std::vector<float> sc, float_part(parts, m, "scales", {uint64_t(groups), uint64_t(out)}));
    KILN_RETURN_IF_ERROR(check_scales(sc, m));
    const std::vector<int32_t> w = copy_of<int32_t>(*qw), z = copy_of<int32_t>(*qz);
    const int64_t wpr = out / 8;  // words per stored row
    std::vector<uint8_t> codes(size_t(out * in));
    for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o)
            codes[size_t(o * in + i)] = uint8_t((uint32_t(w[size_t(i * wpr + o / 8)]) >> (4 * kAwqNibble[o % 8])) & 0xF);
    std::vector<int32_t> zeros(size_t(out * groups));
    for (int64_t k = 0; k < groups; ++k)
        for (int64_t o = 0; o < out; ++o)
            zeros[size_t(o * groups + k)] = int32_t((uint32_t(z[size_t(k * wpr + o / 8)]) >> (4 * kAwqNibble[o % 8])) & 0xF);
    return int_weight(m + ".weight", out, in, g, 4, codes, zeros, transpose(sc, groups, out), {}, owners);
}

core::Result<TensorRef> gptq(const QuantScheme& s, const std::string& m, const std::map<std::string, TensorPart>& parts,
                             std::vector<std::shared_ptr<const void>>* owners) {
    const int bits = s.bits, per_word = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    KILN_ASSIGN_OR_RETURN(const TensorPart* qw, find_part(parts, m, "qweight"));
    if (qw->dtype != DType::kI32 || qw->shape.size() != 2 || qw->shape[0] == 0 || qw->shape[1] == 0)
        return wrong_part(m, "qweight", *qw, "I32 [in * bits / 32, out]");
    const int64_t in = int64_t(qw->shape[0]) * per_word, out = int64_t(qw->shape[1]);
    if (out % per_word != 0)
        return core::error(StatusCode::kCorrupt) << "'" << m << "': " << out << " outputs do not fill qzeros' words";
    const int64_t g = s.group_size ? s.group_size : in;
    const int64_t groups = (in + g - 1) / g;
    KILN_ASSIGN_OR_RETURN(std::vector<float> sc, float_part(parts, m, "scales", {uint64_t(groups), uint64_t(out)}));
    KILN_RETURN_IF_ERROR(check_scales(sc, m));
    KILN_ASSIGN_OR_RETURN(const TensorPart* qz, part(parts, m, "qzeros", DType::kI32,
                                                     {uint64_t(groups), uint64_t(out / per_word)}));
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> g_idx, group_index(parts, m, "g_idx", in, g, s.act_order));
    const std::vector<int32_t> w = copy_of<int32_t>(*qw), z = copy_of<int32_t>(*qz);
    std::vector<uint8_t> codes(size_t(out * in));
    for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o)
            codes[size_t(o * in + i)] =
                uint8_t((uint32_t(w[size_t((i / per_word) * out + o)]) >> (bits * (i % per_word))) & mask);
    const int64_t zpr = out / per_word;
    std::vector<int32_t> zeros(size_t(out * groups));
    for (int64_t k = 0; k < groups; ++k)
        for (int64_t o = 0; o < out; ++o) {
            const int32_t stored = int32_t((uint32_t(z[size_t(k * zpr + o / per_word)]) >> (bits * (o % per_word))) & mask);
            zeros[size_t(o * groups + k)] = s.gptq_v2 ? stored : stored + 1;  // v1 stores zero - 1
        }
    return int_weight(m + ".weight", out, in, g, bits, codes, zeros, transpose(sc, groups, out), g_idx, owners);
}

core::Status unsupported(const std::string& what) {
    return core::error(StatusCode::kUnsupported) << "quantized checkpoint: " << what;
}

int64_t int_or(const json& j, const char* key, int64_t fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string str_or(const json& j, const char* key, const std::string& fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool bool_or(const json& j, const char* key, bool fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

core::Result<CompressedConfig> awq_gptq_config(const std::string& quant_config_json) {
    const json q = json::parse(quant_config_json, nullptr, false);
    if (q.is_discarded() || !q.is_object()) return unsupported("quantization_config is not an object");
    const std::string method = str_or(q, "quant_method", "");
    const int64_t bits = int_or(q, "bits", int_or(q, "w_bit", 0));
    int64_t group = int_or(q, "group_size", int_or(q, "q_group_size", 128));
    if (group == -1) group = 0;
    if (group < 0 || group > int64_t(1) << 31) return unsupported(method + " group_size " + std::to_string(group));
    CompressedConfig c;
    c.scheme.group_size = group;
    c.scheme.bits = int(bits);
    if (method == "awq") {
        const std::string version = str_or(q, "version", "gemm");
        if (version != "gemm" && version != "GEMM")
            return unsupported("AutoAWQ version '" + version + "' (kiln reads the GEMM layout)");
        if (bits != 4) return unsupported("AutoAWQ with " + std::to_string(bits) + "-bit weights (4)");
        if (!bool_or(q, "zero_point", true)) return unsupported("AutoAWQ without zero points");
        c.scheme.format = QuantFormat::kAwq;
        c.scheme.zero_point = true;
        if (auto it = q.find("modules_to_not_convert"); it != q.end() && it->is_array())
            for (const json& x : *it)
                if (x.is_string()) c.ignore.push_back(x.get<std::string>());
        return c;
    }
    if (method == "gptq") {
        if (bits != 4 && bits != 8) return unsupported("GPTQ with " + std::to_string(bits) + "-bit weights (4, 8)");
        if (bool_or(q, "is_marlin_format", false)) return unsupported("GPTQ in the Marlin layout");
        const std::string fmt = str_or(q, "checkpoint_format", str_or(q, "format", "gptq"));
        if (fmt != "gptq" && fmt != "gptq_v2") return unsupported("GPTQ checkpoint_format '" + fmt + "'");
        c.scheme.format = QuantFormat::kGptq;
        c.scheme.gptq_v2 = fmt == "gptq_v2";
        c.scheme.act_order = bool_or(q, "desc_act", false);
        c.scheme.zero_point = !bool_or(q, "sym", true);
        return c;
    }
    return unsupported("quant_method '" + method + "'");
}

core::Result<TensorRef> decompress_awq_gptq(const CompressedConfig& config, const std::string& module,
                                            const std::map<std::string, TensorPart>& parts,
                                            std::vector<std::shared_ptr<const void>>* owners) {
    if (config.scheme.format == QuantFormat::kAwq) return awq(config.scheme, module, parts, owners);
    return gptq(config.scheme, module, parts, owners);
}

}  // namespace kiln::loader
