// ModelConfig: kiln's architecture-neutral hyper-parameters of a decoder-only transformer, built from
// whichever file described the model (HF config.json, GGUF metadata, a llama2.c header) and written
// back out as GGUF metadata or an HF config.json.
// GGUF keys follow llama.cpp (gguf-py constants: {arch}.context_length, {arch}.embedding_length,
// {arch}.attention.head_count, ...). Mistral is stored as GGUF architecture "llama", as llama.cpp
// does. Two keys are kiln extensions, since llama.cpp stores Llama-3 RoPE scaling as a rope_freqs
// tensor instead: {arch}.rope.scaling.low_freq_factor / high_freq_factor.
// Invariants after validate(): every size positive, num_heads a multiple of num_kv_heads, head_dim
// even (RoPE rotates pairs), eps and theta positive.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/llama2c.h"

namespace kiln::model {

struct ModelConfig {
    std::string arch = "llama";  // "llama", "mistral", "qwen2", "qwen3"
    std::string name;            // human-readable (general.name); may be empty
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    int64_t max_seq_len = 0;
    double rms_norm_eps = 1e-5;
    double rope_theta = 10000.0;
    formats::RopeScaling rope_scaling;  // type "" = none
    bool tie_word_embeddings = false;   // no output.weight: the classifier is token_embd
    bool attention_bias = false;        // attn_q/k/v have .bias (Qwen2)
    bool qk_norm = false;               // per-head RMSNorm of q and k before RoPE (Qwen3)
    int64_t sliding_window = 0;         // 0: full attention
    std::string torch_dtype;            // from HF config; "" if unknown
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;

    int64_t q_dim() const { return num_heads * head_dim; }
    int64_t kv_dim() const { return num_kv_heads * head_dim; }
    core::Status validate() const;
};

// Architectures ModelConfig::arch may name.
const std::vector<std::string>& supported_archs();

core::Result<ModelConfig> config_from_hf(const formats::HfConfig& hf);
// Reads general.architecture and the {arch}.* keys; tensor presence decides tied embeddings and
// q/k/v biases. Unknown architecture -> kUnsupported.
core::Result<ModelConfig> config_from_gguf(const formats::GgufFile& gguf);
// llama2.c: RoPE theta 10000, RMSNorm eps 1e-5, BOS 1, EOS 2.
core::Result<ModelConfig> config_from_llama2c(const formats::Llama2cHeader& header);

// GGUF architecture string for a config ("llama" for mistral too).
std::string gguf_arch(const ModelConfig& config);
// Whether GGUF files of this architecture hold Q/K rows in rotate-half (NEOX) order, as llama.cpp's
// qwen2/qwen3 files do; llama files hold Meta's interleaved-pair order.
bool gguf_arch_uses_neox_rope(const std::string& gguf_arch_name);

// general.architecture plus the {arch}.* hyper-parameters, in a stable order.
std::vector<std::pair<std::string, formats::GgufValue>> config_to_gguf_metadata(const ModelConfig& config);
// HF config.json text. `torch_dtype` overrides config.torch_dtype when non-empty.
std::string config_to_hf_json(const ModelConfig& config, const std::string& torch_dtype = "");

}  // namespace kiln::model
