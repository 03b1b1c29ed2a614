// ModelConfig construction from HF / GGUF / llama2.c and serialization back (see model_config.h).
#include "loader/model_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/architectures.h"

namespace kiln::loader {
namespace {

using core::StatusCode;
using formats::GgufValue;

// GGUF stores floats as f32; give back the shortest decimal that rounds to the same f32, so that
// 1e-5 read from a GGUF prints as 1e-05 again, not 9.99999974737875e-06.
double shortest_f32(double v) {
    float f = float(v);
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf) - 1, f);
    *res.ptr = '\0';
    return std::strtod(buf, nullptr);
}

// Reads an integer hyper-parameter; absent -> `fallback` (nullopt fallback: required).
core::Result<int64_t> gguf_int(const formats::GgufFile& g, const std::string& key, std::optional<int64_t> fallback) {
    const GgufValue* v = g.find(key);
    if (!v) {
        if (fallback) return *fallback;
        return core::error(StatusCode::kCorrupt) << g.path() << ": missing metadata key " << key;
    }
    std::optional<int64_t> i = v->as_int();
    if (!i) {
        return core::error(v->type == formats::GgufType::kArray ? StatusCode::kUnsupported : StatusCode::kCorrupt)
               << g.path() << ": metadata " << key << " is a " << formats::gguf_type_name(v->type)
               << ", expected one integer";
    }
    return *i;
}

core::Result<double> gguf_float(const formats::GgufFile& g, const std::string& key, double fallback) {
    const GgufValue* v = g.find(key);
    if (!v) return fallback;
    std::optional<double> f = v->as_float();
    if (!f) return core::error(StatusCode::kCorrupt) << g.path() << ": metadata " << key << " is not a number";
    return v->type == formats::GgufType::kF32 ? shortest_f32(*f) : *f;
}

core::Status read_gguf_rope_scaling(const formats::GgufFile& g, const std::string& arch, ModelConfig* c) {
    const std::string p = arch + ".rope.scaling.";
    std::optional<std::string> type = g.get_string(p + "type");
    c->rope_scaling.type = type && *type != "none" ? *type : "";
    KILN_ASSIGN_OR_RETURN(c->rope_scaling.factor, gguf_float(g, p + "factor", 1.0));
    KILN_ASSIGN_OR_RETURN(c->rope_scaling.original_max_position_embeddings,
                          gguf_int(g, p + "original_context_length", int64_t(0)));
    KILN_ASSIGN_OR_RETURN(c->rope_scaling.low_freq_factor, gguf_float(g, p + "low_freq_factor", 1.0));
    KILN_ASSIGN_OR_RETURN(c->rope_scaling.high_freq_factor, gguf_float(g, p + "high_freq_factor", 4.0));
    KILN_ASSIGN_OR_RETURN(c->rope_scaling.beta_fast, gguf_float(g, p + "yarn_beta_fast", 32.0));
    KILN_ASSIGN_OR_RETURN(c->rope_scaling.beta_slow, gguf_float(g, p + "yarn_beta_slow", 1.0));
    // gpt-oss was trained with the ramp's ends not rounded (its config.json says truncate false;
    // llama.cpp rounds them), other YaRN models with them rounded.
    c->rope_scaling.truncate = g.get_bool(p + "yarn_truncate").value_or(arch != "gpt-oss");
    if (g.find(p + "attn_factor")) {
        KILN_ASSIGN_OR_RETURN(double af, gguf_float(g, p + "attn_factor", 1.0));
        c->rope_scaling.attention_factor = af;
    }
    // LongRoPE (Phi-3): kiln's files hold the factor lists as keys, llama.cpp's as two tensors.
    for (const char* which : {"short", "long"}) {
        std::vector<double>& out = std::string(which) == "short" ? c->rope_scaling.short_factor : c->rope_scaling.long_factor;
        if (auto keys = g.get_float_array(p + which + "_factor")) {
            out.assign(keys->begin(), keys->end());
        } else if (const formats::GgufTensorInfo* t = g.find_tensor(std::string("rope_factors_") + which + ".weight")) {
            if (t->dtype != core::DType::kF32 || t->shape.size() != 1 || t->shape[0] > 65536)
                return core::error(StatusCode::kCorrupt) << g.path() << ": tensor rope_factors_" << which
                                                         << ".weight must be a 1-D f32 vector";
            const float* f = reinterpret_cast<const float*>(g.tensor_data(*t));
            out.assign(f, f + t->shape[0]);
            if (!type) c->rope_scaling.type = "longrope";
        }
    }
    // llama.cpp's Llama-3 files carry precomputed frequency factors instead of scaling keys (its
    // convert_hf_to_gguf.py writes rope_freqs.weight; llama.cpp divides each RoPE frequency by its factor).
    // With a scaling type as well, the keys are used (llama.cpp would apply both: no such file is known).
    const formats::GgufTensorInfo* freqs = g.find_tensor("rope_freqs.weight");
    if (!type && freqs && c->rope_scaling.type.empty()) {
        if (freqs->dtype != core::DType::kF32 || freqs->shape.size() != 1 || freqs->shape[0] > 65536)
            return core::error(StatusCode::kCorrupt)
                   << g.path() << ": tensor rope_freqs.weight must be a 1-D f32 vector (RoPE frequency factors), got "
                   << core::dtype_name(freqs->dtype) << " with " << freqs->shape.size() << " dimensions";
        c->rope_freq_factors.resize(size_t(freqs->shape[0]));
        std::memcpy(c->rope_freq_factors.data(), g.tensor_data(*freqs), c->rope_freq_factors.size() * sizeof(float));
    }
    return core::Status::ok();
}

// {arch}.vocab_size, else the token list's length, else token_embd's rows.
core::Result<int64_t> gguf_vocab_size(const formats::GgufFile& g, const std::string& p) {
    if (g.find(p + "vocab_size")) return gguf_int(g, p + "vocab_size", std::nullopt);
    if (const GgufValue* toks = g.find("tokenizer.ggml.tokens"); toks && toks->type == formats::GgufType::kArray)
        return int64_t(toks->array.size());
    if (const formats::GgufTensorInfo* emb = g.find_tensor("token_embd.weight"); emb && !emb->shape.empty())
        return int64_t(std::min<uint64_t>(emb->shape[0], uint64_t(INT64_MAX)));
    return core::error(StatusCode::kCorrupt) << g.path() << ": cannot tell the vocabulary size";
}

// What an architecture fixes about its blocks (model_config.h).
void set_family_flags(ModelConfig* c) {
    const formats::ArchNames* a = formats::find_arch_by_model_type(c->arch);
    if (!a) return;  // validate() reports it
    c->qk_norm = c->qk_norm || a->qk_norm;
    c->qk_norm_full = a->qk_norm_full;
    c->attn_sinks = a->attn_sinks;
    c->moe_biases = a->oai_moe;
    if (a->oai_moe && c->swiglu_limit == 0)  // gpt-oss's
        c->swiglu_alpha = formats::kGptOssSwigluAlpha, c->swiglu_limit = formats::kGptOssSwigluLimit;
    c->gelu_mlp = a->gelu_mlp;
    c->sandwich_norms = a->sandwich_norms;
    c->scale_embeddings = a->scale_embeddings;
}

}  // namespace

core::Status ModelConfig::validate() const {
    if (!rope_freq_factors.empty()) {
        if (int64_t(rope_freq_factors.size()) != head_dim / 2)
            return core::error(StatusCode::kCorrupt) << "model config: rope_freqs.weight has " << rope_freq_factors.size()
                                                     << " factors, head_dim " << head_dim << " needs " << head_dim / 2;
        for (float f : rope_freq_factors)
            if (!std::isfinite(f) || f <= 0)
                return core::error(StatusCode::kCorrupt) << "model config: a rope_freqs.weight factor is " << f
                                                         << " (must be finite and > 0)";
    }
    if (!formats::find_arch_by_model_type(arch))
        return core::error(StatusCode::kUnsupported) << "model config: architecture '" << arch << "' is not supported";
    KILN_RETURN_IF_ERROR(formats::check_hyper_params(*this, formats::FieldNames::kKiln, "model config"));
    if (arch == "llama" && sliding_window > 0)
        return core::error(StatusCode::kCorrupt)
               << "model config: llama has no sliding window (got " << sliding_window << "); Mistral is arch mistral";
    if (arch == "mistral" && attention_bias)
        return core::error(StatusCode::kUnsupported) << "model config: mistral has no attention biases";
    const formats::ArchNames* family = formats::find_arch_by_model_type(arch);
    if (family->moe != moe())
        return core::error(StatusCode::kCorrupt) << "model config: " << arch << (family->moe ? " needs" : " has no")
                                                 << " experts (num_experts " << num_experts << ")";
    if (arch == "qwen2" && !attention_bias)
        return core::error(StatusCode::kCorrupt) << "model config: qwen2 always has q/k/v biases";
    if (!(swiglu_alpha >= 0) || !(swiglu_limit >= 0) || !std::isfinite(swiglu_alpha) || !std::isfinite(swiglu_limit))
        return core::error(StatusCode::kCorrupt) << "model config: swiglu_alpha " << swiglu_alpha << " / swiglu_limit "
                                                 << swiglu_limit << " must be finite and not negative";
    if (sliding_window_pattern < 0 || !(query_pre_attn_scalar >= 0) || !(rope_local_theta >= 0) ||
        !std::isfinite(query_pre_attn_scalar) || !std::isfinite(rope_local_theta) || !(attn_softcap >= 0) ||
        !(final_softcap >= 0) || !std::isfinite(attn_softcap) || !std::isfinite(final_softcap))
        return core::error(StatusCode::kCorrupt)
               << "model config: sliding_window_pattern " << sliding_window_pattern << ", query_pre_attn_scalar "
               << query_pre_attn_scalar << ", rope_local_theta " << rope_local_theta << ", soft-capping "
               << attn_softcap << " / " << final_softcap << " (none may be negative)";
    if ((stage_begin != 0 || stage_end_layer != 0) &&
        (stage_begin < 0 || stage_end_layer < 0 || stage_end() > num_layers || stage_begin >= stage_end()))
        return core::error(StatusCode::kCorrupt) << "model config: pipeline stage layers [" << stage_begin << ", "
                                                 << stage_end() << ") of " << num_layers;
    if ((expert_begin != 0 || expert_end_id != 0) &&
        (expert_begin < 0 || expert_end_id < 0 || expert_end() > num_experts || expert_begin >= expert_end()))
        return core::error(StatusCode::kCorrupt) << "model config: experts [" << expert_begin << ", " << expert_end()
                                                 << ") of " << num_experts;
    return core::Status::ok();
}

core::Result<ModelConfig> config_from_hf(const formats::HfConfig& hf) {
    ModelConfig c;
    c.arch = hf.model_type;
    c.vocab_size = hf.vocab_size;
    c.hidden_size = hf.hidden_size;
    c.intermediate_size = hf.intermediate_size;
    c.num_layers = hf.num_hidden_layers;
    c.num_heads = hf.num_attention_heads;
    c.num_kv_heads = hf.num_key_value_heads;
    c.head_dim = hf.head_dim;
    c.max_seq_len = hf.max_position_embeddings;
    c.rms_norm_eps = hf.rms_norm_eps;
    c.rope_theta = hf.rope_theta;
    c.rope_scaling = hf.rope_scaling;
    c.tie_word_embeddings = hf.tie_word_embeddings;
    c.attention_bias = hf.attention_bias;
    c.attn_softcap = hf.attn_softcap;
    c.final_softcap = hf.final_softcap;
    c.num_experts = hf.num_experts;
    c.num_experts_used = hf.num_experts_used;
    c.expert_intermediate_size = hf.expert_intermediate_size;
    c.shared_expert_intermediate_size = hf.shared_expert_intermediate_size;
    c.norm_topk_prob = hf.norm_topk_prob;
    c.swiglu_alpha = hf.swiglu_alpha;
    c.swiglu_limit = hf.swiglu_limit;
    set_family_flags(&c);
    c.query_pre_attn_scalar = hf.query_pre_attn_scalar;
    c.sliding_window_pattern = hf.sliding_window > 0 ? hf.sliding_window_pattern : 0;
    c.rope_local_theta = hf.rope_local_theta;
    c.sliding_window = hf.sliding_window;
    c.max_window_layers = hf.max_window_layers;
    c.torch_dtype = hf.torch_dtype;
    c.bos_token_id = hf.bos_token_id;
    c.eos_token_ids = hf.eos_token_ids;
    KILN_RETURN_IF_ERROR(c.validate());
    return c;
}

core::Result<ModelConfig> config_from_gguf(const formats::GgufFile& g) {
    std::optional<std::string> arch = g.get_string("general.architecture");
    if (!arch) return core::error(StatusCode::kCorrupt) << g.path() << ": no general.architecture string";
    const formats::ArchNames* names = formats::find_arch_by_gguf(*arch);
    if (!names) {
        std::string supported;
        for (const formats::ArchNames& a : formats::kArchitectures)
            if (a.gguf_arch == a.model_type) supported += (supported.empty() ? "" : ", ") + std::string(a.gguf_arch);
        return core::error(StatusCode::kUnsupported)
               << g.path() << ": GGUF architecture '" << *arch << "' is not supported (supported: " << supported << ")";
    }
    const std::string p = *arch + ".";
    ModelConfig c;
    c.arch = names->model_type;
    c.name = g.get_string("general.name").value_or("");
    KILN_ASSIGN_OR_RETURN(c.hidden_size, gguf_int(g, p + "embedding_length", std::nullopt));
    KILN_ASSIGN_OR_RETURN(c.num_layers, gguf_int(g, p + "block_count", std::nullopt));
    KILN_ASSIGN_OR_RETURN(c.intermediate_size, gguf_int(g, p + "feed_forward_length", std::nullopt));
    KILN_ASSIGN_OR_RETURN(c.num_heads, gguf_int(g, p + "attention.head_count", std::nullopt));
    KILN_ASSIGN_OR_RETURN(c.num_kv_heads, gguf_int(g, p + "attention.head_count_kv", c.num_heads));
    if (c.num_heads <= 0)  // the default head_dim divides by it; validate() checks the rest
        return core::error(StatusCode::kCorrupt)
               << g.path() << ": " << p << "attention.head_count " << c.num_heads << " is not positive";
    KILN_ASSIGN_OR_RETURN(c.head_dim, gguf_int(g, p + "attention.key_length", c.hidden_size / c.num_heads));
    KILN_ASSIGN_OR_RETURN(int64_t value_len, gguf_int(g, p + "attention.value_length", c.head_dim));
    KILN_ASSIGN_OR_RETURN(int64_t rope_dims, gguf_int(g, p + "rope.dimension_count", c.head_dim));
    if (value_len != c.head_dim || rope_dims != c.head_dim)
        return core::error(StatusCode::kUnsupported)
               << g.path() << ": key_length " << c.head_dim << ", value_length " << value_len
               << " and rope.dimension_count " << rope_dims << " differ (partial RoPE / MLA are not supported)";
    KILN_ASSIGN_OR_RETURN(c.max_seq_len, gguf_int(g, p + "context_length", int64_t(2048)));
    KILN_ASSIGN_OR_RETURN(c.rms_norm_eps, gguf_float(g, p + "attention.layer_norm_rms_epsilon", 1e-5));
    KILN_ASSIGN_OR_RETURN(c.rope_theta, gguf_float(g, p + "rope.freq_base", 10000.0));
    KILN_ASSIGN_OR_RETURN(c.sliding_window, gguf_int(g, p + "attention.sliding_window", int64_t(0)));
    KILN_ASSIGN_OR_RETURN(c.max_window_layers, gguf_int(g, p + "attention.max_window_layers", int64_t(0)));
    KILN_ASSIGN_OR_RETURN(c.num_experts, gguf_int(g, p + "expert_count", int64_t(0)));
    if (c.arch == "llama" && c.num_experts > 0) {
        c.arch = "mixtral";  // as llama.cpp stores it
    } else if (c.arch == "llama" && c.sliding_window > 0) {
        c.arch = "mistral";  // how kiln writes Mistral
    }
    set_family_flags(&c);
    if (c.num_experts > 0) {
        const formats::ArchNames* family = formats::find_arch_by_model_type(c.arch);
        KILN_ASSIGN_OR_RETURN(c.num_experts_used, gguf_int(g, p + "expert_used_count", std::nullopt));
        KILN_ASSIGN_OR_RETURN(c.expert_intermediate_size,
                              gguf_int(g, p + "expert_feed_forward_length", c.intermediate_size));
        // llama.cpp: the shared expert's size defaults to feed_forward_length when its tensors exist.
        const int64_t shared_default = g.find_tensor("blk.0.ffn_up_shexp.weight") ? c.intermediate_size : 0;
        KILN_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                              gguf_int(g, p + "expert_shared_feed_forward_length", shared_default));
        c.norm_topk_prob = g.get_bool(p + "expert_weights_norm").value_or(family && family->moe_norm_topk);
        if (family && family->oai_moe) {  // llama.cpp hard-codes gpt-oss's
            KILN_ASSIGN_OR_RETURN(c.swiglu_alpha, gguf_float(g, p + "swiglu_oai_alpha", formats::kGptOssSwigluAlpha));
            KILN_ASSIGN_OR_RETURN(c.swiglu_limit, gguf_float(g, p + "swiglu_oai_limit", formats::kGptOssSwigluLimit));
        }
    }
    if (c.arch == "gpt_oss") {
        // llama.cpp's gpt-oss: every 2nd layer full attention; kiln's files may say otherwise.
        KILN_ASSIGN_OR_RETURN(c.sliding_window_pattern, gguf_int(g, p + "attention.sliding_window_pattern", int64_t(2)));
        if (c.sliding_window == 0) c.sliding_window_pattern = 0;
    }
    if (formats::is_gemma(c.arch)) {
        // llama.cpp's gemma2 / gemma3: every 2nd / 6th layer full attention, gemma3's sliding layers
        // at base 10000, scores scaled by 1/sqrt(head_dim), gemma2's soft-capping 50 / 30; kiln's
        // files may say otherwise (kiln keys, model_config.h).
        const bool g2 = c.arch == "gemma2";
        KILN_ASSIGN_OR_RETURN(c.sliding_window_pattern,
                              gguf_int(g, p + "attention.sliding_window_pattern", int64_t(g2 ? 2 : 6)));
        if (c.sliding_window == 0) c.sliding_window_pattern = 0;
        KILN_ASSIGN_OR_RETURN(c.rope_local_theta, gguf_float(g, p + "rope.local_freq_base", g2 ? 0.0 : 10000.0));
        KILN_ASSIGN_OR_RETURN(c.attn_softcap, gguf_float(g, p + "attn_logit_softcapping", g2 ? 50.0 : 0.0));
        KILN_ASSIGN_OR_RETURN(c.final_softcap, gguf_float(g, p + "final_logit_softcapping", g2 ? 30.0 : 0.0));
        KILN_ASSIGN_OR_RETURN(c.query_pre_attn_scalar,
                              gguf_float(g, p + "attention.query_pre_attn_scalar", double(c.head_dim)));
    }
    KILN_RETURN_IF_ERROR(read_gguf_rope_scaling(g, *arch, &c));
    KILN_ASSIGN_OR_RETURN(c.vocab_size, gguf_vocab_size(g, p));
    c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
    c.attention_bias = *arch == "qwen2" || g.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = c.qk_norm || g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;  // the family's, or present
    c.bos_token_id = g.get_int("tokenizer.ggml.bos_token_id");
    if (auto eos = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
    KILN_RETURN_IF_ERROR(c.validate());
    return c;
}

core::Result<ModelConfig> config_from_llama2c(const formats::Llama2cHeader& h) {
    ModelConfig c;
    c.arch = "llama";
    c.vocab_size = h.vocab_size;
    c.hidden_size = h.dim;
    c.intermediate_size = h.hidden_dim;
    c.num_layers = h.n_layers;
    c.num_heads = h.n_heads;
    c.num_kv_heads = h.n_kv_heads;
    c.head_dim = h.n_heads > 0 ? h.dim / h.n_heads : 0;
    c.max_seq_len = h.seq_len;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.tie_word_embeddings = h.shared_classifier;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    KILN_RETURN_IF_ERROR(c.validate());
    return c;
}

std::string gguf_arch(const ModelConfig& config) {
    const formats::ArchNames* a = formats::find_arch_by_model_type(config.arch);
    return a ? std::string(a->gguf_arch) : config.arch;
}

bool gguf_arch_uses_neox_rope(const std::string& gguf_arch_name) {
    const formats::ArchNames* a = formats::find_arch_by_gguf(gguf_arch_name);
    return a && a->gguf_neox_rope;
}

std::vector<std::pair<std::string, GgufValue>> config_to_gguf_metadata(const ModelConfig& c) {
    using namespace formats;
    const std::string arch = gguf_arch(c);
    const std::string p = arch + ".";
    std::vector<std::pair<std::string, GgufValue>> kv;
    kv.emplace_back("general.architecture", gguf_string(arch));
    kv.emplace_back(p + "vocab_size", gguf_u32(uint32_t(c.vocab_size)));
    kv.emplace_back(p + "context_length", gguf_u32(uint32_t(c.max_seq_len)));
    kv.emplace_back(p + "embedding_length", gguf_u32(uint32_t(c.hidden_size)));
    kv.emplace_back(p + "block_count", gguf_u32(uint32_t(c.num_layers)));
    kv.emplace_back(p + "feed_forward_length", gguf_u32(uint32_t(c.intermediate_size)));
    kv.emplace_back(p + "rope.dimension_count", gguf_u32(uint32_t(c.head_dim)));
    kv.emplace_back(p + "attention.head_count", gguf_u32(uint32_t(c.num_heads)));
    kv.emplace_back(p + "attention.head_count_kv", gguf_u32(uint32_t(c.num_kv_heads)));
    if (c.head_dim * c.num_heads != c.hidden_size) {
        kv.emplace_back(p + "attention.key_length", gguf_u32(uint32_t(c.head_dim)));
        kv.emplace_back(p + "attention.value_length", gguf_u32(uint32_t(c.head_dim)));
    }
    kv.emplace_back(p + "attention.layer_norm_rms_epsilon", gguf_f32(float(c.rms_norm_eps)));
    kv.emplace_back(p + "rope.freq_base", gguf_f32(float(c.rope_theta)));
    if (c.sliding_window > 0) kv.emplace_back(p + "attention.sliding_window", gguf_u32(uint32_t(c.sliding_window)));
    if (c.sliding_window > 0 && c.max_window_layers > 0)
        kv.emplace_back(p + "attention.max_window_layers", gguf_u32(uint32_t(c.max_window_layers)));
    if (c.sliding_window_pattern > 0)
        kv.emplace_back(p + "attention.sliding_window_pattern", gguf_u32(uint32_t(c.sliding_window_pattern)));
    if (c.rope_local_theta > 0) kv.emplace_back(p + "rope.local_freq_base", gguf_f32(float(c.rope_local_theta)));
    if (c.query_pre_attn_scalar > 0)
        kv.emplace_back(p + "attention.query_pre_attn_scalar", gguf_f32(float(c.query_pre_attn_scalar)));
    if (c.moe()) {
        kv.emplace_back(p + "expert_count", gguf_u32(uint32_t(c.num_experts)));
        kv.emplace_back(p + "expert_used_count", gguf_u32(uint32_t(c.num_experts_used)));
        kv.emplace_back(p + "expert_feed_forward_length", gguf_u32(uint32_t(c.expert_intermediate_size)));
        if (c.shared_expert_intermediate_size > 0)
            kv.emplace_back(p + "expert_shared_feed_forward_length",
                            gguf_u32(uint32_t(c.shared_expert_intermediate_size)));
        kv.emplace_back(p + "expert_weights_norm", gguf_bool(c.norm_topk_prob));
        if (c.swiglu_limit > 0) {
            kv.emplace_back(p + "swiglu_oai_alpha", gguf_f32(float(c.swiglu_alpha)));
            kv.emplace_back(p + "swiglu_oai_limit", gguf_f32(float(c.swiglu_limit)));
        }
    }
    if (formats::is_gemma(c.arch)) {  // always: gemma2's defaults are not 0
        kv.emplace_back(p + "attn_logit_softcapping", gguf_f32(float(c.attn_softcap)));
        kv.emplace_back(p + "final_logit_softcapping", gguf_f32(float(c.final_softcap)));
    }
    const formats::RopeScaling& rs = c.rope_scaling;
    if (!rs.type.empty()) {
        kv.emplace_back(p + "rope.scaling.type", gguf_string(rs.type));
        kv.emplace_back(p + "rope.scaling.factor", gguf_f32(float(rs.factor)));
        if (rs.original_max_position_embeddings > 0)
            kv.emplace_back(p + "rope.scaling.original_context_length",
                            gguf_u32(uint32_t(rs.original_max_position_embeddings)));
        if (rs.type == "llama3") {
            kv.emplace_back(p + "rope.scaling.low_freq_factor", gguf_f32(float(rs.low_freq_factor)));
            kv.emplace_back(p + "rope.scaling.high_freq_factor", gguf_f32(float(rs.high_freq_factor)));
        }
        if (rs.type == "yarn") {
            kv.emplace_back(p + "rope.scaling.yarn_beta_fast", gguf_f32(float(rs.beta_fast)));
            kv.emplace_back(p + "rope.scaling.yarn_beta_slow", gguf_f32(float(rs.beta_slow)));
            kv.emplace_back(p + "rope.scaling.yarn_truncate", gguf_bool(rs.truncate));
        }
        if (rs.attention_factor) kv.emplace_back(p + "rope.scaling.attn_factor", gguf_f32(float(*rs.attention_factor)));
        if (rs.type == "longrope") {
            kv.emplace_back(p + "rope.scaling.short_factor",
                            gguf_f32_array(std::vector<float>(rs.short_factor.begin(), rs.short_factor.end())));
            kv.emplace_back(p + "rope.scaling.long_factor",
                            gguf_f32_array(std::vector<float>(rs.long_factor.begin(), rs.long_factor.end())));
        }
    }
    return kv;
}

std::string config_to_hf_json(const ModelConfig& c, const std::string& torch_dtype) {
    nlohmann::ordered_json j;
    const formats::ArchNames* names = formats::find_arch_by_model_type(c.arch);
    j["architectures"] = {std::string(names ? names->hf_class : "LlamaForCausalLM")};
    j["model_type"] = c.arch;
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["max_position_embeddings"] = c.max_seq_len;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_theta"] = c.rope_theta;
    const formats::RopeScaling& rs = c.rope_scaling;
    if (rs.type.empty()) {
        j["rope_scaling"] = nullptr;
    } else {
        nlohmann::ordered_json r;
        r["rope_type"] = rs.type;
        r["factor"] = rs.factor;
        if (rs.original_max_position_embeddings > 0)
            r["original_max_position_embeddings"] = rs.original_max_position_embeddings;
        if (rs.type == "llama3") {
            r["low_freq_factor"] = rs.low_freq_factor;
            r["high_freq_factor"] = rs.high_freq_factor;
        }
        if (rs.type == "yarn") {
            r["beta_fast"] = rs.beta_fast;
            r["beta_slow"] = rs.beta_slow;
            if (!rs.truncate) r["truncate"] = false;
        }
        if (rs.attention_factor) r["attention_factor"] = *rs.attention_factor;
        if (rs.type == "longrope") {
            r["short_factor"] = rs.short_factor;
            r["long_factor"] = rs.long_factor;
        }
        j["rope_scaling"] = std::move(r);
    }
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (c.arch == "qwen2_moe") {
        j["qkv_bias"] = c.attention_bias;
    } else if (c.arch != "qwen2" && c.arch != "mixtral") {
        j["attention_bias"] = c.attention_bias;
    }
    j["hidden_act"] = "silu";
    if (c.moe()) {
        j[c.arch == "mixtral" ? "num_local_experts" : "num_experts"] = c.num_experts;
        j["num_experts_per_tok"] = c.num_experts_used;
        if (c.arch == "qwen2_moe" || c.arch == "qwen3_moe") {
            j["moe_intermediate_size"] = c.expert_intermediate_size;
            j["decoder_sparse_step"] = 1;
            j["mlp_only_layers"] = nlohmann::ordered_json::array();
        }
        if (c.arch == "qwen2_moe") j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
        if (c.arch != "mixtral") j["norm_topk_prob"] = c.norm_topk_prob;
    }
    // LlamaConfig has no sliding window; Mistral's applies to every layer.
    if (c.arch == "mistral" || c.arch == "phi3" || c.arch == "mixtral") {
        j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
    } else if (c.arch == "qwen2" || c.arch == "qwen3") {
        j["use_sliding_window"] = c.sliding_window > 0;
        j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
        j["max_window_layers"] = c.max_window_layers;
    }
    std::string dtype = torch_dtype.empty() ? c.torch_dtype : torch_dtype;
    if (!dtype.empty()) j["torch_dtype"] = dtype;
    if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
    if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
    if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
    // replace: a hostile GGUF string (rope type) must not make dump() throw.
    return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace kiln::loader
