// Hugging Face config.json and generation_config.json for the decoder-only architectures kiln runs
// (formats/architectures.h): LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM. Field names and defaults follow transformers' LlamaConfig / MistralConfig /
// Qwen2Config / Qwen3Config, including where they differ: an absent num_key_value_heads is
// num_attention_heads for Llama, 8 for Mistral and 32 for Qwen2/Qwen3 (their class defaults), while
// null means num_attention_heads everywhere. Sliding windows: Mistral applies sliding_window
// (absent: 4096, null: none) to every layer; Qwen2/Qwen3 only with use_sliding_window, and only to
// layers >= max_window_layers (default 28), or to the "sliding_attention" entries of layer_types when
// given (kiln supports those only as a suffix of the layers); LlamaConfig has no sliding window.
// Gemma 2 (Gemma2ForCausalLM: every other layer sliding, soft-capping 50 / 30 unless null) and
// Gemma 3 text models (Gemma3ForCausalLM, model_type gemma3_text; Gemma3TextConfig's defaults): the
// sliding layers come from layer_types (which must follow a pattern: every Nth layer full attention)
// or sliding_window_pattern (default 6); RoPE from rope_parameters' full_attention / sliding_attention
// entries (transformers >= 5) or rope_theta (default 1e6), rope_local_base_freq (default 1e4) and
// rope_scaling (full-attention layers only); hidden_activation gelu_pytorch_tanh.
// Phi-3 / Phi-3.5 (Phi3ForCausalLM): fused qkv_proj and gate_up_proj (the loader splits them),
// sliding_window on every layer, LongRoPE ("longrope", or "su") with short_factor / long_factor and
// original_max_position_embeddings (top level, or in rope_parameters); an absent attention_factor is
// computed as transformers does (sqrt(1 + ln(factor) / ln(original)), factor = max / original).
// Mixture-of-experts families: Mixtral (MixtralForCausalLM; sliding_window, default None, on every
// layer), Qwen2-MoE / Qwen3-MoE (every layer sparse; use_sliding_window unsupported) and OLMoE (q/k
// norms over all heads; clip_qkv unsupported) and gpt-oss (GptOssForCausalLM: attention sinks, every
// other layer sliding (layer_types), YaRN RoPE, biased router and experts with the clamped SwiGLU of
// swiglu_alpha / swiglu_limit); their defaults are transformers' config classes'.
// Rejected as kUnsupported: hidden_act other than silu/swish (gelu_pytorch_tanh for Gemma 3),
// partial_rotary_factor other than 1,
// Llama's mlp_bias, Gemma's bidirectional attention.
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
    std::string hidden_act = "silu";  // Gemma 3: hidden_activation
    // Gemma 3: layer l uses sliding_window unless (l + 1) % sliding_window_pattern == 0; sliding
    // layers' RoPE base (without scaling); the attention scale is query_pre_attn_scalar^-0.5.
    int64_t sliding_window_pattern = 0;
    double rope_local_theta = 0;
    double query_pre_attn_scalar = 0;
    // Gemma: attention-score and final-logit soft-capping (0: none).
    double attn_softcap = 0, final_softcap = 0;
    // Mixture of experts (hyper_params.h; MixtralConfig's num_local_experts, the others' num_experts,
    // num_experts_per_tok, moe_intermediate_size (Mixtral and OLMoE: intermediate_size),
    // shared_expert_intermediate_size (Qwen2-MoE), norm_topk_prob (always on for Mixtral)).
    int64_t num_experts = 0, num_experts_used = 0, expert_intermediate_size = 0, shared_expert_intermediate_size = 0;
    bool norm_topk_prob = false;
    double swiglu_alpha = 0, swiglu_limit = 0;  // gpt-oss (GptOssConfig: 1.702, 7.0)
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
