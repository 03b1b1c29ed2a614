// CpuModel on tiny random checkpoints built in memory (Qwen2-like with q/k/v biases, Qwen3-like
// with q/k RMSNorm and an output bias, Mistral-like with a sliding window, a Llama with q8_0/q4_0
// weights and a q8_0 embedding): a batched prefill must give the same logits (1e-4) as feeding the
// same tokens one at a time, and as a prefill split in two, which catches KV-cache, position and
// masking bugs. Also: set_last_layer stops a pass after a layer (calibration); errors for
// unsupported architectures, bad ids and a full cache.
#include "model/cpu_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "support/random_model.h"

namespace kiln::model {
namespace {

using core::DType;

using test::RandomCheckpoint;
using test::tiny_config;

std::vector<int32_t> prompt() {
    return {1, 5, 17, 96, 33, 33, 8, 60, 2, 41, 77};
}

// Max |a - b| over all logits of three ways of running the prompt.
void expect_prefill_matches_decode(const Checkpoint& ck, int threads) {
    core::ThreadPool pool(threads);
    auto model = CpuModel::create(ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const std::vector<int32_t> ids = prompt();
    const size_t V = size_t(ck.config.vocab_size);

    KvCache c1(ck.config, 64);
    auto batched = (*model)->forward(ids, c1, true);
    ASSERT_TRUE(batched.is_ok()) << batched.status().to_string();
    ASSERT_EQ(batched->size(), ids.size() * V);

    KvCache c2(ck.config, 64);
    KvCache c3(ck.config, 64);
    double max_err = 0, max_abs = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
        auto one = (*model)->forward({ids[t]}, c2, false);
        ASSERT_TRUE(one.is_ok()) << one.status().to_string();
        for (size_t i = 0; i < V; ++i) {
            max_err = std::max(max_err, double(std::abs((*one)[i] - (*batched)[t * V + i])));
            max_abs = std::max(max_abs, double(std::abs((*one)[i])));
            ASSERT_TRUE(std::isfinite((*one)[i]));
        }
    }
    EXPECT_LE(max_err, 1e-4) << ck.config.arch << " threads " << threads;
    EXPECT_GT(max_abs, 0.1);  // not a degenerate model
    // Two chunks: 4 tokens then the rest, last logits only.
    std::vector<int32_t> a(ids.begin(), ids.begin() + 4), b(ids.begin() + 4, ids.end());
    ASSERT_TRUE((*model)->forward(a, c3, false).is_ok());
    auto tail = (*model)->forward(b, c3, false);
    ASSERT_TRUE(tail.is_ok());
    for (size_t i = 0; i < V; ++i) EXPECT_NEAR((*tail)[i], (*batched)[(ids.size() - 1) * V + i], 1e-4);
    EXPECT_EQ(c3.size(), int64_t(ids.size()));
}

TEST(CpuModel, Qwen2BiasPrefillMatchesDecode) {
    ModelConfig c = tiny_config("qwen2");
    c.attention_bias = true;
    c.tie_word_embeddings = true;
    RandomCheckpoint b;
    b.build(c);
    expect_prefill_matches_decode(b.ck, 1);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(CpuModel, Qwen3QkNormPrefillMatchesDecode) {
    ModelConfig c = tiny_config("qwen3");
    c.qk_norm = true;
    c.attention_bias = true;  // Qwen3 with attention_bias also has the o_proj bias
    c.rope_theta = 1000000;
    RandomCheckpoint b;
    b.build(c);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(CpuModel, MistralSlidingWindowPrefillMatchesDecode) {
    ModelConfig c = tiny_config("mistral");
    c.sliding_window = 3;
    RandomCheckpoint b;
    b.build(c);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(CpuModel, QuantizedLlama3PrefillMatchesDecode) {
    ModelConfig c = tiny_config("llama");
    c.rope_theta = 500000;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position_embeddings = 16;
    RandomCheckpoint b;
    b.build(c, DType::kQ4_0, DType::kQ8_0);
    expect_prefill_matches_decode(b.ck, 3);
}

// set_last_layer (calibration): the pass stops after that layer, returns no logits, and the layers
// it ran saw the same inputs as in a whole pass; -1 runs the whole model again, the same logits.
TEST(CpuModel, LastLayerStopsThePass) {
    core::ThreadPool pool(2);
    ModelConfig c = tiny_config("llama");
    ASSERT_GE(c.num_layers, 2);
    RandomCheckpoint b;
    b.build(c);
    auto model = CpuModel::create(b.ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    std::vector<std::vector<float>> seen(size_t(c.num_layers));  // the kDown inputs per layer
    (*model)->set_linear_input_hook([&](int64_t l, LinearInput which, std::span<const float> x, int64_t, int64_t) {
        if (which == LinearInput::kDown) seen[size_t(l)].assign(x.begin(), x.end());
    });
    KvCache whole(c, 64);
    auto full = (*model)->forward(prompt(), whole, true);
    ASSERT_TRUE(full.is_ok());
    const std::vector<std::vector<float>> full_seen = seen;
    for (auto& v : seen) v.clear();
    (*model)->set_last_layer(0);
    KvCache part(c, 64);
    auto cut = (*model)->forward(prompt(), part, true);
    ASSERT_TRUE(cut.is_ok());
    EXPECT_TRUE(cut->empty());
    EXPECT_EQ(seen[0], full_seen[0]);
    for (size_t l = 1; l < seen.size(); ++l) EXPECT_TRUE(seen[l].empty()) << l;
    (*model)->set_last_layer(-1);
    KvCache again(c, 64);
    auto full2 = (*model)->forward(prompt(), again, true);
    ASSERT_TRUE(full2.is_ok());
    EXPECT_EQ(*full2, *full);
}

TEST(CpuModel, Errors) {
    core::ThreadPool pool(2);
    ModelConfig c = tiny_config("llama");
    RandomCheckpoint b;
    b.build(c);
    Checkpoint other = b.ck;
    other.config.arch = "bloom";
    auto bad = CpuModel::create(other, &pool);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("llama, mistral, qwen2, qwen3"), std::string::npos) << bad.status().message();

    auto model = CpuModel::create(b.ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    KvCache cache(c, 4);
    EXPECT_EQ((*model)->forward({}, cache, false).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ((*model)->forward({97}, cache, false).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ((*model)->forward({1, 2, 3, 4, 5}, cache, false).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache.size(), 0);
    ASSERT_TRUE((*model)->forward({1, 2, 3, 4}, cache, false).is_ok());
    EXPECT_FALSE((*model)->forward({1}, cache, false).is_ok());

    Checkpoint dynamic = b.ck;
    dynamic.config.rope_scaling.type = "dynamic";
    dynamic.config.rope_scaling.factor = 4;
    auto d = CpuModel::create(dynamic, &pool);
    EXPECT_EQ(d.status().code(), core::StatusCode::kUnsupported) << d.status().to_string();
    Checkpoint yarn = b.ck;  // YaRN runs (gpt-oss; families_test checks it against transformers) given its context
    yarn.config.rope_scaling.type = "yarn";
    yarn.config.rope_scaling.factor = 4;
    EXPECT_EQ(CpuModel::create(yarn, &pool).status().code(), core::StatusCode::kCorrupt);
    yarn.config.rope_scaling.original_max_position_embeddings = 16;
    EXPECT_TRUE(CpuModel::create(yarn, &pool).is_ok());
}

}  // namespace
}  // namespace kiln::model
