// compressed-tensors round trip (compress_weight -> decompress_weight) for every scheme, bit for bit
// against the quant:: quantizer's own values (the same weights quantized and dequantized by
// quant::dequantize, or, for INT4 rows kiln repacks into GGML blocks, those blocks decoded by
// kernels::ref), plus the loader's checks: wrong shapes and dtypes are kCorrupt, configs
// kiln cannot run are kUnsupported, never a crash; GPTQ act-order groups follow weight_g_idx.
#include "loader/compressed_tensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/numeric.h"
#include "kernels/ref/dequant.h"
#include "loader/checkpoint.h"
#include "quant/fp4_blocks.h"
#include "quant/fp8.h"
#include "quant/ggml_blocks.h"
#include "quant/int_quant.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"

namespace kiln::loader {
namespace {

using formats::SafetensorsTensorIn;

struct Packed {
    std::vector<SafetensorsTensorIn> tensors;
    std::vector<std::shared_ptr<const void>> owners;
    std::map<std::string, TensorPart> parts(const std::string& module) const {
        std::map<std::string, TensorPart> p;
        for (const SafetensorsTensorIn& t : tensors) {
            const std::string suffix = t.name.substr(module.size() + 1);
            p[suffix] = {t.dtype, t.shape, static_cast<const uint8_t*>(t.data), t.num_bytes};
        }
        return p;
    }
};

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> w(size_t(rows * cols));
    for (float& v : w) v = nd(rng);
    return w;
}

std::vector<float> to_f32(const TensorRef& t) {
    std::vector<float> out(t.num_elements());
    EXPECT_TRUE(dequantize_tensor_to(t, out.data()).is_ok());
    return out;
}

// Relative RMS error bound of each scheme on Gaussian weights: a sanity check of the quantizers
// themselves (their own tests check the rounding); the round trip is checked bit for bit below.
double bound(const QuantScheme& s) {
    switch (s.format) {
        case QuantFormat::kInt8:
            return 0.02;
        case QuantFormat::kFp8:
        case QuantFormat::kFp8Block:
        case QuantFormat::kMxfp8:
            return 0.06;
        default:
            return 0.2;
    }
}

// What the loaded weight must hold: the quant:: quantizer's output for `w` under scheme s, decoded.
// INT4 and NVFP4 rows of whole 32-blocks run as blocks with fp16 scales (quant/ggml_blocks.h,
// quant/fp4_blocks.h), so their reference is the quantizer's output repacked by quant::to_q4_0 / to_q4_1
// / to_nvfp4_blocks and decoded by kernels::ref.
// n values of repacked blocks of `type`, as kernels::ref decodes them.
std::vector<float> decode_blocks(core::DType type, const core::Result<std::vector<uint8_t>>& blocks, int64_t n) {
    EXPECT_TRUE(blocks.is_ok());
    std::vector<float> out(static_cast<size_t>(n));
    if (blocks.is_ok()) {
        EXPECT_TRUE(kernels::ref::dequantize_row(type, blocks->data(), out.data(), n).is_ok());
    }
    return out;
}

std::vector<float> reference_values(const QuantScheme& s, const std::vector<float>& w, int64_t rows, int64_t cols) {
    auto value = [](auto r) {
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return quant::dequantize(*r);
    };
    switch (s.format) {
        case QuantFormat::kInt8:
            return value(quant::quantize_int8_rows(w, rows, cols));
        case QuantFormat::kPackedInt: {
            const auto mode = s.zero_point ? quant::Int4Mode::kAsymmetric : quant::Int4Mode::kSymmetric;
            auto q = quant::quantize_int4(w, rows, cols, s.group_size, mode);
            EXPECT_TRUE(q.is_ok());
            if (cols % 32 != 0) return quant::dequantize(*q);
            if (s.zero_point) return decode_blocks(core::DType::kQ4_1, quant::to_q4_1(*q), rows * cols);
            return decode_blocks(core::DType::kQ4_0, quant::to_q4_0(*q), rows * cols);
        }
        case QuantFormat::kFp8:
            return value(quant::quantize_fp8(w, rows, cols, quant::Fp8Granularity::kPerChannel));
        case QuantFormat::kFp8Block:
            return value(quant::quantize_fp8(w, rows, cols, quant::Fp8Granularity::kBlock128));
        case QuantFormat::kMxfp8:
            return value(quant::quantize_mxfp8(w, rows, cols));
        case QuantFormat::kMxfp4:
            return value(quant::quantize_mxfp4(w, rows, cols));
        case QuantFormat::kNvfp4: {
            auto q = quant::quantize_nvfp4(w, rows, cols);
            EXPECT_TRUE(q.is_ok());
            // The file holds the reciprocal of the tensor scale (compressed-tensors' global scale).
            q->tensor_scale = 1.0f / (1.0f / q->tensor_scale);
            if (cols % 32 != 0) return quant::dequantize(*q);
            return decode_blocks(core::DType::kNvfp4, quant::to_nvfp4_blocks(*q), rows * cols);
        }
        case QuantFormat::kAwq:  // read only: not among the written schemes
        case QuantFormat::kGptq:
            break;
    }
    ADD_FAILURE() << "unhandled scheme " << s.name();
    return {};
}

// The index and the two values of the first element where a and b differ in their bits; -1 if none.
int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return int64_t(i);
    return -1;
}

TEST(CompressedTensors, EverySchemeRoundTrips) {
    const char* names[] = {"int8", "w4-g32", "w4-g64", "w4-g128", "fp8", "fp8-block", "mxfp8", "mxfp4", "nvfp4"};
    for (int64_t cols : {256, 172}) {  // 172: not whole 32-blocks (stories260K's FFN): f32 at load, but I8
        const int64_t rows = 40;
        const std::vector<float> w = random_matrix(rows, cols, uint32_t(cols));
        for (const char* n : names) {
            for (bool zp : {false, true}) {
                auto s = parse_quant_scheme(n);
                ASSERT_TRUE(s.is_ok()) << n;
                if (zp && s->format != QuantFormat::kPackedInt) continue;
                s->zero_point = zp;
                Packed p;
                ASSERT_TRUE(compress_weight(*s, "m", w, rows, cols, &p.tensors, &p.owners).is_ok()) << n;
                CompressedConfig cfg{*s, {}};
                std::vector<std::shared_ptr<const void>> owners;
                auto t = decompress_weight(cfg, "m", p.parts("m"), &owners);
                ASSERT_TRUE(t.is_ok()) << s->name() << ": " << t.status().message();
                EXPECT_EQ(t->name, "m.weight");
                ASSERT_EQ(t->shape, (std::vector<uint64_t>{uint64_t(rows), uint64_t(cols)}));
                if (s->format == QuantFormat::kInt8) {
                    EXPECT_EQ(t->dtype, core::DType::kI8) << s->name() << " should run on the W8A8 kernels";
                    EXPECT_NE(t->row_scale, nullptr);
                } else if (cols % 32 == 0 && s->format == QuantFormat::kPackedInt)
                    EXPECT_NE(t->dtype, core::DType::kF32) << s->name() << " should run on the int8 kernels";
                else if (cols % 32 == 0 && s->format == QuantFormat::kMxfp4)
                    EXPECT_EQ(t->dtype, core::DType::kMxfp4) << s->name() << " should run on the FP4 kernels";
                else if (cols % 32 == 0 && s->format == QuantFormat::kNvfp4)
                    EXPECT_EQ(t->dtype, core::DType::kNvfp4) << s->name() << " should run on the FP4 kernels";
                else if (cols % 32 == 0 && (s->format == QuantFormat::kFp8 || s->format == QuantFormat::kFp8Block))
                    EXPECT_EQ(t->dtype, core::DType::kE4m3B32) << s->name() << " should run on the FP8 kernels";
                else if (cols % 32 == 0 && s->format == QuantFormat::kMxfp8)
                    EXPECT_EQ(t->dtype, core::DType::kMxfp8) << s->name() << " should run on the FP8 kernels";
                else
                    EXPECT_EQ(t->dtype, core::DType::kF32) << s->name();
                const std::vector<float> got = to_f32(*t);
                const std::vector<float> want = reference_values(*s, w, rows, cols);
                ASSERT_EQ(got.size(), want.size());
                const int64_t bad = first_bit_difference(got, want);
                EXPECT_EQ(bad, -1) << s->name() << " cols " << cols << ": element " << bad << " (row "
                                   << bad / cols << ", col " << bad % cols << ") loads as " << got[size_t(bad)]
                                   << ", the quantizer's value is " << want[size_t(bad)];
                double err = 0, ref = 0;
                for (size_t i = 0; i < w.size(); ++i) err += (got[i] - w[i]) * (got[i] - w[i]), ref += w[i] * w[i];
                EXPECT_LT(std::sqrt(err / ref), bound(*s)) << s->name() << " cols " << cols;
                EXPECT_GT(err, 0) << s->name();
            }
        }
    }
}

TEST(CompressedTensors, WrongPartsAreCorrupt) {
    const std::vector<float> w = random_matrix(16, 64, 5);
    for (const char* n : {"int8", "w4-g32", "nvfp4", "mxfp4", "fp8"}) {
        auto s = parse_quant_scheme(n);
        ASSERT_TRUE(s.is_ok());
        Packed p;
        ASSERT_TRUE(compress_weight(*s, "m", w, 16, 64, &p.tensors, &p.owners).is_ok());
        CompressedConfig cfg{*s, {}};
        std::vector<std::shared_ptr<const void>> owners;
        auto parts = p.parts("m");
        auto missing = parts;
        missing.erase("weight_scale");
        EXPECT_EQ(decompress_weight(cfg, "m", missing, &owners).status().code(), core::StatusCode::kCorrupt) << n;
        auto reshaped = parts;
        reshaped["weight_scale"].shape[0] += 1;
        EXPECT_EQ(decompress_weight(cfg, "m", reshaped, &owners).status().code(), core::StatusCode::kCorrupt) << n;
        auto retyped = parts;
        retyped["weight_scale"].dtype = core::DType::kI32;
        EXPECT_EQ(decompress_weight(cfg, "m", retyped, &owners).status().code(), core::StatusCode::kCorrupt) << n;
    }
    // A negative or NaN scale is corrupt, not NaN weights.
    auto s = parse_quant_scheme("int8");
    Packed p;
    ASSERT_TRUE(compress_weight(*s, "m", w, 16, 64, &p.tensors, &p.owners).is_ok());
    auto parts = p.parts("m");
    std::vector<float> bad(16, -1.0f);
    parts["weight_scale"].data = reinterpret_cast<const uint8_t*>(bad.data());
    std::vector<std::shared_ptr<const void>> owners;
    EXPECT_EQ(decompress_weight({*s, {}}, "m", parts, &owners).status().code(), core::StatusCode::kCorrupt);
}

TEST(CompressedTensors, Fp8NanCodesAreCorrupt) {
    for (int64_t cols : {64, 172}) {  // FP8 kernel blocks and the f32 fallback alike
        const std::vector<float> w = random_matrix(16, cols, 9);
        for (const char* n : {"fp8", "fp8-block", "mxfp8"}) {
            auto s = parse_quant_scheme(n);
            ASSERT_TRUE(s.is_ok());
            Packed p;
            ASSERT_TRUE(compress_weight(*s, "m", w, 16, cols, &p.tensors, &p.owners).is_ok());
            auto parts = p.parts("m");
            std::vector<uint8_t> codes(parts["weight"].data, parts["weight"].data + 16 * cols);
            codes[size_t(3 * cols + 5)] = 0xFF;  // E4M3 -NaN
            parts["weight"].data = codes.data();
            std::vector<std::shared_ptr<const void>> owners;
            auto t = decompress_weight({*s, {}}, "m", parts, &owners);
            EXPECT_EQ(t.status().code(), core::StatusCode::kCorrupt) << n << " cols " << cols;
            EXPECT_NE(t.status().message().find("(3, 5)"), std::string::npos) << t.status().message();
        }
    }
}

TEST(CompressedTensors, ConfigsRoundTripAndUnsupportedOnesAreRefused) {
    const std::string path = ::testing::TempDir() + "/kiln_ct_config.json";
    auto write = [&](const std::string& quant) {
        std::ofstream(path) << R"({"model_type": "llama", "quantization_config": )" << quant << "}";
    };
    for (const char* n : {"int8", "w4-g64", "fp8", "fp8-block", "mxfp8", "mxfp4", "nvfp4"}) {
        auto s = parse_quant_scheme(n);
        ASSERT_TRUE(s.is_ok());
        write(quantization_config_json(*s, {"lm_head", "model.layers.0.mlp.down_proj"}));
        auto c = read_quantization_config(path);
        ASSERT_TRUE(c.is_ok()) << n << ": " << c.status().message();
        ASSERT_TRUE(c->has_value());
        EXPECT_EQ((*c)->scheme.name(), s->name());
        EXPECT_EQ((*c)->ignore.size(), 2u);
    }
    QuantScheme zp{QuantFormat::kPackedInt, 128, true};
    write(quantization_config_json(zp, {}));
    EXPECT_EQ((*read_quantization_config(path))->scheme.name(), "w4-g128-zp");
    for (const char* other : {R"({"quant_method": "awq", "bits": 4, "version": "gemv"})",
                              R"({"quant_method": "gptq", "bits": 3, "group_size": 128})",
                              R"({"quant_method": "bitsandbytes", "load_in_4bit": true})"}) {
        write(other);
        EXPECT_EQ(read_quantization_config(path).status().code(), core::StatusCode::kUnsupported) << other;
    }
    // Static activation scales load (kiln's activations stay dynamic); the scheme records them.
    std::string static_act = quantization_config_json(*parse_quant_scheme("int8"), {});
    static_act.replace(static_act.find(R"("dynamic":true)"), 14, R"("dynamic":false)");
    write(static_act);
    auto st = read_quantization_config(path);
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    EXPECT_TRUE((*st)->scheme.static_inputs);
    // What kiln cannot run is refused by name.
    const std::string base = quantization_config_json(*parse_quant_scheme("w4-g32"), {});
    const std::pair<std::string, std::string> refused[] = {
        {R"("sparsity_config":{})", R"("sparsity_config":{"format":"sparse-24-bitmask"})"},
        {R"("sparsity_config":{})", R"("sparsity_config":{},"transform_config":{"config_groups":{"u":{}}})"},
        {R"("actorder":null)", R"("actorder":"sideways")"},
        {R"("num_bits":4)", R"("num_bits":12)"},
        {R"("type":"int")", R"("type":"float")"},
    };
    for (const auto& [from, to] : refused) {
        std::string q = base;
        ASSERT_NE(q.find(from), std::string::npos) << from;
        q.replace(q.find(from), from.size(), to);
        write(q);
        auto r = read_quantization_config(path);
        EXPECT_EQ(r.status().code(), core::StatusCode::kUnsupported) << to;
    }
    std::string asym_int8 = quantization_config_json(*parse_quant_scheme("int8"), {});
    asym_int8.replace(asym_int8.find(R"("symmetric":true)"), 16, R"("symmetric":false)");
    write(asym_int8);
    auto a8 = read_quantization_config(path);
    EXPECT_EQ(a8.status().code(), core::StatusCode::kUnsupported);
    EXPECT_NE(a8.status().message().find("asymmetric"), std::string::npos) << a8.status().message();
    std::ofstream(path) << R"({"model_type": "llama"})";
    auto none = read_quantization_config(path);
    ASSERT_TRUE(none.is_ok());
    EXPECT_FALSE(none->has_value());
    EXPECT_FALSE(parse_quant_scheme("w4-g48").is_ok());
    std::remove(path.c_str());
}

// NVIDIA ModelOpt: quant_method "modelopt" in config.json, or only hf_quant_config.json beside it (older
// exports); FP8 and NVFP4 load, other algorithms are refused by name.
TEST(CompressedTensors, ModeloptConfigs) {
    const std::string dir = ::testing::TempDir() + "/kiln_modelopt_config";
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/config.json", hf = dir + "/hf_quant_config.json";
    auto read = [&](const std::string& quant) {
        std::ofstream(path) << R"({"model_type": "llama", "quantization_config": )" << quant << "}";
        return read_quantization_config(path);
    };
    auto fp8 = read(R"({"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"]})");
    ASSERT_TRUE(fp8.is_ok() && fp8->has_value()) << fp8.status().message();
    EXPECT_EQ((*fp8)->scheme.format, QuantFormat::kFp8);
    EXPECT_TRUE((*fp8)->scheme.tensor_scale);
    EXPECT_EQ((*fp8)->ignore.size(), 1u);
    auto nv = read(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": {}})");
    ASSERT_TRUE(nv.is_ok() && nv->has_value()) << nv.status().message();
    EXPECT_EQ((*nv)->scheme.format, QuantFormat::kNvfp4);
    EXPECT_TRUE((*nv)->scheme.modelopt);
    for (const char* algo : {"W4A16_AWQ", "FP8_PB_WO", "MIXED_PRECISION"}) {
        auto r = read(std::string(R"({"quant_method": "modelopt", "quant_algo": ")") + algo + "\"}");
        EXPECT_EQ(r.status().code(), core::StatusCode::kUnsupported) << algo;
        EXPECT_NE(r.status().message().find(algo), std::string::npos) << r.status().message();
    }
    // Only hf_quant_config.json
    std::ofstream(path) << R"({"model_type": "llama"})";
    std::ofstream(hf) << R"({"producer": {"name": "modelopt", "version": "0.47.0"},
        "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}})";
    auto file = read_quantization_config(path);
    ASSERT_TRUE(file.is_ok() && file->has_value()) << file.status().message();
    EXPECT_TRUE((*file)->scheme.modelopt);
    std::ofstream(hf) << R"({"quantization": {"quant_algo": "NVFP4", "group_size": 32}, "producer": {"name": "modelopt"}})";
    EXPECT_EQ(read_quantization_config(path).status().code(), core::StatusCode::kUnsupported);
    std::ofstream(hf) << R"({"quantization": {"quant_algo": "FP8"}})";
    EXPECT_EQ(read_quantization_config(path).status().code(), core::StatusCode::kCorrupt);
    std::filesystem::remove_all(dir);
}

// GPTQ's "group" activation order (older compressed-tensors and AutoGPTQ-style checkpoints): each
// column's group comes from weight_g_idx, not from its position. Scales in bf16, as llmcompressor
// stores them. Non-contiguous groups load as f32 equal to (q - 0) * scale[row, g_idx[col]]; a
// g_idx that is the contiguous order loads onto Q4_0; a group index out of range is kCorrupt.
TEST(CompressedTensors, ActOrderGroupsFollowGIdx) {
    constexpr int64_t kRows = 4, kCols = 64, kGroup = 32;
    std::mt19937 rng(3);
    std::vector<int32_t> packed(size_t(kRows * kCols / 8), 0);
    std::vector<int> q(size_t(kRows * kCols));
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kCols; ++c) {
            const int v = int(rng() % 16) - 8;
            q[size_t(r * kCols + c)] = v;
            uint32_t& word = reinterpret_cast<uint32_t&>(packed[size_t(r * kCols / 8 + c / 8)]);
            word |= uint32_t(v + 8) << (4 * (c % 8));
        }
    std::vector<uint16_t> scales_bf16(size_t(kRows * 2));
    for (size_t i = 0; i < scales_bf16.size(); ++i) scales_bf16[i] = core::f32_to_bf16(0.01f * float(i + 1));
    std::vector<int32_t> g_idx(kCols);
    for (int64_t c = 0; c < kCols; ++c) g_idx[size_t(c)] = int32_t((c * 7) % kCols < kGroup ? 0 : 1);
    const std::vector<int64_t> shape = {kRows, kCols};
    auto parts_with = [&](const std::vector<int32_t>& gi) {
        std::map<std::string, TensorPart> p;
        p["weight_packed"] = {core::DType::kI32, {kRows, kCols / 8}, reinterpret_cast<const uint8_t*>(packed.data()),
                              packed.size() * 4};
        p["weight_scale"] = {core::DType::kBF16, {kRows, 2}, reinterpret_cast<const uint8_t*>(scales_bf16.data()),
                             scales_bf16.size() * 2};
        p["weight_shape"] = {core::DType::kI64, {2}, reinterpret_cast<const uint8_t*>(shape.data()), 16};
        p["weight_g_idx"] = {core::DType::kI32, {kCols}, reinterpret_cast<const uint8_t*>(gi.data()), gi.size() * 4};
        return p;
    };
    QuantScheme s;
    s.format = QuantFormat::kPackedInt;
    s.group_size = kGroup;
    s.act_order = true;
    std::vector<std::shared_ptr<const void>> owners;
    auto t = decompress_weight({s, {}}, "m", parts_with(g_idx), &owners);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    ASSERT_EQ(t->dtype, core::DType::kF32);
    const std::vector<float> got = to_f32(*t);
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kCols; ++c) {
            const float scale = core::bf16_to_f32(scales_bf16[size_t(r * 2 + g_idx[size_t(c)])]);
            ASSERT_EQ(got[size_t(r * kCols + c)], float(q[size_t(r * kCols + c)]) * scale) << r << ", " << c;
        }
    std::vector<int32_t> in_order(kCols);
    for (int64_t c = 0; c < kCols; ++c) in_order[size_t(c)] = int32_t(c / kGroup);
    auto blocks = decompress_weight({s, {}}, "m", parts_with(in_order), &owners);
    ASSERT_TRUE(blocks.is_ok()) << blocks.status().message();
    EXPECT_EQ(blocks->dtype, core::DType::kQ4_0);
    std::vector<int32_t> bad = g_idx;
    bad[9] = 2;
    EXPECT_EQ(decompress_weight({s, {}}, "m", parts_with(bad), &owners).status().code(), core::StatusCode::kCorrupt);
}

}  // namespace
}  // namespace kiln::loader
