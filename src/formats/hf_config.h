// Hugging Face config.json and generation_config.json for the decoder-only architectures kiln runs:
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM. Field names and
// defaults follow transformers' LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config.
// Invariants after a successful parse: every size is positive and under a sane cap, num_heads is a
// multiple of num_kv_heads, head_dim is set (explicit, or hidden_size / num_heads), and
// eos_token_ids holds every end-of-sequence id (config files give an int or a list).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::formats {

// rope_scaling / rope_parameters. `type` is "" when absent or "default".
struct RopeScaling {
    std::string type;  // "llama3", "linear", "yarn", "dynamic", "longrope", ...
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;  // 0 when not given
    double low_freq_factor = 1.0;                  // llama3
    double high_freq_factor = 4.0;                 // llama3
    double beta_fast = 32.0;                       // yarn
    double beta_slow = 1.0;                        // yarn
    std::optional<double> attention_factor;        // yarn (mscale of the attention logits)
    bool operator==(const RopeScaling&) const = default;
};

struct HfConfig {
    std::string architecture;  // "LlamaForCausalLM", ...
    std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
    int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads (Qwen3: 128)
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    int64_t sliding_window = 0;   // 0: full attention
    bool attention_bias = false;  // q/k/v projection biases (always on for Qwen2)
    std::string hidden_act = "silu";
    std::string torch_dtype;  // "bfloat16", "float16", "float32", or ""
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;
    std::optional<int64_t> pad_token_id;
};

// Architectures kiln supports, as HF spells them.
const std::vector<std::string>& hf_supported_architectures();

// `name` is used in error messages. Unknown architecture -> kUnsupported naming it and the list.
core::Result<HfConfig> parse_hf_config(const std::string& json_text, const std::string& name);
core::Result<HfConfig> load_hf_config(const std::string& path);

struct GenerationConfig {
    std::optional<double> temperature;
    std::optional<double> top_p;
    std::optional<int64_t> top_k;
    std::optional<double> repetition_penalty;
    std::optional<bool> do_sample;
    std::optional<int64_t> max_length;
    std::optional<int64_t> max_new_tokens;
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;
    std::optional<int64_t> pad_token_id;
};

core::Result<GenerationConfig> parse_generation_config(const std::string& json_text, const std::string& name);
core::Result<GenerationConfig> load_generation_config(const std::string& path);

}  // namespace kiln::formats
