// The decoder-only architectures kiln runs and their names in each file format: the one table that
// HF config parsing, GGUF reading, ModelConfig validation and the writers all consult.
// model_type is HF's config.json "model_type" and kiln's ModelConfig::arch. Mistral is stored in GGUF
// as "llama", as llama.cpp does. llama.cpp's qwen2/qwen3 GGUF files keep HF's rotate-half (NEOX)
// Q/K row order; its llama files hold Meta's interleaved-pair order.
#pragma once

#include <string_view>

namespace kiln::formats {

struct ArchNames {
    std::string_view model_type;  // "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3"
    std::string_view hf_class;    // config.json "architectures": "LlamaForCausalLM", ...
    std::string_view gguf_arch;   // GGUF general.architecture
    bool gguf_neox_rope;          // GGUF Q/K rows in rotate-half order
};

inline constexpr ArchNames kArchitectures[] = {
    {"llama", "LlamaForCausalLM", "llama", false},
    {"mistral", "MistralForCausalLM", "llama", false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", true},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", true},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", true},
    {"gemma3_text", "Gemma3ForCausalLM", "gemma3", true},
    {"phi3", "Phi3ForCausalLM", "phi3", true},
};

// Gemma 2 and 3: GeGLU, (1 + w) norms before and after each block, scaled embeddings, sliding and
// global layers in a fixed pattern.
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
