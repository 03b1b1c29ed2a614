// LlamaModel on tiny random checkpoints built in memory (Qwen2-like with q/k/v biases, Qwen3-like
// with q/k RMSNorm and an output bias, Mistral-like with a sliding window, a Llama with q8_0/q4_0
// weights and a q8_0 embedding): a batched prefill must give the same logits (1e-4) as feeding the
// same tokens one at a time, and as a prefill split in two, which catches KV-cache, position and
// masking bugs. Also: errors for unsupported architectures, bad ids and a full cache.
#include "model/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "core/numeric.h"

namespace kiln::model {
namespace {

using core::DType;

struct Builder {
    Checkpoint ck;
    std::mt19937 rng{42};

    void add(const std::string& name, std::vector<uint64_t> shape, DType dtype = DType::kF32, float scale = 0.2f,
             float offset = 0.0f) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        auto buf = std::make_shared<std::vector<uint8_t>>(*core::dtype_bytes(dtype, n));
        std::normal_distribution<float> dist(0.0f, scale);
        if (dtype == DType::kF32) {
            for (uint64_t i = 0; i < n; ++i) {
                float v = offset + dist(rng);
                std::memcpy(buf->data() + 4 * i, &v, 4);
            }
        } else {  // q8_0 / q4_0: random quants, small f16 scales
            const auto& info = core::dtype_info(dtype);
            for (uint8_t& b : *buf) b = uint8_t(rng());
            for (size_t off = 0; off < buf->size(); off += info.block_bytes) {
                uint16_t h = core::f32_to_fp16(dtype == DType::kQ8_0 ? 0.004f : 0.03f);
                std::memcpy(buf->data() + off, &h, 2);
            }
        }
        ck.tensors.push_back({name, dtype, shape, buf->data(), buf->size()});
        ck.owners.push_back(buf);
    }

    // Every tensor of c; `mat` is the dtype of the weight matrices, `emb` of token_embd.
    void build(const ModelConfig& c, DType mat = DType::kF32, DType emb = DType::kF32) {
        ck.path = "random-" + c.arch;
        ck.format = "gguf";
        ck.config = c;
        const uint64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
        add("token_embd.weight", {uint64_t(c.vocab_size), H}, emb, 1.0f);
        add("output_norm.weight", {H}, DType::kF32, 0.1f, 1.0f);
        if (!c.tie_word_embeddings) add("output.weight", {uint64_t(c.vocab_size), H}, mat);
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const std::string p = "blk." + std::to_string(l) + ".";
            add(p + "attn_norm.weight", {H}, DType::kF32, 0.1f, 1.0f);
            add(p + "ffn_norm.weight", {H}, DType::kF32, 0.1f, 1.0f);
            add(p + "attn_q.weight", {Q, H}, mat);
            add(p + "attn_k.weight", {KV, H}, mat);
            add(p + "attn_v.weight", {KV, H}, mat);
            add(p + "attn_output.weight", {H, Q}, mat);
            add(p + "ffn_gate.weight", {F, H}, mat);
            add(p + "ffn_up.weight", {F, H}, mat);
            add(p + "ffn_down.weight", {H, F}, mat);
            if (c.attention_bias) {
                add(p + "attn_q.bias", {Q}, DType::kF32, 0.5f);
                add(p + "attn_k.bias", {KV}, DType::kF32, 0.5f);
                add(p + "attn_v.bias", {KV}, DType::kF32, 0.5f);
            }
            if (c.has_output_bias()) add(p + "attn_output.bias", {H}, DType::kF32, 0.5f);
            if (c.qk_norm) {
                add(p + "attn_q_norm.weight", {uint64_t(c.head_dim)}, DType::kF32, 0.2f, 1.0f);
                add(p + "attn_k_norm.weight", {uint64_t(c.head_dim)}, DType::kF32, 0.2f, 1.0f);
            }
        }
    }
};

ModelConfig tiny(const std::string& arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 97;
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.max_seq_len = 64;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    return c;
}

std::vector<int32_t> prompt() {
    return {1, 5, 17, 96, 33, 33, 8, 60, 2, 41, 77};
}

// Max |a - b| over all logits of three ways of running the prompt.
void expect_prefill_matches_decode(const Checkpoint& ck, int threads) {
    core::ThreadPool pool(threads);
    auto model = LlamaModel::create(ck, &pool);
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

TEST(LlamaModel, Qwen2BiasPrefillMatchesDecode) {
    ModelConfig c = tiny("qwen2");
    c.attention_bias = true;
    c.tie_word_embeddings = true;
    Builder b;
    b.build(c);
    expect_prefill_matches_decode(b.ck, 1);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(LlamaModel, Qwen3QkNormPrefillMatchesDecode) {
    ModelConfig c = tiny("qwen3");
    c.qk_norm = true;
    c.attention_bias = true;  // Qwen3 with attention_bias also has the o_proj bias
    c.rope_theta = 1000000;
    Builder b;
    b.build(c);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(LlamaModel, MistralSlidingWindowPrefillMatchesDecode) {
    ModelConfig c = tiny("mistral");
    c.sliding_window = 3;
    Builder b;
    b.build(c);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(LlamaModel, QuantizedLlama3PrefillMatchesDecode) {
    ModelConfig c = tiny("llama");
    c.rope_theta = 500000;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position_embeddings = 16;
    Builder b;
    b.build(c, DType::kQ4_0, DType::kQ8_0);
    expect_prefill_matches_decode(b.ck, 3);
}

TEST(LlamaModel, Errors) {
    core::ThreadPool pool(2);
    ModelConfig c = tiny("llama");
    Builder b;
    b.build(c);
    Checkpoint other = b.ck;
    other.config.arch = "gemma2";
    auto bad = LlamaModel::create(other, &pool);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("llama, mistral, qwen2, qwen3"), std::string::npos) << bad.status().message();

    auto model = LlamaModel::create(b.ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    KvCache cache(c, 4);
    EXPECT_EQ((*model)->forward({}, cache, false).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ((*model)->forward({97}, cache, false).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ((*model)->forward({1, 2, 3, 4, 5}, cache, false).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache.size(), 0);
    ASSERT_TRUE((*model)->forward({1, 2, 3, 4}, cache, false).is_ok());
    EXPECT_FALSE((*model)->forward({1}, cache, false).is_ok());

    Checkpoint yarn = b.ck;
    yarn.config.rope_scaling.type = "yarn";
    yarn.config.rope_scaling.factor = 4;
    yarn.config.rope_scaling.original_max_position_embeddings = 16;
    auto y = LlamaModel::create(yarn, &pool);
    EXPECT_EQ(y.status().code(), core::StatusCode::kUnsupported) << y.status().to_string();
}

}  // namespace
}  // namespace kiln::model
