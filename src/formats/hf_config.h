// Hugging Face config.json and generation_config.json for the decoder-only architectures kiln runs
// (formats/architectures.h): LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM. Field names and defaults follow transformers' LlamaConfig / MistralConfig /
// Qwen2Config / Qwen3Config, including where they differ: an absent num_key_value_heads is
// num_attention_heads for Llama, 8 for Mistral and 32 for Qwen2/Qwen3 (their class defaults), while
// null means num_attention_heads everywhere. Sliding windows: Mistral applies sliding_window
// (absent: 4096, null: none) to every layer; Qwen2/Qwen3 only with use_sliding_window, and only to
// layers >= max_window_layers (default 28), or to the "sliding_attention" entries of layer_types when
// given (kiln supports those only as a suffix of the layers); LlamaConfig has no sliding window.
// Rejected as kUnsupported: hidden_act other than silu/swish, Llama's mlp_bias.
// Invariants after a successful parse: the checks of hyper_params.h hold, head_dim is set (explicit,
// or hidden_size / num_heads), and eos_token_ids holds every end-of-sequence id (config files give
// an int or a list).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/hyper_params.h"

namespace kiln::formats {

struct HfConfig {
    std::string architecture;  // "LlamaForCausalLM", ...
    std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;  // default per architecture (see above)
    int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads (Qwen3: 128)
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    int64_t sliding_window = 0;     // 0: full attention
    int64_t max_window_layers = 0;  // layers >= this use sliding_window (Qwen2/Qwen3); 0 for Mistral
    bool attention_bias = false;    // q/k/v (and, except on Qwen2, o_proj) biases; always on for Qwen2, off for Mistral
    std::string hidden_act = "silu";
    std::string torch_dtype;  // "bfloat16", "float16", "float32", or ""
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;
    std::optional<int64_t> pad_token_id;
};

// Architectures kiln supports, as HF spells them (the hf_class column of kArchitectures).
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
