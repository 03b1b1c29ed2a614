// The decoder-only architectures kiln runs, their names in each file format and how their blocks
// differ: the one table that HF config parsing, GGUF reading, ModelConfig (its family flags), the
// loader and the writers all consult. Every family runs the same step (model/transformer.h); a row's
// block flags are what picks its variant of each block.
// model_type is HF's config.json "model_type" and kiln's ModelConfig::arch. Mistral is stored in GGUF
// as "llama", as llama.cpp does. llama.cpp's qwen2/qwen3 GGUF files keep HF's rotate-half (NEOX)
// Q/K row order; its llama files hold Meta's interleaved-pair order.
#pragma once

#include <string_view>

namespace kiln::formats {

struct ArchNames {
    std::string_view model_type;  // "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", MoE ones
    std::string_view hf_class;    // config.json "architectures": "LlamaForCausalLM", ...
    std::string_view gguf_arch;   // GGUF general.architecture
    bool gguf_neox_rope = false;  // GGUF Q/K rows in rotate-half order
    // The blocks (ModelConfig's flags of the same names; all off: Llama's).
    bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE
    bool gelu_mlp = false;          // GeGLU (GELU-tanh gate) instead of SwiGLU
    bool sandwich_norms = false;    // the attention and MLP outputs RMS-normed before the residual add
    bool scale_embeddings = false;  // token embeddings times sqrt(hidden_size)
    bool norm_plus_one = false;     // HF norm weights w mean (1 + w): the loader stores 1 + w
    bool qk_norm_full = false;      // the q/k RMSNorm spans all heads of a token at once (OLMoE), not each head
    // Mixture of experts: the family's MLP is a router over experts (ModelConfig's num_experts > 0).
    // moe_norm_topk is norm_topk_prob where the file does not say (llama.cpp hard-codes it per
    // architecture: Mixtral and Qwen3-MoE renormalize the chosen weights, Qwen2-MoE and OLMoE do not).
    bool moe = false;
    bool moe_norm_topk = false;
    // gpt-oss: attention sinks (a learned per-head logit in every softmax's denominator), and biased
    // router and experts with the clamped SwiGLU (ModelConfig's swiglu_alpha / swiglu_limit).
    bool attn_sinks = false;
    bool oai_moe = false;
};

inline constexpr ArchNames kArchitectures[] = {
    {.model_type = "llama", .hf_class = "LlamaForCausalLM", .gguf_arch = "llama"},
    {.model_type = "mistral", .hf_class = "MistralForCausalLM", .gguf_arch = "llama"},
    {.model_type = "qwen2", .hf_class = "Qwen2ForCausalLM", .gguf_arch = "qwen2", .gguf_neox_rope = true},
    {.model_type = "qwen3", .hf_class = "Qwen3ForCausalLM", .gguf_arch = "qwen3", .gguf_neox_rope = true,
     .qk_norm = true},
    {.model_type = "gemma2", .hf_class = "Gemma2ForCausalLM", .gguf_arch = "gemma2", .gguf_neox_rope = true,
     .gelu_mlp = true, .sandwich_norms = true, .scale_embeddings = true, .norm_plus_one = true},
    {.model_type = "gemma3_text", .hf_class = "Gemma3ForCausalLM", .gguf_arch = "gemma3", .gguf_neox_rope = true,
     .qk_norm = true, .gelu_mlp = true, .sandwich_norms = true, .scale_embeddings = true, .norm_plus_one = true},
    {.model_type = "phi3", .hf_class = "Phi3ForCausalLM", .gguf_arch = "phi3", .gguf_neox_rope = true},
    // Mixtral is stored in GGUF as "llama" with {arch}.expert_count, as llama.cpp does.
    {.model_type = "mixtral", .hf_class = "MixtralForCausalLM", .gguf_arch = "llama", .moe = true, .moe_norm_topk = true},
    {.model_type = "qwen2_moe", .hf_class = "Qwen2MoeForCausalLM", .gguf_arch = "qwen2moe", .gguf_neox_rope = true,
     .moe = true},
    {.model_type = "qwen3_moe", .hf_class = "Qwen3MoeForCausalLM", .gguf_arch = "qwen3moe", .gguf_neox_rope = true,
     .qk_norm = true, .moe = true, .moe_norm_topk = true},
    {.model_type = "olmoe", .hf_class = "OlmoeForCausalLM", .gguf_arch = "olmoe", .gguf_neox_rope = true,
     .qk_norm = true, .qk_norm_full = true, .moe = true},
    {.model_type = "gpt_oss", .hf_class = "GptOssForCausalLM", .gguf_arch = "gpt-oss", .gguf_neox_rope = true,
     .moe = true, .moe_norm_topk = true, .attn_sinks = true, .oai_moe = true},
};

// gpt-oss's clamped SwiGLU (GptOssConfig's defaults, what llama.cpp hard-codes): alpha and limit.
inline constexpr double kGptOssSwigluAlpha = 1.702, kGptOssSwigluLimit = 7.0;

// Gemma 2 and 3 (their config.json fields: hidden_activation, query_pre_attn_scalar, soft-capping,
// layer patterns).
constexpr bool is_gemma(std::string_view model_type) {
    return model_type == "gemma2" || model_type == "gemma3_text";
}

// nullptr when kiln does not support it.
constexpr const ArchNames* find_arch_by_model_type(std::string_view model_type) {
    for (const ArchNames& a : kArchitectures)
        if (a.model_type == model_type) return &a;
    return nullptr;
}
constexpr const ArchNames* find_arch_by_hf_class(std::string_view hf_class) {
    for (const ArchNames& a : kArchitectures)
        if (a.hf_class == hf_class) return &a;
    return nullptr;
}
// The first architecture stored under `gguf_arch` ("llama" -> llama, not mistral).
constexpr const ArchNames* find_arch_by_gguf(std::string_view gguf_arch) {
    for (const ArchNames& a : kArchitectures)
        if (a.gguf_arch == gguf_arch) return &a;
    return nullptr;
}

}  // namespace kiln::formats
