// quant_tools/gptq_calibrate.h on stories260K: layer 0's factors are the same sequential or not (both from
// the f32 model's inputs); every later layer's sequential factor (from the residual streams carried
// layer to layer) equals, bit for bit, one recomputed here by a full pass from the embeddings of the
// model with the earlier layers replaced by their GPTQ weights (gptq_quantize_int4 under the
// returned factors, dequantized; a skipped weight left f32), and differs from the one-pass factor,
// which equals the factor of the unmodified model's inputs; q/k/v share one factor. Calibration
// with `layer` keeps that layer's inputs only, the same rows as a pass keeping every layer's; a
// layer outside the model is kInvalidArgument.
#include "quant_tools/gptq_calibrate.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "quant_tools/calibration.h"
#include "loader/checkpoint.h"
#include "loader/convert.h"
#include "model/cpu_model.h"
#include "support/test_support.h"

namespace kiln::quant_tools {
namespace {

constexpr const char* kMembers[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

std::string weight(int64_t l, const char* member) {
    return "blk." + std::to_string(l) + "." + member + ".weight";
}

LinearInput input_of(const std::string& member) {
    if (member == "attn_output") return LinearInput::kAttnOut;
    if (member == "ffn_gate" || member == "ffn_up") return LinearInput::kGateUp;
    if (member == "ffn_down") return LinearInput::kDown;
    return LinearInput::kQkv;
}

struct Fixture {
    Checkpoint ck;
    std::vector<int32_t> tokens;
    GptqCalibrateOptions options;
};

bool load(Fixture* f) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) return false;
    auto src = loader::load_checkpoint(path);
    EXPECT_TRUE(src.is_ok()) << src.status().to_string();
    auto ck = loader::to_f32_checkpoint(*src);
    EXPECT_TRUE(ck.is_ok()) << ck.status().to_string();
    f->ck = std::move(*ck);
    f->tokens.resize(300);
    for (size_t i = 0; i < f->tokens.size(); ++i) f->tokens[i] = int32_t(1 + (i * 37) % 500);
    f->options.gptq.group_size = 32;
    f->options.gptq.mode = quant::Int4Mode::kAsymmetric;
    f->options.calibration.chunk_tokens = 64;
    f->options.calibration.max_samples = 128;
    return true;
}

// The factor of layer l's input `which`, from `ck` with every weight of layers < l except `skip`
// replaced by its GPTQ weights under `factors`.
core::Result<quant::GptqFactor> reference_factor(const Fixture& f, const GptqFactors& factors, int64_t l,
                                                 LinearInput which, const std::set<std::string>& skip,
                                                 core::ThreadPool* pool) {
    Checkpoint run = f.ck;
    for (TensorRef& t : run.tensors) {
        const auto it = factors.find(t.name);
        long long layer = -1;
        if (it == factors.end() || skip.count(t.name) || std::sscanf(t.name.c_str(), "blk.%lld.", &layer) != 1 ||
            layer >= l)
            continue;
        const int64_t cols = it->second->cols, rows = int64_t(t.num_elements()) / cols;
        KILN_ASSIGN_OR_RETURN(quant::Int4Matrix q,
                              quant::gptq_quantize_int4(
                                  std::span<const float>(reinterpret_cast<const float*>(t.data), size_t(rows * cols)),
                                  rows, cols, *it->second, f.options.gptq, pool));
        auto deq = std::make_shared<std::vector<float>>(quant::dequantize(q));
        t.data = reinterpret_cast<const uint8_t*>(deq->data());
        run.owners.push_back(deq);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<LayerActivations> acts,
                          collect_activations(run, f.tokens, pool, f.options.calibration));
    const LayerActivations& a = acts[size_t(l)];
    const size_t k = size_t(which);
    return quant::gptq_factor(quant::gptq_hessian(a.x[k], a.rows[k], a.cols[k], pool), a.cols[k]);
}

TEST(GptqCalibrate, SequentialFactorsComeFromTheQuantizedEarlierLayers) {
    Fixture f;
    if (!load(&f)) KILN_SKIP_MISSING() << "no stories260K";
    core::ThreadPool pool(2);
    auto seq = gptq_calibrate(f.ck, f.tokens, f.options, &pool);
    ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
    GptqCalibrateOptions one_pass = f.options;
    one_pass.sequential = false;
    auto one = gptq_calibrate(f.ck, f.tokens, one_pass, &pool);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    const int64_t layers = f.ck.config.num_layers;
    ASSERT_EQ(seq->size(), size_t(7 * layers));
    ASSERT_EQ(one->size(), size_t(7 * layers));
    for (int64_t l = 0; l < layers; ++l) {
        EXPECT_EQ(seq->at(weight(l, "attn_q")), seq->at(weight(l, "attn_v")));  // one factor per input
        EXPECT_EQ(seq->at(weight(l, "ffn_gate")), seq->at(weight(l, "ffn_up")));
    }
    for (const char* m : kMembers) {
        // Layer 0 reads the embeddings in both modes.
        EXPECT_EQ(seq->at(weight(0, m))->u, one->at(weight(0, m))->u) << m;
        EXPECT_NE(seq->at(weight(2, m))->u, one->at(weight(2, m))->u) << m;
    }
    // Every later layer: the sequential factor is the one of the model whose earlier layers are
    // GPTQ'd (the one-pass factor is that of the f32 model, below).
    for (int64_t l = 1; l < layers; ++l)
        for (const char* m : {"attn_q", "attn_output", "ffn_up", "ffn_down"}) {
            auto ref = reference_factor(f, *seq, l, input_of(m), {}, &pool);
            ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
            EXPECT_EQ(seq->at(weight(l, m))->u, ref->u) << l << " " << m;
            EXPECT_EQ(seq->at(weight(l, m))->dead, ref->dead) << l << " " << m;
        }
    // The one-pass factors of a later layer: the f32 model's inputs.
    auto acts = collect_activations(f.ck, f.tokens, &pool, f.options.calibration);
    ASSERT_TRUE(acts.is_ok());
    const LayerActivations& a = (*acts)[3];
    const size_t k = size_t(LinearInput::kDown);
    auto down = quant::gptq_factor(quant::gptq_hessian(a.x[k], a.rows[k], a.cols[k], &pool), a.cols[k]);
    ASSERT_TRUE(down.is_ok());
    EXPECT_EQ(one->at(weight(3, "ffn_down"))->u, down->u);
}

TEST(GptqCalibrate, SkippedWeightsStayF32InThePasses) {
    Fixture f;
    if (!load(&f)) KILN_SKIP_MISSING() << "no stories260K";
    core::ThreadPool pool(2);
    const std::string skipped = weight(0, "ffn_down");
    f.options.skipped = [&](const std::string& name) { return name == skipped; };
    auto seq = gptq_calibrate(f.ck, f.tokens, f.options, &pool);
    ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
    auto with_skip = reference_factor(f, *seq, 1, LinearInput::kQkv, {skipped}, &pool);
    auto without = reference_factor(f, *seq, 1, LinearInput::kQkv, {}, &pool);
    ASSERT_TRUE(with_skip.is_ok() && without.is_ok());
    EXPECT_EQ(seq->at(weight(1, "attn_q"))->u, with_skip->u);
    EXPECT_NE(seq->at(weight(1, "attn_q"))->u, without->u);
}

TEST(GptqCalibrate, CalibrationOfOneLayer) {
    Fixture f;
    if (!load(&f)) KILN_SKIP_MISSING() << "no stories260K";
    core::ThreadPool pool(2);
    CalibrationOptions co = f.options.calibration;
    co.max_seq_tokens = 64;
    auto all = collect_activations(f.ck, f.tokens, &pool, co);
    ASSERT_TRUE(all.is_ok());
    co.layer = 2;
    auto one = collect_activations(f.ck, f.tokens, &pool, co);
    ASSERT_TRUE(one.is_ok());
    ASSERT_EQ(one->size(), all->size());
    for (size_t l = 0; l < one->size(); ++l) {
        const LayerActivations &a = (*one)[l], &b = (*all)[l];
        for (size_t k = 0; k < 4; ++k) {
            if (l == 2) {
                EXPECT_GT(a.rows[k], 0);
                EXPECT_EQ(a.rows[k], b.rows[k]);
                EXPECT_EQ(a.x[k], b.x[k]);
                EXPECT_EQ(a.abs_max[k], b.abs_max[k]);
            } else {
                EXPECT_EQ(a.rows[k], 0);
                EXPECT_TRUE(a.x[k].empty());
            }
        }
        if (l == 2) {
            EXPECT_EQ(a.qkv_seq, b.qkv_seq);
        }
    }
    for (int64_t bad : {int64_t(-2), f.ck.config.num_layers}) {
        co.layer = bad;
        auto r = collect_activations(f.ck, f.tokens, &pool, co);
        ASSERT_FALSE(r.is_ok());
        EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
    }
}

}  // namespace
}  // namespace kiln::quant_tools
