// SmolLM2-135M-Instruct (Q4_1 GGUF, the default model) on three prompts (plain text, a chat turn with
// special tokens, code) against two independent implementations, goldens in tests/golden/data/smollm2/:
//  - a float64 NumPy forward pass over the weights as the `gguf` package dequantizes them
//    (scripts/gen_smollm2_goldens_f64.py): the same math as kiln's f32-activation path
//    (ops::LinearOptions::f32_activations), so its teacher-forced top-5 logits must agree to
//    kF64Tol and 64 greedy tokens exactly;
//  - llama.cpp (scripts/gen_smollm2_goldens_llamacpp.py): the tokenization must match id for id,
//    and the top-5 logits of both kiln paths (f32 activations, and the default int8 activations
//    with the best ISA's kernels) within kLlamaCppTol. llama.cpp multiplies Q4_1/Q8_0 weights with
//    activations rounded to 8 bits per block of 32 (and keeps the KV cache in f16). Rounding the
//    activations that way in the float64 reference alone (gen_smollm2_goldens_f64.py
//    --q8-activations, measured once, not committed) moves these logits by up to 1.57 (chat prompt,
//    position 19); llama.cpp's measured distance from kiln's f32 path is up to 1.26 there and
//    0.72 / 0.61 on the other prompts, from kiln's int8 path 0.75 - 0.89 (it moves with the
//    kernels' summation order). The rounding of 8-bit activations is chaotic over 30 layers (a
//    last-bit difference in a block's scale flips roundings): kiln's int8 path and llama.cpp agreed
//    on 64, 52 and 12 greedy tokens of the three prompts when measured, and rounding differences
//    alone move the logits by up to ~1, so only the logits are compared with llama.cpp, never the
//    greedy runs.
// kF64Tol: the measured distance of kiln's f32 logits from float64 is below 1e-4 (f32 rounding
// over 30 layers with 576..1536-term dot products); 2e-3 leaves room for summation-order changes
// of the SIMD kernels while staying 100x below llama.cpp's quantization effect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "loader/checkpoint.h"
#include "loader/checkpoint_tokenizer.h"
#include "model/cpu_model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::model {
namespace {

constexpr double kF64Tol = 2e-3;
constexpr double kLlamaCppTol = 1.5;

std::string golden(const std::string& name) {
    std::string here = __FILE__;
    return here.substr(0, here.rfind('/')) + "/data/smollm2/" + name;
}

std::vector<int32_t> parse_id_line(const std::string& text) {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    int32_t v;
    while (in >> v) ids.push_back(v);
    return ids;
}

class SmolLM2 : public ::testing::TestWithParam<std::string> {
protected:
    static void SetUpTestSuite() {
        const std::string path = test::smollm2_path();
        ASSERT_TRUE(test::file_exists(path)) << path << " is missing: run scripts/setup (or set KILN_SMOLLM2)";
        auto ck = loader::load_checkpoint(path);
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        ck_ = new Checkpoint(std::move(ck).value());
        auto tok = loader::load_tokenizer(*ck_);
        ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
        tok_ = std::move(tok).value().release();
        pool_ = new core::ThreadPool(2);
        ops::LinearOptions f32;
        f32.f32_activations = true;
        auto model = CpuModel::create(*ck_, pool_, f32);
        ASSERT_TRUE(model.is_ok()) << model.status().to_string();
        model_ = std::move(model).value().release();
        auto fast = CpuModel::create(*ck_, pool_);
        ASSERT_TRUE(fast.is_ok()) << fast.status().to_string();
        fast_ = std::move(fast).value().release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete fast_;
        delete pool_;
        delete tok_;
        delete ck_;
    }
    void SetUp() override {
        ASSERT_NE(model_, nullptr);
        prompt_ = test::read_text(golden("prompt_" + GetParam() + ".txt"));
        ASSERT_FALSE(prompt_.empty()) << golden("prompt_" + GetParam() + ".txt");
    }
    static inline Checkpoint* ck_ = nullptr;
    static inline tokenizer::Tokenizer* tok_ = nullptr;
    static inline core::ThreadPool* pool_ = nullptr;
    static inline CpuModel* model_ = nullptr;  // f32 activations (the reference path)
    static inline CpuModel* fast_ = nullptr;   // default: int8 activations, best ISA
    std::string prompt_;
};

// Compares kiln's teacher-forced logits of the golden's input ids with its top-5 lists: each listed
// logit within tol, and kiln's argmax equal to the golden's wherever its top two are over 2 tol apart.
void check_top5(const CpuModel& model, const std::string& file, double tol) {
    const std::string text = test::read_text(golden(file));
    std::vector<test::TopK> want = test::parse_topk(text);
    std::vector<int32_t> ids = test::parse_input_ids(text);
    ASSERT_FALSE(want.empty()) << file;
    ASSERT_EQ(ids.size(), want.size()) << file;
    KvCache cache(model.config(), int64_t(ids.size()));
    auto logits = const_cast<CpuModel&>(model).forward(ids, cache, /*all_logits=*/true);
    ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
    const int64_t V = model.config().vocab_size;
    double max_err = 0;
    size_t max_pos = 0;
    for (size_t t = 0; t < want.size(); ++t) {
        const float* row = logits->data() + t * size_t(V);  // [V]
        for (const auto& [id, logit] : want[t].top) {
            const double err = std::abs(double(row[id]) - logit);
            if (err > max_err) max_err = err, max_pos = t;
            EXPECT_LE(err, tol) << file << " position " << t << " id " << id << ": kiln " << row[id] << ", golden "
                                << logit;
        }
        const int32_t best = int32_t(std::max_element(row, row + V) - row);
        if (want[t].top[0].second - want[t].top[1].second > 2 * tol) {
            EXPECT_EQ(best, want[t].top[0].first) << file << " position " << t;
        }
    }
    std::printf("[ %s ] %zu positions, top-5 logits max abs difference %.3g at position %zu (tolerance %g)\n",
                file.c_str(), want.size(), max_err, max_pos, tol);
}

TEST_P(SmolLM2, TokenizationMatchesLlamaCpp) {
    std::vector<int32_t> want = test::parse_input_ids(test::read_text(golden("llamacpp_logits_top5_" + GetParam() + ".txt")));
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(tok_->encode(prompt_), want);
}

TEST_P(SmolLM2, Top5LogitsMatchFloat64) {
    check_top5(*model_, "f64_logits_top5_" + GetParam() + ".txt", kF64Tol);
}

TEST_P(SmolLM2, Top5LogitsMatchLlamaCpp) {
    check_top5(*model_, "llamacpp_logits_top5_" + GetParam() + ".txt", kLlamaCppTol);
    check_top5(*fast_, "llamacpp_logits_top5_" + GetParam() + ".txt", kLlamaCppTol);
}

TEST_P(SmolLM2, Greedy64MatchesFloat64) {
    std::vector<int32_t> want = parse_id_line(test::read_text(golden("f64_greedy64_" + GetParam() + ".txt")));
    ASSERT_EQ(want.size(), 64u);
    std::vector<int32_t> next = tok_->encode(prompt_);
    KvCache cache(model_->config(), int64_t(next.size()) + 64);
    const int64_t V = model_->config().vocab_size;
    std::vector<int32_t> got;
    for (int step = 0; step < 64; ++step) {
        auto logits = model_->forward(next, cache, false);
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        const int32_t best = int32_t(std::max_element(logits->begin(), logits->begin() + V) - logits->begin());
        got.push_back(best);
        next = {best};
    }
    EXPECT_EQ(got, want) << "kiln: " << tok_->decode(got) << "\nfloat64: " << tok_->decode(want);
}

// The same golden through the serving engine's path (EngineCore: scheduler, paged KV cache,
// forward_batch, sampler) with f32 activations and f32 K/V: 16-token blocks with the whole prompt in one
// step, and 7-token blocks with prefill chunks of 24 tokens, so blocks and chunks end mid-prompt.
TEST_P(SmolLM2, Greedy64ThroughTheEngineMatchesFloat64) {
    std::vector<int32_t> want = parse_id_line(test::read_text(golden("f64_greedy64_" + GetParam() + ".txt")));
    ASSERT_EQ(want.size(), 64u);
    const std::vector<int32_t> prompt = tok_->encode(prompt_);
    for (const auto& [block_size, max_batch_tokens] : {std::pair{16, 512}, std::pair{7, 24}}) {
        engine::EngineConfig c;
        c.block_size = block_size;
        c.max_batch_tokens = max_batch_tokens;
        c.kv_dtype = kernels::KvDtype::kF32;
        c.num_kv_blocks = 64;
        auto core = engine::EngineCore::create(model_, tok_, c);
        ASSERT_TRUE(core.is_ok()) << core.status().to_string();
        std::vector<int32_t> got;
        engine::FinishReason reason = engine::FinishReason::kNone;
        engine::Request r;
        r.prompt = prompt;
        r.params.temperature = 0.0f;
        r.params.max_tokens = 64;
        r.params.ignore_eos = true;
        r.on_output = [&](const engine::StepOutput& o) {
            got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
            if (o.finished) reason = o.finish_reason;
        };
        ASSERT_TRUE((*core)->add(1, std::move(r)).is_ok());
        while ((*core)->step()) {
        }
        EXPECT_EQ(reason, engine::FinishReason::kLength) << "block size " << block_size;
        EXPECT_EQ(got, want) << "block size " << block_size << "\nkiln: " << tok_->decode(got)
                             << "\nfloat64: " << tok_->decode(want);
    }
}

INSTANTIATE_TEST_SUITE_P(Prompts, SmolLM2, ::testing::Values("capital", "chat", "code"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::model
