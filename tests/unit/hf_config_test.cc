// HF config.json / generation_config.json parsing, with configs as published for real models.
#include "formats/hf_config.h"

#include <gtest/gtest.h>

#include "model/model_config.h"

namespace kiln::formats {
namespace {

using core::StatusCode;

// meta-llama/Llama-3.1-8B-Instruct config.json.
constexpr const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 128256})";

// Qwen/Qwen2.5-0.5B-Instruct config.json.
constexpr const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Qwen/Qwen3-0.6B config.json.
constexpr const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// mistralai/Mistral-7B-v0.1 config.json.
constexpr const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})";

TEST(HfConfig, Llama31WithLlama3RopeScaling) {
    auto c = parse_hf_config(kLlama31, "llama/config.json");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->architecture, "LlamaForCausalLM");
    EXPECT_EQ(c->model_type, "llama");
    EXPECT_EQ(c->vocab_size, 128256);
    EXPECT_EQ(c->hidden_size, 4096);
    EXPECT_EQ(c->intermediate_size, 14336);
    EXPECT_EQ(c->num_hidden_layers, 32);
    EXPECT_EQ(c->num_attention_heads, 32);
    EXPECT_EQ(c->num_key_value_heads, 8);
    EXPECT_EQ(c->head_dim, 128);  // hidden / heads
    EXPECT_EQ(c->max_position_embeddings, 131072);
    EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
    EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
    EXPECT_EQ(c->rope_scaling.type, "llama3");
    EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
    EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
    EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_FALSE(c->tie_word_embeddings);
    EXPECT_FALSE(c->attention_bias);
    EXPECT_EQ(c->sliding_window, 0);
    EXPECT_EQ(c->torch_dtype, "bfloat16");
    EXPECT_EQ(c->bos_token_id, 128000);
    EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
}

TEST(HfConfig, Qwen25HasBiasAndNoSlidingWindow) {
    auto c = parse_hf_config(kQwen25, "qwen2");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->model_type, "qwen2");
    EXPECT_TRUE(c->attention_bias);  // Qwen2 always has q/k/v biases
    EXPECT_TRUE(c->tie_word_embeddings);
    EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window false
    EXPECT_EQ(c->num_key_value_heads, 2);
    EXPECT_EQ(c->head_dim, 64);
    EXPECT_EQ(c->rope_scaling.type, "");
    EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151645});
}

TEST(HfConfig, Qwen3ExplicitHeadDim) {
    auto c = parse_hf_config(kQwen3, "qwen3");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->model_type, "qwen3");
    EXPECT_EQ(c->head_dim, 128);  // != 1024 / 16
    EXPECT_FALSE(c->attention_bias);
    EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);  // an integer in the JSON
    auto m = model::config_from_hf(*c);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_TRUE(m->qk_norm);
    EXPECT_EQ(m->q_dim(), 2048);
}

TEST(HfConfig, MistralSlidingWindow) {
    auto c = parse_hf_config(kMistral, "mistral");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->model_type, "mistral");
    EXPECT_EQ(c->sliding_window, 4096);
    std::string v03 = kMistral;
    v03.replace(v03.find("\"sliding_window\": 4096"), 22, "\"sliding_window\": null");
    auto c3 = parse_hf_config(v03, "mistral-v0.3");
    ASSERT_TRUE(c3.is_ok()) << c3.status().to_string();
    EXPECT_EQ(c3->sliding_window, 0);
}

TEST(HfConfig, YarnAndLinearScaling) {
    std::string yarn = kQwen3;
    yarn.replace(yarn.find("\"rope_scaling\": null"), 20,
                 R"("rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
    auto c = parse_hf_config(yarn, "yarn");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->rope_scaling.type, "yarn");
    EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
    EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32768);
    EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 32.0);

    std::string bad = kQwen3;
    bad.replace(bad.find("\"rope_scaling\": null"), 20, R"("rope_scaling": {"type": "linear", "factor": -1})");
    EXPECT_EQ(parse_hf_config(bad, "bad").status().code(), StatusCode::kCorrupt);
}

TEST(HfConfig, UnknownArchitectureNamesItAndTheSupportedList) {
    auto c = parse_hf_config(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 50257})", "gpt2/config.json");
    ASSERT_FALSE(c.is_ok());
    EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
    const std::string& m = c.status().message();
    EXPECT_NE(m.find("gpt2/config.json"), std::string::npos) << m;
    EXPECT_NE(m.find("GPT2LMHeadModel"), std::string::npos) << m;
    for (const std::string& a : hf_supported_architectures()) EXPECT_NE(m.find(a), std::string::npos) << m;
}

TEST(HfConfig, ModelTypeWithoutArchitectures) {
    std::string s = kMistral;
    const std::string archs = "\"architectures\": [\"MistralForCausalLM\"], ";
    s.replace(s.find(archs), archs.size(), "");
    auto c = parse_hf_config(s, "x");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->architecture, "MistralForCausalLM");
}

TEST(HfConfig, BadValuesAreClearErrors) {
    auto expect_error = [](const std::string& text, const std::string& needle) {
        auto c = parse_hf_config(text, "cfg");
        ASSERT_FALSE(c.is_ok()) << text;
        EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
    };
    std::string base = kMistral;
    auto with = [&](const std::string& from, const std::string& to) {
        std::string s = base;
        s.replace(s.find(from), from.size(), to);
        return s;
    };
    expect_error("{not json", "not valid JSON");
    expect_error("[]", "not a JSON object");
    expect_error(with("\"hidden_size\": 4096, ", ""), "hidden_size");
    expect_error(with("\"hidden_size\": 4096", "\"hidden_size\": \"4096\""), "hidden_size");
    expect_error(with("\"hidden_size\": 4096", "\"hidden_size\": -4096"), "hidden_size");
    expect_error(with("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"), "num_key_value_heads");
    expect_error(with("\"num_hidden_layers\": 32", "\"num_hidden_layers\": 1000000"), "num_hidden_layers");
    expect_error(with("\"eos_token_id\": 2", "\"eos_token_id\": [2, \"x\"]"), "eos_token_id");
    expect_error(with("\"hidden_size\": 4096", "\"hidden_size\": 4095"), "num_attention_heads");
    expect_error(with("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 0"), "rms_norm_eps");
    expect_error(with("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0"), "tie_word_embeddings");
}

TEST(GenerationConfig, ParsesSamplingFields) {
    auto g = parse_generation_config(R"({"bos_token_id": 128000, "do_sample": true,
        "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9, "top_k": 50,
        "repetition_penalty": 1.1, "max_length": 4096, "transformers_version": "4.42.3"})",
                                     "generation_config.json");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_DOUBLE_EQ(*g->temperature, 0.6);
    EXPECT_DOUBLE_EQ(*g->top_p, 0.9);
    EXPECT_EQ(*g->top_k, 50);
    EXPECT_DOUBLE_EQ(*g->repetition_penalty, 1.1);
    EXPECT_EQ(*g->max_length, 4096);
    EXPECT_TRUE(*g->do_sample);
    EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
    EXPECT_FALSE(g->max_new_tokens.has_value());

    auto empty = parse_generation_config("{}", "g");
    ASSERT_TRUE(empty.is_ok());
    EXPECT_FALSE(empty->temperature.has_value());
    EXPECT_FALSE(parse_generation_config(R"({"top_p": 2})", "g").is_ok());
    EXPECT_FALSE(parse_generation_config(R"({"temperature": "hot"})", "g").is_ok());
}

TEST(HfConfig, ModelConfigRoundTripsThroughConfigJson) {
    auto hf = parse_hf_config(kLlama31, "llama");
    ASSERT_TRUE(hf.is_ok());
    auto m = model::config_from_hf(*hf);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    std::string json = model::config_to_hf_json(*m);
    auto hf2 = parse_hf_config(json, "written");
    ASSERT_TRUE(hf2.is_ok()) << hf2.status().to_string() << "\n" << json;
    auto m2 = model::config_from_hf(*hf2);
    ASSERT_TRUE(m2.is_ok());
    EXPECT_EQ(m2->rope_scaling, m->rope_scaling);
    EXPECT_EQ(m2->eos_token_ids, m->eos_token_ids);
    EXPECT_EQ(m2->head_dim, m->head_dim);
    EXPECT_EQ(m2->max_seq_len, m->max_seq_len);
    EXPECT_EQ(m2->torch_dtype, "bfloat16");
    EXPECT_DOUBLE_EQ(m2->rope_theta, m->rope_theta);

    for (const char* src : {kQwen25, kQwen3, kMistral}) {
        auto a = model::config_from_hf(*parse_hf_config(src, "a"));
        ASSERT_TRUE(a.is_ok());
        auto b = parse_hf_config(model::config_to_hf_json(*a), "b");
        ASSERT_TRUE(b.is_ok()) << b.status().to_string();
        auto bm = model::config_from_hf(*b);
        ASSERT_TRUE(bm.is_ok());
        EXPECT_EQ(bm->arch, a->arch);
        EXPECT_EQ(bm->attention_bias, a->attention_bias);
        EXPECT_EQ(bm->tie_word_embeddings, a->tie_word_embeddings);
        EXPECT_EQ(bm->sliding_window, a->sliding_window);
        EXPECT_EQ(bm->head_dim, a->head_dim);
    }
}

}  // namespace
}  // namespace kiln::formats
