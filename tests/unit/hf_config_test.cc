// HF config.json / generation_config.json parsing, with configs as published for real models.
#include "formats/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loader/model_config.h"
#include "loader/weight_names.h"

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
    auto m = loader::config_from_hf(*c);
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
    auto m = loader::config_from_hf(*hf);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    std::string json = loader::config_to_hf_json(*m);
    auto hf2 = parse_hf_config(json, "written");
    ASSERT_TRUE(hf2.is_ok()) << hf2.status().to_string() << "\n" << json;
    auto m2 = loader::config_from_hf(*hf2);
    ASSERT_TRUE(m2.is_ok());
    EXPECT_EQ(m2->rope_scaling, m->rope_scaling);
    EXPECT_EQ(m2->eos_token_ids, m->eos_token_ids);
    EXPECT_EQ(m2->head_dim, m->head_dim);
    EXPECT_EQ(m2->max_seq_len, m->max_seq_len);
    EXPECT_EQ(m2->torch_dtype, "bfloat16");
    EXPECT_DOUBLE_EQ(m2->rope_theta, m->rope_theta);

    for (const char* src : {kQwen25, kQwen3, kMistral}) {
        auto a = loader::config_from_hf(*parse_hf_config(src, "a"));
        ASSERT_TRUE(a.is_ok());
        auto b = parse_hf_config(loader::config_to_hf_json(*a), "b");
        ASSERT_TRUE(b.is_ok()) << b.status().to_string();
        auto bm = loader::config_from_hf(*b);
        ASSERT_TRUE(bm.is_ok());
        EXPECT_EQ(bm->arch, a->arch);
        EXPECT_EQ(bm->attention_bias, a->attention_bias);
        EXPECT_EQ(bm->tie_word_embeddings, a->tie_word_embeddings);
        EXPECT_EQ(bm->sliding_window, a->sliding_window);
        EXPECT_EQ(bm->head_dim, a->head_dim);
    }
}

// `text` with `from` replaced by `to` (which must occur).
std::string with(std::string text, const std::string& from, const std::string& to) {
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
}

// `text` (a JSON object) with `"key": value` added last; nlohmann keeps the last of duplicate keys.
std::string with_last(const std::string& text, const std::string& key, const std::string& value) {
    return text.substr(0, text.rfind('}')) + ", \"" + key + "\": " + value + "}";
}

void expect_parse_error(const std::string& text, StatusCode code, const std::vector<std::string>& needles) {
    auto c = parse_hf_config(text, "cfg");
    ASSERT_FALSE(c.is_ok()) << text.substr(0, 300);
    EXPECT_EQ(c.status().code(), code) << c.status().to_string();
    for (const std::string& n : needles)
        EXPECT_NE(c.status().message().find(n), std::string::npos) << "'" << n << "' not in " << c.status().message();
}

// Type errors used to dump() the offending value, which recurses: a 100k-deep array overflowed the
// stack. Containers are now only named by type.
TEST(HfConfig, DeeplyNestedValuesInErrorsDoNotRecurse) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    for (const char* key : {"hidden_size", "eos_token_id", "rms_norm_eps", "tie_word_embeddings", "hidden_act"})
        expect_parse_error(with_last(kMistral, key, deep), StatusCode::kCorrupt, {key, "array of size 1"});
    expect_parse_error(with_last(kMistral, "rope_scaling", deep), StatusCode::kCorrupt,
                       {"\"rope_scaling\" should be an object", "array of size 1"});
    expect_parse_error(with_last(kMistral, "rope_scaling", "{\"factor\": " + deep + "}"), StatusCode::kCorrupt,
                       {"rope_scaling", "factor", "array of size 1"});
    expect_parse_error(with_last(kMistral, "eos_token_id", "[2, " + deep + "]"), StatusCode::kCorrupt,
                       {"eos_token_id", "array of size 1"});
}

// transformers' defaults when num_key_value_heads is absent: LlamaConfig None -> num_attention_heads,
// MistralConfig 8, Qwen2Config / Qwen3Config 32. null means num_attention_heads everywhere.
TEST(HfConfig, AbsentNumKeyValueHeadsTakesTheClassDefault) {
    auto llama = parse_hf_config(with(kLlama31, "\"num_key_value_heads\": 8, ", ""), "llama");
    ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
    EXPECT_EQ(llama->num_key_value_heads, 32);

    std::string mha_mistral = with(kMistral, "\"num_key_value_heads\": 8, ", "");
    auto mistral = parse_hf_config(mha_mistral, "mistral");
    ASSERT_TRUE(mistral.is_ok()) << mistral.status().to_string();
    EXPECT_EQ(mistral->num_key_value_heads, 8);  // not num_attention_heads (32)
    auto mistral_null = parse_hf_config(with_last(mha_mistral, "num_key_value_heads", "null"), "mistral");
    ASSERT_TRUE(mistral_null.is_ok()) << mistral_null.status().to_string();
    EXPECT_EQ(mistral_null->num_key_value_heads, 32);

    std::string qwen3 = with(with(kQwen3, "\"num_key_value_heads\": 8, ", ""), "\"num_attention_heads\": 16",
                             "\"num_attention_heads\": 64");
    auto q3 = parse_hf_config(qwen3, "qwen3");
    ASSERT_TRUE(q3.is_ok()) << q3.status().to_string();
    EXPECT_EQ(q3->num_key_value_heads, 32);
    // Qwen2.5-0.5B without the key: 32 KV heads do not divide its 14 heads, as in transformers.
    expect_parse_error(with(kQwen25, "\"num_key_value_heads\": 2,", ""), StatusCode::kCorrupt,
                       {"num_key_value_heads 32"});
    auto q2_null = parse_hf_config(with(kQwen25, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": null"), "q");
    ASSERT_TRUE(q2_null.is_ok()) << q2_null.status().to_string();
    EXPECT_EQ(q2_null->num_key_value_heads, 14);
}

// Qwen2Config: the window applies only with use_sliding_window, and only to layers >=
// max_window_layers (layer_types when given); LlamaConfig has no sliding window at all.
TEST(HfConfig, QwenSlidingWindowStartsAtMaxWindowLayers) {
    const std::string on = with(kQwen25, "\"use_sliding_window\": false", "\"use_sliding_window\": true");
    auto c = parse_hf_config(on, "qwen2");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->sliding_window, 32768);
    EXPECT_EQ(c->max_window_layers, 21);
    auto m = loader::config_from_hf(*c);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_EQ(m->window_for_layer(20), 0);
    EXPECT_EQ(m->window_for_layer(21), 32768);
    auto back = parse_hf_config(loader::config_to_hf_json(*m), "written");
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back->sliding_window, 32768);
    EXPECT_EQ(back->max_window_layers, 21);

    auto absent = parse_hf_config(with(on, "\"max_window_layers\": 21,", ""), "qwen2");
    ASSERT_TRUE(absent.is_ok());
    EXPECT_EQ(absent->max_window_layers, 28);  // Qwen2Config default
    auto null_window = parse_hf_config(with(on, "\"sliding_window\": 32768", "\"sliding_window\": null"), "q");
    ASSERT_TRUE(null_window.is_ok());
    EXPECT_EQ(null_window->sliding_window, 0);  // use_sliding_window with a null window: none

    auto layer_types = [&](int full, int sliding, bool interleave = false) {
        std::string list;
        for (int i = 0; i < full + sliding; ++i) {
            bool slide = interleave ? i % 2 == 1 : i >= full;
            list += std::string(i ? ", " : "") + (slide ? "\"sliding_attention\"" : "\"full_attention\"");
        }
        return with_last(on, "layer_types", "[" + list + "]");
    };
    auto typed = parse_hf_config(layer_types(10, 14), "qwen2");
    ASSERT_TRUE(typed.is_ok()) << typed.status().to_string();
    EXPECT_EQ(typed->max_window_layers, 10);
    expect_parse_error(layer_types(12, 12, true), StatusCode::kUnsupported, {"layer_types"});
    expect_parse_error(layer_types(10, 10), StatusCode::kCorrupt, {"layer_types", "24"});

    auto llama = parse_hf_config(with_last(kLlama31, "sliding_window", "4096"), "llama");
    ASSERT_TRUE(llama.is_ok());
    EXPECT_EQ(llama->sliding_window, 0);
}

TEST(HfConfig, UnsupportedActivationAndMlpBias) {
    expect_parse_error(with(kLlama31, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu_pytorch_tanh\""),
                       StatusCode::kUnsupported, {"hidden_act", "gelu_pytorch_tanh"});
    EXPECT_TRUE(parse_hf_config(with(kLlama31, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"swish\""), "c").is_ok());
    expect_parse_error(with(kLlama31, "\"mlp_bias\": false", "\"mlp_bias\": true"), StatusCode::kUnsupported,
                       {"mlp_bias"});
}

// LlamaAttention / Qwen3Attention give o_proj a bias with attention_bias; Qwen2 has q/k/v biases only,
// and MistralAttention none whatever the config says.
TEST(HfConfig, AttentionBiasCoversTheOutputProjectionExceptOnQwen2) {
    auto llama = parse_hf_config(with(kLlama31, "\"attention_bias\": false", "\"attention_bias\": true"), "l");
    ASSERT_TRUE(llama.is_ok());
    auto lm = loader::config_from_hf(*llama);
    ASSERT_TRUE(lm.is_ok()) << lm.status().to_string();
    EXPECT_TRUE(lm->attention_bias);
    EXPECT_TRUE(lm->has_output_bias());
    auto qm = loader::config_from_hf(*parse_hf_config(kQwen25, "q"));
    ASSERT_TRUE(qm.is_ok());
    EXPECT_TRUE(qm->attention_bias);
    EXPECT_FALSE(qm->has_output_bias());
    auto mistral = parse_hf_config(with_last(kMistral, "attention_bias", "true"), "m");
    ASSERT_TRUE(mistral.is_ok());
    EXPECT_FALSE(mistral->attention_bias);

    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.3.self_attn.o_proj.bias"), "blk.3.attn_output.bias");
    EXPECT_EQ(loader::gguf_to_hf_name("blk.3.attn_output.bias"), "model.layers.3.self_attn.o_proj.bias");
}

// google/gemma-3-1b-it config.json (transformers 4.50 form: rope_local_base_freq, sliding_window_pattern).
constexpr const char* kGemma3 = R"({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
  "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
  "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
  "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})";

TEST(HfConfig, Gemma3TextBlocksAndLayerPattern) {
    auto c = parse_hf_config(kGemma3, "gemma3");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->model_type, "gemma3_text");
    EXPECT_EQ(c->head_dim, 256);
    EXPECT_TRUE(c->tie_word_embeddings);  // Gemma3TextConfig's default
    auto m = loader::config_from_hf(*c);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_TRUE(m->gelu_mlp && m->sandwich_norms && m->scale_embeddings && m->qk_norm);
    EXPECT_EQ(m->rope_theta, 1e6);
    EXPECT_EQ(m->rope_local_theta, 1e4);
    EXPECT_EQ(m->query_pre_attn_scalar, 256);
    for (int64_t l : {0, 1, 4, 6, 25}) EXPECT_EQ(m->window_for_layer(l), 512) << l;
    for (int64_t l : {5, 11, 23}) EXPECT_EQ(m->window_for_layer(l), 0) << l;
    EXPECT_TRUE(m->local_rope_layer(0));
    EXPECT_FALSE(m->local_rope_layer(5));
    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.2.post_attention_layernorm.weight", "gemma3_text"),
              "blk.2.post_attention_norm.weight");
    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.2.pre_feedforward_layernorm.weight", "gemma3_text"),
              "blk.2.ffn_norm.weight");
    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.2.post_feedforward_layernorm.weight", "gemma3_text"),
              "blk.2.post_ffw_norm.weight");
    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.2.post_attention_layernorm.weight"), "blk.2.ffn_norm.weight");

    // transformers >= 5: rope_parameters per layer type, layer_types instead of the pattern.
    std::string v5 = with(kGemma3, "\"rope_local_base_freq\": 10000,", "");
    v5 = with(v5, "\"rope_scaling\": null, \"rope_theta\": 1000000,",
              "\"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 20000}, "
              "\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": 500000}},");
    std::string types;
    for (int i = 0; i < 26; ++i) types += std::string(i ? ", " : "") + (i % 3 == 2 ? "\"full_attention\"" : "\"sliding_attention\"");
    auto c5 = parse_hf_config(with_last(v5, "layer_types", "[" + types + "]"), "gemma3 v5");
    ASSERT_TRUE(c5.is_ok()) << c5.status().to_string();
    EXPECT_EQ(c5->sliding_window_pattern, 3);
    EXPECT_EQ(c5->rope_local_theta, 20000);
    EXPECT_EQ(c5->rope_theta, 500000);
    EXPECT_EQ(c5->rope_scaling.type, "linear");
    EXPECT_EQ(c5->rope_scaling.factor, 8.0);

    // Soft-capping (Gemma 2's, 0 = none in Gemma 3) is parsed; what kiln does not run is refused by name.
    auto capped = parse_hf_config(with(kGemma3, "\"final_logit_softcapping\": null", "\"final_logit_softcapping\": 30.0"),
                                  "gemma3 capped");
    ASSERT_TRUE(capped.is_ok()) << capped.status().to_string();
    EXPECT_EQ(capped->final_softcap, 30.0);
    EXPECT_EQ(capped->attn_softcap, 0.0);
    expect_parse_error(with(kGemma3, "\"attn_logit_softcapping\": null", "\"attn_logit_softcapping\": -5.0"),
                       StatusCode::kCorrupt, {"soft-capping"});
    expect_parse_error(with(kGemma3, "\"gelu_pytorch_tanh\"", "\"silu\""), StatusCode::kUnsupported,
                       {"hidden_activation", "silu"});
    std::string odd = "\"full_attention\"";  // layer 0 full as well: no "every Nth layer" pattern
    for (int i = 1; i < 26; ++i) odd += std::string(", ") + (i % 3 == 2 ? "\"full_attention\"" : "\"sliding_attention\"");
    expect_parse_error(with_last(v5, "layer_types", "[" + odd + "]"), StatusCode::kUnsupported, {"layer_types"});
}

// microsoft/Phi-3-mini-4k-instruct config.json (auto_map and dropout fields left out).
constexpr const char* kPhi3 = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "bos_token_id": 1, "eos_token_id": 32000,
  "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32064})";

TEST(HfConfig, Phi3SlidingWindowAndLongRope) {
    auto c = parse_hf_config(kPhi3, "phi3");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    auto m = loader::config_from_hf(*c);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_EQ(m->arch, "phi3");
    EXPECT_EQ(m->window_for_layer(0), 2047);
    EXPECT_EQ(m->window_for_layer(31), 2047);
    EXPECT_TRUE(m->rope_scaling.type.empty());
    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.7.self_attn.qkv_proj.weight"), "blk.7.attn_qkv.weight");
    EXPECT_EQ(loader::hf_to_gguf_name("model.layers.7.mlp.gate_up_proj.weight"), "blk.7.ffn_gate_up.weight");

    // Phi-3-mini-128k's form: "su" scaling, 48 factors each (head_dim 96), a longer context; the
    // attention factor transformers derives: sqrt(1 + ln(131072 / 4096) / ln(4096)).
    std::string list48;
    for (int i = 0; i < 48; ++i) list48 += std::string(i ? ", " : "") + std::to_string(1.0 + 0.1 * i);
    const std::string su = "{\"type\": \"su\", \"short_factor\": [" + list48 + "], \"long_factor\": [" + list48 + "]}";
    std::string long_ctx = with(kPhi3, "\"max_position_embeddings\": 4096", "\"max_position_embeddings\": 131072");
    long_ctx = with(long_ctx, "\"rope_scaling\": null", "\"rope_scaling\": " + su);
    auto l = parse_hf_config(long_ctx, "phi3-128k");
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_EQ(l->rope_scaling.type, "longrope");
    EXPECT_EQ(l->rope_scaling.original_max_position_embeddings, 4096);
    ASSERT_EQ(l->rope_scaling.short_factor.size(), 48u);
    ASSERT_TRUE(l->rope_scaling.attention_factor.has_value());
    EXPECT_NEAR(*l->rope_scaling.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-12);
    auto lm = loader::config_from_hf(*l);
    ASSERT_TRUE(lm.is_ok()) << lm.status().to_string();

    // Wrong factor counts are corrupt; partial RoPE is refused by name.
    const std::string short47 = with(long_ctx, "\"short_factor\": [1.000000, ", "\"short_factor\": [");
    expect_parse_error(short47, StatusCode::kCorrupt, {"short_factor", "47"});
    expect_parse_error(with_last(kPhi3, "partial_rotary_factor", "0.75"), StatusCode::kUnsupported,
                       {"partial_rotary_factor"});
}

// Gemma2Config's defaults: soft-capping 50 / 30 when absent (null: none), every other layer sliding,
// one RoPE base, no q/k norms.
TEST(HfConfig, Gemma2SoftCappingAndAlternatingLayers) {
    std::string g2 = with(kGemma3, "\"Gemma3ForCausalLM\"", "\"Gemma2ForCausalLM\"");
    g2 = with(g2, "\"gemma3_text\"", "\"gemma2\"");
    g2 = with(g2, "\"attn_logit_softcapping\": null, ", "");
    g2 = with(g2, "\"final_logit_softcapping\": null, ", "");
    g2 = with(g2, "\"rope_theta\": 1000000", "\"rope_theta\": 10000");
    auto c = parse_hf_config(g2, "gemma2");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->attn_softcap, 50.0);
    EXPECT_EQ(c->final_softcap, 30.0);
    auto m = loader::config_from_hf(*c);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_FALSE(m->qk_norm);
    EXPECT_TRUE(m->gelu_mlp && m->sandwich_norms && m->scale_embeddings);
    EXPECT_EQ(m->window_for_layer(0), 512);
    EXPECT_EQ(m->window_for_layer(1), 0);
    EXPECT_EQ(m->window_for_layer(24), 512);
    EXPECT_FALSE(m->local_rope_layer(0));  // one base for every layer
    auto none = parse_hf_config(with_last(with_last(g2, "attn_logit_softcapping", "null"), "final_logit_softcapping",
                                          "null"),
                                "gemma2 uncapped");
    ASSERT_TRUE(none.is_ok()) << none.status().to_string();
    EXPECT_EQ(none->attn_softcap, 0.0);
    EXPECT_EQ(none->final_softcap, 0.0);
}

TEST(HfConfig, TokenIdsMustBeInsideTheVocabulary) {
    // 2^64 - 1 used to wrap to -1 inside a list.
    expect_parse_error(with(kMistral, "\"eos_token_id\": 2", "\"eos_token_id\": [2, 18446744073709551615]"),
                       StatusCode::kCorrupt, {"eos_token_id", "18446744073709551615"});
    expect_parse_error(with(kMistral, "\"eos_token_id\": 2", "\"eos_token_id\": 18446744073709551615"),
                       StatusCode::kCorrupt, {"eos_token_id"});
    expect_parse_error(with(kMistral, "\"bos_token_id\": 1", "\"bos_token_id\": 32000"), StatusCode::kCorrupt,
                       {"bos_token_id 32000", "vocab_size 32000"});
    expect_parse_error(with(kMistral, "\"eos_token_id\": 2", "\"eos_token_id\": [2, -1]"), StatusCode::kCorrupt,
                       {"eos_token_id -1"});
    auto m = loader::config_from_hf(*parse_hf_config(kMistral, "m"));
    ASSERT_TRUE(m.is_ok());
    m->eos_token_ids = {2, 40000};
    core::Status st = m->validate();
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find("eos_token_ids 40000"), std::string::npos) << st.message();
    m->eos_token_ids = {2};
    m->bos_token_id = -5;
    EXPECT_NE(m->validate().message().find("bos_token_id -5"), std::string::npos);
}

TEST(HfConfig, RopeParametersAndLlama3ScalingAreChecked) {
    expect_parse_error(with_last(kMistral, "rope_parameters", "\"yes\""), StatusCode::kCorrupt,
                       {"\"rope_parameters\" should be an object"});
    auto v5 =
        parse_hf_config(with_last(kMistral, "rope_parameters", R"({"rope_type": "default", "rope_theta": 5e5})"), "m");
    ASSERT_TRUE(v5.is_ok()) << v5.status().to_string();
    EXPECT_DOUBLE_EQ(v5->rope_theta, 5e5);
    EXPECT_EQ(v5->rope_scaling.type, "");

    expect_parse_error(with(kLlama31, "\"original_max_position_embeddings\": 8192, ", ""), StatusCode::kCorrupt,
                       {"original_max_position_embeddings"});
    expect_parse_error(with(kLlama31, "\"high_freq_factor\": 4.0", "\"high_freq_factor\": 1.0"), StatusCode::kCorrupt,
                       {"low_freq_factor", "high_freq_factor"});
    expect_parse_error(with(kLlama31, "\"factor\": 8.0", "\"factor\": 0"), StatusCode::kCorrupt, {"factor"});
    // The same checks guard configs from other sources.
    auto m = loader::config_from_hf(*parse_hf_config(kLlama31, "l"));
    ASSERT_TRUE(m.is_ok());
    m->rope_scaling.low_freq_factor = m->rope_scaling.high_freq_factor;
    EXPECT_EQ(m->validate().code(), StatusCode::kCorrupt);
}

// The mixture-of-experts families, with the fields of their published config.json files
// (mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen1.5-MoE-A2.7B, Qwen/Qwen3-30B-A3B, allenai/OLMoE-1B-7B-0924).
TEST(HfConfig, MixtureOfExpertsFamilies) {
    auto mixtral = parse_hf_config(R"({"architectures": ["MixtralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
      "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
      "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
      "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1e6,
      "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false, "vocab_size": 32000})",
                                   "mixtral");
    ASSERT_TRUE(mixtral.is_ok()) << mixtral.status().to_string();
    EXPECT_EQ(mixtral->num_experts, 8);
    EXPECT_EQ(mixtral->num_experts_used, 2);
    EXPECT_EQ(mixtral->expert_intermediate_size, 14336);
    EXPECT_TRUE(mixtral->norm_topk_prob);  // MixtralTopKRouter always renormalizes
    EXPECT_FALSE(mixtral->attention_bias);
    EXPECT_EQ(mixtral->sliding_window, 0);

    auto qwen2 = parse_hf_config(R"({"architectures": ["Qwen2MoeForCausalLM"], "bos_token_id": 151643,
      "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
      "max_position_embeddings": 8192, "max_window_layers": 21, "model_type": "qwen2_moe", "num_attention_heads": 16,
      "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
      "sliding_window": 32768, "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936,
      "decoder_sparse_step": 1, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
      "num_experts_per_tok": 4, "num_experts": 60, "norm_topk_prob": false})",
                                 "qwen2_moe");
    ASSERT_TRUE(qwen2.is_ok()) << qwen2.status().to_string();
    EXPECT_EQ(qwen2->num_experts, 60);
    EXPECT_EQ(qwen2->num_experts_used, 4);
    EXPECT_EQ(qwen2->expert_intermediate_size, 1408);
    EXPECT_EQ(qwen2->shared_expert_intermediate_size, 5632);
    EXPECT_FALSE(qwen2->norm_topk_prob);
    EXPECT_TRUE(qwen2->attention_bias);  // qkv_bias defaults to true; o_proj has none
    EXPECT_EQ(qwen2->sliding_window, 0);
    auto qwen2_config = loader::config_from_hf(*qwen2);
    ASSERT_TRUE(qwen2_config.is_ok()) << qwen2_config.status().to_string();
    EXPECT_FALSE(qwen2_config->has_output_bias());

    const std::string qwen3_json = R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
      "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
      "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
      "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
      "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
      "sliding_window": null, "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936})";
    auto qwen3 = parse_hf_config(qwen3_json, "qwen3_moe");
    ASSERT_TRUE(qwen3.is_ok()) << qwen3.status().to_string();
    EXPECT_EQ(qwen3->num_experts, 128);
    EXPECT_EQ(qwen3->num_experts_used, 8);
    EXPECT_EQ(qwen3->expert_intermediate_size, 768);
    EXPECT_TRUE(qwen3->norm_topk_prob);
    auto qwen3_config = loader::config_from_hf(*qwen3);
    ASSERT_TRUE(qwen3_config.is_ok());
    EXPECT_TRUE(qwen3_config->qk_norm);
    EXPECT_FALSE(qwen3_config->qk_norm_full);
    // Layers with a dense MLP are refused by name, not run wrongly.
    std::string dense = qwen3_json;
    dense.replace(dense.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [0]");
    auto refused = parse_hf_config(dense, "qwen3_moe");
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(refused.status().message().find("mlp_only_layers"), std::string::npos);

    const std::string olmoe_json = R"({"architectures": ["OlmoeForCausalLM"], "attention_bias": false,
      "clip_qkv": null, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
      "max_position_embeddings": 4096, "model_type": "olmoe", "norm_topk_prob": false, "num_attention_heads": 16,
      "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16, "num_key_value_heads": 16,
      "pad_token_id": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
      "tie_word_embeddings": false, "vocab_size": 50304})";
    auto olmoe = parse_hf_config(olmoe_json, "olmoe");
    ASSERT_TRUE(olmoe.is_ok()) << olmoe.status().to_string();
    EXPECT_EQ(olmoe->num_experts, 64);
    EXPECT_EQ(olmoe->expert_intermediate_size, 1024);
    auto olmoe_config = loader::config_from_hf(*olmoe);
    ASSERT_TRUE(olmoe_config.is_ok());
    EXPECT_TRUE(olmoe_config->qk_norm_full);
    std::string clipped = olmoe_json;
    clipped.replace(clipped.find("\"clip_qkv\": null"), 16, "\"clip_qkv\": 8.0");
    EXPECT_EQ(parse_hf_config(clipped, "olmoe").status().code(), StatusCode::kUnsupported);
    // More experts per token than experts: a clear error.
    std::string over = olmoe_json;
    over.replace(over.find("\"num_experts_per_tok\": 8"), 24, "\"num_experts_per_tok\": 65");
    auto bad = parse_hf_config(over, "olmoe");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(bad.status().message().find("num_experts_per_tok"), std::string::npos);
}

}  // namespace
}  // namespace kiln::formats
