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
#include <algorithm>
#include <nlohmann/json.hpp>

#include "loader/compressed_tensors.h"
#include "loader/quant_parts.h"
#include "quant/ggml_blocks.h"
#include "quant/int_quant.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;
using json = nlohmann::json;
using namespace quant_parts;

// Nibble of output 8c + o inside AutoAWQ's word c (the inverse of its pack order 0 2 4 6 1 3 5 7).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// One Linear as (code - zero) * scale per (output, group) with unsigned codes: Q4_1 (or Q4_0 when every
// zero is 8; 8-bit codes: Q8_0 when every zero is 128) blocks where the row length and groups are
// whole 32-element blocks and the groups contiguous, f32 otherwise (exact). codes [out, in]; zeros and scales [out, groups]; g_idx [in] or
// empty (contiguous groups of g).
core::Result<TensorRef> int_weight(const std::string& name, int64_t out, int64_t in, int64_t g, int bits,
                                   const std::vector<uint8_t>& codes, const std::vector<int32_t>& zeros,
                                   const std::vector<float>& scales, const std::vector<int32_t>& g_idx) {
    const int64_t groups = scales.size() / size_t(out);
    if (g_idx.empty() && bits == 4 && in % 32 == 0 && g % 32 == 0) {
        bool all_eight = true;
        for (int32_t z : zeros) all_eight = all_eight && z == 8;
        bool zeros_fit = true;
        for (int32_t z : zeros) zeros_fit = zeros_fit && z >= 0 && z <= 255;
        if (zeros_fit) {
            const auto mode = all_eight ? quant::Int4Mode::kSymmetric : quant::Int4Mode::kAsymmetric;
            quant::Int4Matrix q = quant::empty_int4(out, in, g, mode);
            q.scales = scales;
            for (int64_t r = 0; r < out; ++r)
                for (int64_t c = 0; c < in; ++c) {
                    const uint8_t u = codes[size_t(r * in + c)];
                    const uint8_t code = all_eight ? uint8_t((u ^ 0x8) & 0xF) : u;  // symmetric: two's complement
                    uint8_t& byte = q.data[size_t(r * q.row_bytes + c / 2)];
                    byte = uint8_t(byte | (c % 2 == 0 ? code : code << 4));
                }
            if (!all_eight)
                for (size_t i = 0; i < zeros.size(); ++i) q.zeros[i] = uint8_t(zeros[i]);
            KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b, all_eight ? quant::to_q4_0(q) : quant::to_q4_1(q));
            return own(name, all_eight ? DType::kQ4_0 : DType::kQ4_1, uint64_t(out), uint64_t(in), std::move(b));
        }
    }
    if (g_idx.empty() && bits == 8 && in % 32 == 0 && g % 32 == 0 &&
        std::all_of(zeros.begin(), zeros.end(), [](int32_t z) { return z == 128; })) {
        std::vector<int8_t> q(codes.size());  // symmetric 8-bit: q - 128 is exact in int8 (Q8_0)
        for (size_t i = 0; i < q.size(); ++i) q[i] = int8_t(int32_t(codes[i]) - 128);
        KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> b, quant::to_q8_0(q, out, in, scales, g));
        return own(name, DType::kQ8_0, uint64_t(out), uint64_t(in), std::move(b));
    }
    std::vector<float> f(size_t(out * in));
    for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) {
            const int64_t k = r * groups + (g_idx.empty() ? c / g : g_idx[size_t(c)]);
            f[size_t(r * in + c)] = float(int32_t(codes[size_t(r * in + c)]) - zeros[size_t(k)]) * scales[size_t(k)];
        }
    return own_f32(name, uint64_t(out), uint64_t(in), f);
}

// scales stored [groups, out] -> [out, groups].
std::vector<float> transpose(const std::vector<float>& s, int64_t groups, int64_t out) {
    std::vector<float> t(s.size());
    for (int64_t k = 0; k < groups; ++k)
        for (int64_t o = 0; o < out; ++o) t[size_t(o * groups + k)] = s[size_t(k * out + o)];
    return t;
}

core::Result<TensorRef> awq(const QuantScheme& s, const std::string& m, const std::map<std::string, TensorPart>& parts) {
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
    return int_weight(m + ".weight", out, in, g, 4, codes, zeros, transpose(sc, groups, out), {});
}

core::Result<TensorRef> gptq(const QuantScheme& s, const std::string& m, const std::map<std::string, TensorPart>& parts) {
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
    std::vector<int32_t> g_idx;
    if (parts.count("g_idx")) {
        KILN_ASSIGN_OR_RETURN(const TensorPart* gi, part(parts, m, "g_idx", DType::kI32, {uint64_t(in)}));
        g_idx = copy_of<int32_t>(*gi);
        bool contiguous = true;
        for (int64_t i = 0; i < in; ++i) {
            if (g_idx[size_t(i)] < 0 || g_idx[size_t(i)] >= groups)
                return core::error(StatusCode::kCorrupt)
                       << "'" << m << ".g_idx' names group " << g_idx[size_t(i)] << " of " << groups << " (input " << i << ")";
            contiguous = contiguous && g_idx[size_t(i)] == i / g;
        }
        if (contiguous) g_idx.clear();
    } else if (s.act_order) {
        return core::error(StatusCode::kCorrupt) << "'" << m << "' has no g_idx (desc_act is set)";
    }
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
    return int_weight(m + ".weight", out, in, g, bits, codes, zeros, transpose(sc, groups, out), g_idx);
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
                                            const std::map<std::string, TensorPart>& parts) {
    if (config.scheme.format == QuantFormat::kAwq) return awq(config.scheme, module, parts);
    return gptq(config.scheme, module, parts);
}

}  // namespace kiln::loader
