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
    // Mixture of experts (Qwen2-MoE, Qwen3-MoE, OLMoE): the router, the shared expert and its gate.
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    // transformers >= 5's fused 3-D experts: [E, 2F, H] gate then up, [E, H, F] (checkpoint.cc splits them).
    {"mlp.experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"mlp.experts.down_proj", "ffn_down_exps.weight"},
};

// gpt-oss (GptOssForCausalLM; checked before kLayer for gpt_oss): sinks, the biased router, and the
// experts as transformers' GptOssExperts holds them, gate_up_proj [E, H, 2F] with gate and up columns
// interleaved and down_proj [E, F, H], both input-major: checkpoint.cc transposes them into kiln's
// per-expert tensors at load (the *_oss names exist only in between).
constexpr NamePair kOssLayer[] = {
    {"self_attn.sinks", "attn_sinks.weight"},
    {"mlp.router.weight", "ffn_gate_inp.weight"},
    {"mlp.router.bias", "ffn_gate_inp.bias"},
    {"mlp.experts.gate_up_proj", "ffn_gate_up_exps_oss.weight"},
    {"mlp.experts.gate_up_proj_bias", "ffn_gate_up_exps_oss.bias"},
    {"mlp.experts.down_proj", "ffn_down_exps_oss.weight"},
    {"mlp.experts.down_proj_bias", "ffn_down_exps.bias"},
};

// Mixtral's router and fused experts (checked before kLayer for mixtral; read from any HF file).
constexpr NamePair kMixtralLayer[] = {
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"block_sparse_moe.experts.down_proj", "ffn_down_exps.weight"},
};

// One expert's projections: HF "<experts>.E.<proj>.weight" <-> "ffn_<which>.E.weight".
struct ExpertName {
    const char* mixtral;  // Mixtral's w1 / w3 / w2
    const char* hf;       // the others' gate_proj / up_proj / down_proj
    const char* gguf;
};
constexpr ExpertName kExpertNames[] = {
    {"w1", "gate_proj", "ffn_gate"},
    {"w3", "up_proj", "ffn_up"},
    {"w2", "down_proj", "ffn_down"},
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

// An expert's tensor after the layer prefix, or nullopt.
std::optional<std::string> map_expert(const std::string& rest, bool from_hf, bool mixtral) {
    uint64_t e = 0;
    std::string tail;
    for (const ExpertName& n : kExpertNames) {
        if (from_hf) {
            for (const char* experts : {"block_sparse_moe.experts.", "mlp.experts."}) {
                const bool is_mixtral = experts[0] == 'b';
                if (split_layer(rest, experts, &e, &tail) && tail == std::string(is_mixtral ? n.mixtral : n.hf) + ".weight")
                    return std::string(n.gguf) + "." + std::to_string(e) + ".weight";
            }
        } else if (split_layer(rest, (std::string(n.gguf) + ".").c_str(), &e, &tail) && tail == "weight") {
            return std::string(mixtral ? "block_sparse_moe.experts." : "mlp.experts.") + std::to_string(e) + "." +
                   (mixtral ? n.mixtral : n.hf) + ".weight";
        }
    }
    return std::nullopt;
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
    if (model_type == "gpt_oss")
        for (const NamePair& p : kOssLayer)
            if (rest == (from_hf ? p.hf : p.gguf)) return prefix + (from_hf ? p.gguf : p.hf);
    const bool mixtral = model_type == "mixtral";
    if (from_hf || mixtral)
        for (const NamePair& p : kMixtralLayer)
            if (rest == (from_hf ? p.hf : p.gguf)) return prefix + (from_hf ? p.gguf : p.hf);
    for (const NamePair& p : kLayer)
        if (rest == (from_hf ? p.hf : p.gguf)) return prefix + (from_hf ? p.gguf : p.hf);
    if (std::optional<std::string> expert = map_expert(rest, from_hf, mixtral)) return prefix + *expert;
    return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_to_gguf_name(const std::string& hf_name, const std::string& model_type) {
    return map_name(hf_name, true, model_type);
}

std::optional<std::string> gguf_to_hf_name(const std::string& gguf_name, const std::string& model_type) {
    return map_name(gguf_name, false, model_type);
}

std::string gguf_to_canonical_name(const std::string& gguf_name, const ModelConfig& config) {
    if (config.arch == "gpt_oss" && core::ends_with(gguf_name, ".post_attention_norm.weight"))
        return gguf_name.substr(0, gguf_name.size() - std::strlen("post_attention_norm.weight")) + "ffn_norm.weight";
    return gguf_name;
}

std::string canonical_to_gguf_name(const std::string& name, const ModelConfig& config) {
    if (config.arch == "gpt_oss" && core::ends_with(name, ".ffn_norm.weight"))
        return name.substr(0, name.size() - std::strlen("ffn_norm.weight")) + "post_attention_norm.weight";
    return name;
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
    // [head_dim] per-head norms, or OLMoE's [q_dim] / [kv_dim] ones over all heads.
    if (rest == "attn_q_norm.weight") return config.qk_norm_full ? config.num_heads : 1;
    if (rest == "attn_k_norm.weight") return config.qk_norm_full ? config.num_kv_heads : 1;
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
