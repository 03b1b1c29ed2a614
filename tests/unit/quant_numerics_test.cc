// measure_quant_numerics on stories260K: per-tensor weight figures for every scheme, their ordering
// as the formats' precision predicts (int8 with 7 magnitude bits per row; FP8 / MXFP8 with 3
// mantissa bits; 4-bit formats), output errors on calibration activations, and argument errors.
#include "quant_tools/quant_numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "loader/checkpoint_tokenizer.h"
#include "loader/convert.h"
#include "quant_tools/quantize.h"
#include "support/test_support.h"

namespace kiln::quant_tools {
namespace {

struct Fixture {
    Checkpoint f32;
    std::vector<LayerActivations> acts;  // empty when the calibration text is missing
};

// The f32 checkpoint and activations of ~2000 calibration tokens, loaded once for all tests.
const Fixture* stories() {
    static const Fixture* f = [] {
        const std::string path = test::testdata("models/stories260K/stories260K.bin");
        if (!test::file_exists(path)) return static_cast<Fixture*>(nullptr);
        auto ck = loader::load_checkpoint(path);
        EXPECT_TRUE(ck.is_ok()) << ck.status().message();
        if (!ck.is_ok()) return static_cast<Fixture*>(nullptr);
        auto f32 = loader::to_f32_checkpoint(*ck);
        EXPECT_TRUE(f32.is_ok()) << f32.status().message();
        if (!f32.is_ok()) return static_cast<Fixture*>(nullptr);
        auto* fx = new Fixture{std::move(*f32), {}};
        const std::string text = test::read_text(test::testdata("eval/tinystories_excerpt.txt"));
        auto tok = loader::find_tokenizer(fx->f32, "");
        if (!text.empty() && tok.is_ok()) {
            std::vector<int32_t> ids = (*tok)->encode(text.substr(0, 8000));
            core::ThreadPool pool(2);
            auto acts = collect_activations(fx->f32, ids, &pool, CalibrationOptions{});
            EXPECT_TRUE(acts.is_ok()) << acts.status().message();
            if (acts.is_ok()) fx->acts = std::move(*acts);
        }
        return fx;
    }();
    return f;
}

NumericsReport measure(const Fixture& fx, const std::string& name, bool with_acts) {
    auto scheme = loader::parse_quant_scheme(name);
    EXPECT_TRUE(scheme.is_ok()) << name;
    core::ThreadPool pool(2);
    auto r = measure_quant_numerics(fx.f32, *scheme, with_acts && !fx.acts.empty() ? &fx.acts : nullptr, &pool);
    EXPECT_TRUE(r.is_ok()) << name << ": " << r.status().message();
    return r.is_ok() ? std::move(*r) : NumericsReport{};
}

TEST(QuantNumerics, FiguresPerTensorAndFormatOrdering) {
    const Fixture* fx = stories();
    if (!fx) KILN_SKIP_MISSING() << "stories260K not in testdata";
    const char* names[] = {"int8", "fp8", "fp8-block", "mxfp8", "w4-g32", "w4-g128", "mxfp4", "nvfp4"};
    std::map<std::string, double> mean;
    for (const char* n : names) {
        const NumericsReport r = measure(*fx, n, false);
        ASSERT_EQ(r.tensors.size(), size_t(fx->f32.config.num_layers * 7)) << n;
        for (const TensorNumerics& t : r.tensors) {
            EXPECT_TRUE(std::isfinite(t.sqnr_db)) << n << " " << t.name;
            // SQNR and relative error are two spellings of the same ratio.
            EXPECT_NEAR(t.rel_error, std::pow(10.0, -t.sqnr_db / 20), 1e-9 + 1e-9 * t.rel_error) << n << " " << t.name;
            EXPECT_GT(t.max_abs_error, 0) << n << " " << t.name;
            EXPECT_TRUE(std::isnan(t.output_rel_error)) << "no activations given";
            if (std::string(n) == "int8") {
                EXPECT_GT(t.sqnr_db, 35) << t.name;
            }
        }
        EXPECT_GE(r.summary.mean_sqnr_db, r.summary.worst_sqnr_db) << n;
        mean[n] = r.summary.mean_sqnr_db;
        std::printf("%-10s mean SQNR %6.2f dB  total %6.2f dB  worst %6.2f dB (%s)\n", n, r.summary.mean_sqnr_db,
                    r.summary.total_sqnr_db, r.summary.worst_sqnr_db, r.summary.worst_tensor.c_str());
    }
    // Each extra bit of precision is worth ~6 dB: int8 (7 magnitude bits per row) is far above the
    // 3-mantissa-bit FP8 formats, which are far above the 4-bit ones.
    EXPECT_GT(mean["int8"], mean["fp8"] + 6);
    EXPECT_GT(mean["int8"], mean["mxfp8"] + 6);
    EXPECT_NEAR(mean["fp8"], mean["mxfp8"], 3);  // same element format; scales differ
    EXPECT_GT(std::min(mean["fp8"], mean["mxfp8"]), mean["w4-g32"] + 6);
    // Smaller groups fit the local range better; NVFP4's 16-blocks with E4M3 scales beat MXFP4's
    // 32-blocks with power-of-two scales.
    EXPECT_GT(mean["w4-g32"], mean["w4-g128"]);
    EXPECT_GT(mean["nvfp4"], mean["mxfp4"]);
}

TEST(QuantNumerics, OutputErrorOnCalibration) {
    const Fixture* fx = stories();
    if (!fx) KILN_SKIP_MISSING() << "stories260K not in testdata";
    if (fx->acts.empty()) KILN_SKIP_MISSING() << "eval/tinystories_excerpt.txt not in testdata";
    for (const char* n : {"int8", "fp8", "w4-g32", "mxfp4", "nvfp4"}) {
        const NumericsReport r = measure(*fx, n, true);
        ASSERT_FALSE(r.tensors.empty()) << n;
        for (const TensorNumerics& t : r.tensors) {
            EXPECT_TRUE(std::isfinite(t.output_rel_error)) << n << " " << t.name;
            EXPECT_GT(t.output_rel_error, 0) << n << " " << t.name;
            EXPECT_LT(t.output_rel_error, 1) << n << " " << t.name;
        }
        EXPECT_FALSE(r.summary.worst_output_tensor.empty()) << n;
        EXPECT_LE(r.summary.mean_output_rel_error, r.summary.worst_output_rel_error) << n;
        std::printf("%-10s mean output rel error %.4f  worst %.4f (%s)\n", n, r.summary.mean_output_rel_error,
                    r.summary.worst_output_rel_error, r.summary.worst_output_tensor.c_str());
    }
}

// The figures are those of the weights kiln loads from a `kiln quantize` folder (Q/K rows included,
// which are written in HF order and permuted back on load; fp8-block's 128x128 tiles span rows).
TEST(QuantNumerics, MatchesAQuantizedCheckpoint) {
    const Fixture* fx = stories();
    if (!fx) KILN_SKIP_MISSING() << "stories260K not in testdata";
    auto src = loader::load_checkpoint(test::testdata("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(src.is_ok());
    for (const char* n : {"int8", "w4-g32", "fp8-block", "nvfp4"}) {
        const NumericsReport r = measure(*fx, n, false);
        const std::string dir = test::temp_dir(std::string("quant_numerics_") + n);
        QuantizeOptions o;
        o.scheme = *loader::parse_quant_scheme(n);
        core::ThreadPool pool(2);
        ASSERT_TRUE(quantize_checkpoint(*src, dir, o, &pool).is_ok()) << n;
        auto loaded = loader::load_checkpoint(dir);
        ASSERT_TRUE(loaded.is_ok()) << n << ": " << loaded.status().message();
        auto q = loader::to_f32_checkpoint(*loaded);
        ASSERT_TRUE(q.is_ok()) << n;
        for (const TensorNumerics& t : r.tensors) {
            const TensorRef* a = fx->f32.find(t.name);
            const TensorRef* b = q->find(t.name);
            ASSERT_TRUE(a && b && b->dtype == core::DType::kF32) << n << " " << t.name;
            const float* wa = reinterpret_cast<const float*>(a->data);
            const float* wb = reinterpret_cast<const float*>(b->data);
            double signal = 0, noise = 0, max_err = 0;
            for (uint64_t i = 0; i < a->num_elements(); ++i) {
                const double d = double(wa[i]) - double(wb[i]);
                signal += double(wa[i]) * wa[i];
                noise += d * d;
                max_err = std::max(max_err, std::fabs(d));
            }
            EXPECT_NEAR(t.sqnr_db, 10 * std::log10(signal / noise), 1e-6) << n << " " << t.name;
            EXPECT_NEAR(t.max_abs_error, max_err, 1e-6 * max_err) << n << " " << t.name;
        }
    }
}

TEST(QuantNumerics, Errors) {
    EXPECT_FALSE(loader::parse_quant_scheme("int3").is_ok());
    EXPECT_FALSE(loader::parse_quant_scheme("w4-g48").is_ok());
    const Fixture* fx = stories();
    if (!fx) KILN_SKIP_MISSING() << "stories260K not in testdata";
    // Quantized (non-f32) projections are refused: the reference must be float.
    auto raw = loader::load_checkpoint(test::testdata("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(raw.is_ok());
    Checkpoint ck = *raw;
    for (TensorRef& t : ck.tensors)
        if (t.name == "blk.0.attn_q.weight") t.dtype = core::DType::kF16;
    auto r = measure_quant_numerics(ck, loader::QuantScheme{}, nullptr, nullptr);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("blk.0.attn_q.weight"), std::string::npos) << r.status().message();
    // Activations for another number of layers.
    std::vector<LayerActivations> wrong(1);
    EXPECT_EQ(measure_quant_numerics(fx->f32, loader::QuantScheme{}, &wrong, nullptr).status().code(),
              core::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::quant_tools
