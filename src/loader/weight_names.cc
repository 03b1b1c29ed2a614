// HF <-> GGUF tensor names and the RoPE row permutation (see weight_names.h).
#include "loader/weight_names.h"
#include "formats/architectures.h"

#include <cstring>

#include "core/bytes.h"

namespace kiln::loader {
namespace {

struct NamePair {
    const char* hf;
    const char* gguf;
};

constexpr NamePair kGlobal[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Per-layer names after "model.layers.N." / "blk.N.".
constexpr NamePair kLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    // Phi-3's fused projections (checkpoint.cc splits them into the q/k/v and gate/up tensors).
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"mlp.gate_up_proj.weight", "ffn_gate_up.weight"},
};

// Gemma 3's norms around each block (checked before kLayer).
constexpr NamePair kGemmaLayer[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

constexpr uint64_t kMaxLayerIdx = 1000000;

// Splits "<prefix>N.<rest>" into N and rest. N is decimal without leading zeros.
bool split_layer(const std::string& name, const char* prefix, uint64_t* layer_idx, std::string* rest) {
    size_t plen = std::strlen(prefix);
    if (name.compare(0, plen, prefix) != 0) return false;
    size_t i = plen;
    uint64_t n = 0;
    size_t digits = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') {
        n = n * 10 + uint64_t(name[i] - '0');
        if (n > kMaxLayerIdx) return false;
        ++i;
        ++digits;
    }
    if (digits == 0 || (digits > 1 && name[plen] == '0') || i >= name.size() || name[i] != '.') return false;
    *layer_idx = n;
    *rest = name.substr(i + 1);
    return true;
}

std::optional<std::string> map_name(const std::string& name, bool from_hf, const std::string& model_type) {
    for (const NamePair& p : kGlobal)
        if (name == (from_hf ? p.hf : p.gguf)) return std::string(from_hf ? p.gguf : p.hf);
    uint64_t layer_idx = 0;
    std::string rest;
    if (!split_layer(name, from_hf ? "model.layers." : "blk.", &layer_idx, &rest)) return std::nullopt;
    const std::string prefix = (from_hf ? "blk." : "model.layers.") + std::to_string(layer_idx) + ".";
    if (formats::is_gemma(model_type))
        for (const NamePair& p : kGemmaLayer)
            if (rest == (from_hf ? p.hf : p.gguf)) return prefix + (from_hf ? p.gguf : p.hf);
    for (const NamePair& p : kLayer)
        if (rest == (from_hf ? p.hf : p.gguf)) return prefix + (from_hf ? p.gguf : p.hf);
    return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_to_gguf_name(const std::string& hf_name, const std::string& model_type) {
    return map_name(hf_name, true, model_type);
}

std::optional<std::string> gguf_to_hf_name(const std::string& gguf_name, const std::string& model_type) {
    return map_name(gguf_name, false, model_type);
}

bool is_hf_ignored_tensor(const std::string& hf_name) {
    return core::ends_with(hf_name, ".rotary_emb.inv_freq");
}

int64_t rope_permute_heads(const std::string& gguf_name, const ModelConfig& config) {
    uint64_t layer_idx = 0;
    std::string rest;
    if (!split_layer(gguf_name, "blk.", &layer_idx, &rest)) return 0;
    if (rest == "attn_q.weight" || rest == "attn_q.bias") return config.num_heads;
    if (rest == "attn_k.weight" || rest == "attn_k.bias") return config.num_kv_heads;
    if (rest == "attn_q_norm.weight" || rest == "attn_k_norm.weight") return 1;
    return 0;
}

core::Status permute_rope_rows(const uint8_t* src, uint8_t* dst, uint64_t rows, uint64_t row_bytes, uint64_t num_heads,
                               RopeOrder to) {
    if (num_heads == 0 || rows % num_heads != 0 || (rows / num_heads) % 2 != 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "RoPE permutation: " << rows << " rows do not split into " << num_heads << " heads of an even size";
    const uint64_t head_dim = rows / num_heads;
    const uint64_t half = head_dim / 2;
    for (uint64_t h = 0; h < num_heads; ++h) {
        const uint64_t base = h * head_dim;
        for (uint64_t i = 0; i < half; ++i) {
            for (uint64_t j = 0; j < 2; ++j) {
                const uint64_t interleaved = base + 2 * i + j;     // Meta: pair (2i, 2i+1)
                const uint64_t rotate_half = base + j * half + i;  // HF: pair (i, i + half)
                const uint64_t from = to == RopeOrder::kRotateHalf ? interleaved : rotate_half;
                const uint64_t into = to == RopeOrder::kRotateHalf ? rotate_half : interleaved;
                std::memcpy(dst + into * row_bytes, src + from * row_bytes, row_bytes);
            }
        }
    }
    return core::Status::ok();
}

}  // namespace kiln::loader
