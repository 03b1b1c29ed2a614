// config.json / generation_config.json parsing (see hf_config.h). Wrong JSON types are errors that
// name the file and the field; absent optional fields take transformers' defaults for the
// architecture; JSON null counts as absent except where transformers tells the two apart
// (num_key_value_heads, Mistral's sliding_window, Qwen's sliding_window).
#include "formats/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "formats/architectures.h"
#include "formats/json_brief.h"

namespace kiln::formats {
namespace {

using core::StatusCode;
using nlohmann::json;

// Typed, optional access to the fields of one JSON object; the first type error sticks in status().
class Fields {
public:
    Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

    // Present, even as null.
    bool has(const char* key) const { return obj_.contains(key); }
    const json* raw(const char* key) const {
        auto it = obj_.find(key);
        return it == obj_.end() || it->is_null() ? nullptr : &*it;
    }
    std::optional<int64_t> get_int(const char* key) {
        const json* v = raw(key);
        if (!v) return std::nullopt;
        if (std::optional<int64_t> i = as_int64(*v)) return i;
        fail(key, "an integer", *v);
        return std::nullopt;
    }
    std::optional<double> get_num(const char* key) {
        const json* v = raw(key);
        if (!v) return std::nullopt;
        if (v->is_number()) return v->get<double>();
        fail(key, "a number", *v);
        return std::nullopt;
    }
    std::optional<bool> get_bool(const char* key) {
        const json* v = raw(key);
        if (!v) return std::nullopt;
        if (v->is_boolean()) return v->get<bool>();
        fail(key, "true or false", *v);
        return std::nullopt;
    }
    std::optional<std::string> get_str(const char* key) {
        const json* v = raw(key);
        if (!v) return std::nullopt;
        if (v->is_string()) return v->get<std::string>();
        fail(key, "a string", *v);
        return std::nullopt;
    }
    // An int or a list of ints (eos_token_id).
    std::vector<int64_t> get_int_list(const char* key) {
        const json* v = raw(key);
        std::vector<int64_t> out;
        if (!v) return out;
        if (std::optional<int64_t> i = as_int64(*v)) {
            out.push_back(*i);
        } else if (v->is_array() && v->size() <= 1024) {
            for (const json& e : *v) {
                std::optional<int64_t> id = as_int64(e);
                if (!id) {
                    fail(key, "an integer or a list of integers", e);
                    return {};
                }
                out.push_back(*id);
            }
        } else {
            fail(key, "an integer or a list of integers", *v);
        }
        return out;
    }
    // A list of numbers (LongRoPE's factors).
    std::vector<double> get_num_list(const char* key) {
        const json* v = raw(key);
        std::vector<double> out;
        if (!v) return out;
        if (!v->is_array() || v->size() > 65536) {
            fail(key, "a list of numbers", *v);
            return {};
        }
        for (const json& e : *v) {
            if (!e.is_number()) {
                fail(key, "a list of numbers", e);
                return {};
            }
            out.push_back(e.get<double>());
        }
        return out;
    }
    void fail_msg(const std::string& msg) {
        if (status_.is_ok()) status_ = core::error(StatusCode::kCorrupt) << where_ << ": " << msg;
    }
    const core::Status& status() const { return status_; }

private:
    // Integers that fit int64 (an unsigned JSON number above INT64_MAX does not).
    static std::optional<int64_t> as_int64(const json& v) {
        if (!v.is_number_integer()) return std::nullopt;
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return std::nullopt;
        return v.get<int64_t>();
    }
    void fail(const char* key, const char* want, const json& got) {
        fail_msg(std::string("\"") + key + "\" should be " + want + ", got " + json_brief(got));
    }

    const json& obj_;
    std::string where_;
    core::Status status_;
};

core::Result<json> parse_object(const std::string& text, const std::string& name) {
    json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return core::error(StatusCode::kCorrupt) << name << ": not valid JSON";
    if (!root.is_object()) return core::error(StatusCode::kCorrupt) << name << ": not a JSON object";
    return root;
}

std::string supported_list() {
    std::string s;
    for (const std::string& a : hf_supported_architectures()) s += (s.empty() ? "" : ", ") + a;
    return s;
}

core::Result<const ArchNames*> pick_architecture(Fields& f, const std::string& name) {
    const json* archs = f.raw("architectures");
    std::string first;
    if (archs && archs->is_array()) {
        for (const json& a : *archs) {
            if (!a.is_string()) continue;
            const std::string& s = a.get_ref<const std::string&>();
            if (first.empty()) first = s;
            if (const ArchNames* known = find_arch_by_hf_class(s)) return known;
        }
    } else if (archs) {
        return core::error(StatusCode::kCorrupt) << name << ": \"architectures\" should be a list of strings";
    }
    if (first.empty()) {  // no architectures list: fall back to model_type
        std::optional<std::string> mt = f.get_str("model_type");
        if (mt)
            if (const ArchNames* known = find_arch_by_model_type(*mt)) return known;
        first = mt ? "model_type " + *mt : "(none given)";
    }
    return core::error(StatusCode::kUnsupported)
           << name << ": architecture " << first << " is not supported (supported: " << supported_list() << ")";
}

// rope_scaling (transformers < 5) or rope_parameters (>= 5, which also carries rope_theta).
void parse_rope_scaling(Fields& parent, const char* key, const json& obj, RopeScaling* out) {
    Fields f(obj, "");
    std::optional<std::string> type = f.get_str("rope_type");
    if (!type) type = f.get_str("type");
    out->type = type && *type != "default" ? *type : "";
    if (out->type == "su") out->type = "longrope";  // Phi-3's first name for it (transformers renames it too)
    if (auto v = f.get_num("factor")) out->factor = *v;
    if (auto v = f.get_int("original_max_position_embeddings")) out->original_max_position_embeddings = *v;
    if (auto v = f.get_num("low_freq_factor")) out->low_freq_factor = *v;
    if (auto v = f.get_num("high_freq_factor")) out->high_freq_factor = *v;
    if (auto v = f.get_num("beta_fast")) out->beta_fast = *v;
    if (auto v = f.get_num("beta_slow")) out->beta_slow = *v;
    if (auto v = f.get_bool("truncate")) out->truncate = *v;
    out->attention_factor = f.get_num("attention_factor");
    out->short_factor = f.get_num_list("short_factor");
    out->long_factor = f.get_num_list("long_factor");
    if (!f.status().is_ok()) parent.fail_msg(key + f.status().message());
}

core::Status parse_plain_rope(Fields& f, const std::string& name, HfConfig* c);

// Gemma 3: rope_parameters holds one entry per layer type (transformers >= 5); older configs give
// rope_theta, rope_local_base_freq and rope_scaling (which applies to the full-attention layers).
core::Status parse_gemma_rope(Fields& f, const std::string& name, HfConfig* c) {
    c->rope_theta = f.get_num("rope_theta").value_or(1000000.0);
    c->rope_local_theta = f.get_num("rope_local_base_freq").value_or(10000.0);
    if (const json* rs = f.raw("rope_scaling"); rs && rs->is_object()) parse_rope_scaling(f, "rope_scaling", *rs, &c->rope_scaling);
    const json* rp = f.raw("rope_parameters");
    if (!rp || rp->is_null()) return core::Status::ok();
    if (!rp->is_object())
        return core::error(StatusCode::kCorrupt) << name << ": \"rope_parameters\" should be an object, got " << json_brief(*rp);
    for (const char* type : {"full_attention", "sliding_attention"}) {
        auto it = rp->find(type);
        if (it == rp->end() || it->is_null()) continue;
        if (!it->is_object())
            return core::error(StatusCode::kCorrupt) << name << ": rope_parameters." << type << " should be an object";
        Fields pf(*it, name + ": rope_parameters." + type);
        const bool full = std::string(type) == "full_attention";
        if (auto theta = pf.get_num("rope_theta")) (full ? c->rope_theta : c->rope_local_theta) = *theta;
        KILN_RETURN_IF_ERROR(pf.status());
        RopeScaling rs;
        parse_rope_scaling(f, "rope_parameters", *it, &rs);
        if (full) {
            c->rope_scaling = rs;
        } else if (!rs.type.empty()) {
            return core::error(StatusCode::kUnsupported)
                   << name << ": RoPE scaling '" << rs.type << "' on the sliding-window layers is not supported";
        }
    }
    return core::Status::ok();
}

// Gemma 3's sliding layers: layer_types, which must be "every Nth layer full attention", or
// sliding_window_pattern N (default 6).
core::Status parse_gemma_layers(Fields& f, const std::string& name, HfConfig* c) {
    const bool oss = c->model_type == "gpt_oss";
    c->sliding_window = f.has("sliding_window") ? f.get_int("sliding_window").value_or(0) : oss ? 128 : 4096;
    // Gemma2Config and GptOssConfig: every other layer; Gemma3TextConfig: sliding_window_pattern, default 6.
    c->sliding_window_pattern =
        c->model_type == "gemma2" || oss ? 2 : f.get_int("sliding_window_pattern").value_or(6);
    const json* types = f.raw("layer_types");
    if (!types || types->is_null()) return core::Status::ok();
    const int64_t n = c->num_hidden_layers;
    if (!types->is_array() || int64_t(types->size()) != n)
        return core::error(StatusCode::kCorrupt) << name << ": \"layer_types\" should be a list of " << n
                                                 << " strings, got " << json_brief(*types);
    int64_t pattern = 0;  // the first full-attention layer + 1
    for (int64_t i = 0; i < n && pattern == 0; ++i)
        if ((*types)[size_t(i)] == "full_attention") pattern = i + 1;
    if (pattern == 0) pattern = n + 1;  // every layer slides
    for (int64_t i = 0; i < n; ++i) {
        const json& t = (*types)[size_t(i)];
        if (t != "full_attention" && t != "sliding_attention")
            return core::error(StatusCode::kUnsupported) << name << ": layer_types[" << i << "] is " << json_brief(t)
                                                         << " (supported: full_attention, sliding_attention)";
        if ((t == "full_attention") != ((i + 1) % pattern == 0))
            return core::error(StatusCode::kUnsupported)
                   << name << ": layer_types is not \"every " << pattern
                   << "th layer full attention\", the only arrangement kiln supports for " << c->model_type;
    }
    c->sliding_window_pattern = pattern;
    return core::Status::ok();
}

core::Status parse_rope(Fields& f, const std::string& name, HfConfig* c) {
    if (c->model_type == "gemma3_text") return parse_gemma_rope(f, name, c);
    KILN_RETURN_IF_ERROR(parse_plain_rope(f, name, c));
    // Phi-3 keeps LongRoPE's pretraining context at the top level (transformers >= 5 copies it into
    // rope_parameters); only full rotary embeddings are supported.
    if (c->rope_scaling.original_max_position_embeddings == 0)
        c->rope_scaling.original_max_position_embeddings = f.get_int("original_max_position_embeddings").value_or(0);
    std::optional<double> partial = f.get_num("partial_rotary_factor");
    if (const json* rp = f.raw("rope_parameters"); rp && rp->is_object() && rp->contains("partial_rotary_factor")) {
        Fields pf(*rp, name + ": rope_parameters");
        partial = pf.get_num("partial_rotary_factor");
        KILN_RETURN_IF_ERROR(pf.status());
    }
    if (partial && *partial != 1.0)
        return core::error(StatusCode::kUnsupported)
               << name << ": partial_rotary_factor " << *partial << " (partial RoPE) is not supported yet";
    RopeScaling& rs = c->rope_scaling;
    if (rs.type == "longrope" && !rs.attention_factor && rs.original_max_position_embeddings > 0) {
        // transformers' _compute_longrope_parameters: without a factor, the context's growth.
        bool has_factor = false;
        for (const char* key : {"rope_scaling", "rope_parameters"})
            if (const json* o = f.raw(key); o && o->is_object() && o->contains("factor") && !(*o)["factor"].is_null())
                has_factor = true;
        const double orig = double(rs.original_max_position_embeddings);
        const double factor = has_factor ? rs.factor : double(c->max_position_embeddings) / orig;
        rs.attention_factor = factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(orig));
    }
    return core::Status::ok();
}

core::Status parse_plain_rope(Fields& f, const std::string& name, HfConfig* c) {
    c->rope_theta = f.get_num("rope_theta").value_or(10000.0);
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
        const json* rs = f.raw(key);
        if (!rs) continue;
        if (!rs->is_object())
            return core::error(StatusCode::kCorrupt)
                   << name << ": \"" << key << "\" should be an object, got " << json_brief(*rs);
        parse_rope_scaling(f, key, *rs, &c->rope_scaling);
        if (std::string(key) == "rope_parameters") {
            Fields pf(*rs, name + ": rope_parameters");
            if (auto theta = pf.get_num("rope_theta")) c->rope_theta = *theta;
            KILN_RETURN_IF_ERROR(pf.status());
        }
    }
    return core::Status::ok();
}

// Qwen2/Qwen3 layer_types (transformers >= 4.53): kiln supports sliding layers only as a suffix, which
// is what max_window_layers expresses. Returns the first sliding layer (num_layers when none).
core::Result<int64_t> first_sliding_layer(const json& types, int64_t num_layers, const std::string& name) {
    if (!types.is_array() || int64_t(types.size()) != num_layers)
        return core::error(StatusCode::kCorrupt) << name << ": \"layer_types\" should be a list of " << num_layers
                                                 << " strings, got " << json_brief(types);
    int64_t first = num_layers;
    for (int64_t i = 0; i < num_layers; ++i) {
        const json& t = types[size_t(i)];
        bool sliding = t == "sliding_attention";
        if (!sliding && t != "full_attention")
            return core::error(StatusCode::kUnsupported) << name << ": layer_types[" << i << "] is " << json_brief(t)
                                                         << " (supported: full_attention, sliding_attention)";
        if (sliding && first == num_layers) first = i;
        if (!sliding && first < num_layers)
            return core::error(StatusCode::kUnsupported)
                   << name << ": layer_types puts full attention at layer " << i << " after sliding layer " << first
                   << "; kiln supports sliding-window layers only after all full-attention ones";
    }
    return first;
}

// sliding_window / max_window_layers per architecture (see hf_config.h).
core::Status parse_sliding_window(Fields& f, const std::string& name, HfConfig* c) {
    if (is_gemma(c->model_type) || c->model_type == "gpt_oss") {
        KILN_RETURN_IF_ERROR(parse_gemma_layers(f, name, c));
    } else if (c->model_type == "qwen2_moe" || c->model_type == "qwen3_moe") {
        if (f.get_bool("use_sliding_window").value_or(false))
            return core::error(StatusCode::kUnsupported)
                   << name << ": use_sliding_window is not supported for " << c->model_type;
    } else if (c->model_type == "phi3" || c->model_type == "mixtral") {
        // Phi3Config / MixtralConfig: sliding_window (default None) applies to every layer.
        c->sliding_window = f.get_int("sliding_window").value_or(0);
        c->max_window_layers = 0;
    } else if (c->model_type == "mistral") {
        // Absent: MistralConfig's default 4096; null: full attention. Every layer slides.
        c->sliding_window = f.has("sliding_window") ? f.get_int("sliding_window").value_or(0) : 4096;
        c->max_window_layers = 0;
    } else if (c->model_type == "qwen2" || c->model_type == "qwen3") {
        c->max_window_layers = f.get_int("max_window_layers").value_or(28);
        // Qwen2Config: sliding_window = sliding_window if use_sliding_window else None (absent: 4096).
        if (f.get_bool("use_sliding_window").value_or(false))
            c->sliding_window = f.has("sliding_window") ? f.get_int("sliding_window").value_or(0) : 4096;
        if (const json* types = f.raw("layer_types"); types && c->sliding_window > 0 && c->num_hidden_layers > 0) {
            KILN_ASSIGN_OR_RETURN(c->max_window_layers, first_sliding_layer(*types, c->num_hidden_layers, name));
        }
    }
    return core::Status::ok();
}

core::Status check_unsupported(Fields& f, const std::string& name, const HfConfig& c) {
    if (is_gemma(c.model_type)) {
        if (c.hidden_act != "gelu_pytorch_tanh")
            return core::error(StatusCode::kUnsupported)
                   << name << ": hidden_activation \"" << c.hidden_act << "\" is not supported (only gelu_pytorch_tanh)";
        if (!(c.attn_softcap >= 0) || !(c.final_softcap >= 0) || !std::isfinite(c.attn_softcap) ||
            !std::isfinite(c.final_softcap))
            return core::error(StatusCode::kCorrupt) << name << ": soft-capping values must be positive";
        if (f.get_bool("use_bidirectional_attention").value_or(false))
            return core::error(StatusCode::kUnsupported) << name << ": use_bidirectional_attention is not supported";
        if (!(c.query_pre_attn_scalar > 0))
            return core::error(StatusCode::kCorrupt) << name << ": query_pre_attn_scalar must be positive";
        return core::Status::ok();
    }
    if (c.hidden_act != "silu" && c.hidden_act != "swish")
        return core::error(StatusCode::kUnsupported)
               << name << ": hidden_act \"" << c.hidden_act << "\" is not supported (only silu / swish)";
    if (c.model_type == "llama" && f.get_bool("mlp_bias").value_or(false))
        return core::error(StatusCode::kUnsupported) << name << ": mlp_bias true (MLP biases) is not supported";
    return core::Status::ok();
}

// The experts of the MoE families (MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig, OlmoeConfig
// defaults). Layers with a dense MLP (mlp_only_layers, decoder_sparse_step > 1) and OLMoE's clip_qkv
// are not supported.
core::Status parse_experts(Fields& f, const std::string& name, HfConfig* c) {
    const std::string& mt = c->model_type;
    const formats::ArchNames* arch = find_arch_by_model_type(mt);
    if (!arch || !arch->moe) return core::Status::ok();
    const bool mixtral = mt == "mixtral", qwen = mt == "qwen2_moe" || mt == "qwen3_moe";
    const bool oss = mt == "gpt_oss";
    const int64_t experts_default = mixtral ? 8 : mt == "qwen2_moe" ? 60 : mt == "qwen3_moe" || oss ? 128 : 64;
    // MixtralConfig says num_local_experts, the others num_experts, except that transformers 5 saves
    // Qwen3MoeConfig's as num_local_experts too: whichever is there.
    c->num_experts = f.get_int("num_local_experts").value_or(f.get_int("num_experts").value_or(experts_default));
    c->num_experts_used = f.get_int("num_experts_per_tok").value_or(mixtral ? 2 : mt == "qwen2_moe" || oss ? 4 : 8);
    c->expert_intermediate_size =
        qwen ? f.get_int("moe_intermediate_size").value_or(mt == "qwen2_moe" ? 1408 : 768) : c->intermediate_size;
    if (mt == "qwen2_moe") c->shared_expert_intermediate_size = f.get_int("shared_expert_intermediate_size").value_or(5632);
    // Mixtral and gpt-oss weigh the chosen experts by a softmax over their logits alone.
    c->norm_topk_prob = mixtral || oss || f.get_bool("norm_topk_prob").value_or(false);
    if (oss) {
        c->swiglu_alpha = f.get_num("swiglu_alpha").value_or(kGptOssSwigluAlpha);
        c->swiglu_limit = f.get_num("swiglu_limit").value_or(kGptOssSwigluLimit);
        if (!(c->swiglu_alpha > 0) || !(c->swiglu_limit > 0) || !std::isfinite(c->swiglu_alpha) ||
            !std::isfinite(c->swiglu_limit))
            return core::error(StatusCode::kCorrupt) << name << ": swiglu_alpha " << c->swiglu_alpha
                                                     << " and swiglu_limit " << c->swiglu_limit << " must be positive";
    }
    if (qwen) {
        const int64_t step = f.get_int("decoder_sparse_step").value_or(1);
        const std::vector<int64_t> dense = f.get_int_list("mlp_only_layers");
        if (step != 1 || !dense.empty())
            return core::error(StatusCode::kUnsupported)
                   << name << ": layers with a dense MLP (decoder_sparse_step " << step << ", " << dense.size()
                   << " mlp_only_layers) are not supported; every layer must be a mixture of experts";
    }
    if (mt == "olmoe" && f.raw("clip_qkv") && !f.raw("clip_qkv")->is_null())
        return core::error(StatusCode::kUnsupported) << name << ": clip_qkv is not supported";
    return core::Status::ok();
}

core::Status parse_sizes(Fields& f, const std::string& name, HfConfig* c) {
    const char* kRequired[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads"};
    for (const char* key : kRequired)
        if (!f.raw(key)) return core::error(StatusCode::kCorrupt) << name << ": missing \"" << key << "\"";
    const bool is_qwen = c->model_type == "qwen2" || c->model_type == "qwen3";
    const bool gemma = is_gemma(c->model_type);
    c->vocab_size = f.get_int("vocab_size").value_or(0);
    c->hidden_size = f.get_int("hidden_size").value_or(0);
    c->intermediate_size = f.get_int("intermediate_size").value_or(0);
    c->num_hidden_layers = f.get_int("num_hidden_layers").value_or(0);
    c->num_attention_heads = f.get_int("num_attention_heads").value_or(0);
    // Absent: the config class default (LlamaConfig: None -> num_attention_heads); null: num_attention_heads.
    const std::string& mt = c->model_type;
    const int64_t kv_default = mt == "mistral" || mt == "mixtral" || mt == "gpt_oss" ? 8
                               : is_qwen                          ? 32
                               : gemma || mt == "qwen3_moe"       ? 4
                               : mt == "qwen2_moe"                ? 16
                                                                  : c->num_attention_heads;
    c->num_key_value_heads =
        f.has("num_key_value_heads") ? f.get_int("num_key_value_heads").value_or(c->num_attention_heads) : kv_default;
    const bool is_qwen3 = c->model_type == "qwen3";
    int64_t default_head_dim = is_qwen3                     ? 128
                               : gemma                      ? 256
                               : mt == "gpt_oss"            ? 64
                               : c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads
                                                            : 0;
    if (!is_qwen3 && !gemma && mt != "gpt_oss" && !f.raw("head_dim") && c->num_attention_heads > 0 && c->hidden_size % c->num_attention_heads != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": hidden_size " << c->hidden_size << " is not a multiple of num_attention_heads "
               << c->num_attention_heads << " and no head_dim is given";
    c->head_dim = f.get_int("head_dim").value_or(default_head_dim);
    const int64_t max_pos_default = mt == "mistral" || mt == "mixtral" || mt == "gpt_oss" ? 4096 * 32
                                    : is_qwen || mt == "qwen2_moe" || mt == "qwen3_moe" ? 32768
                                    : mt == "olmoe"                                     ? 4096
                                    : c->model_type == "gemma2" ? 8192
                                    : gemma                     ? 131072
                                    : c->model_type == "phi3"   ? 4096
                                                                : 2048;
    c->max_position_embeddings = f.get_int("max_position_embeddings").value_or(max_pos_default);
    return core::Status::ok();
}

HyperParams hyper_params(const HfConfig& c) {
    HyperParams p;
    p.vocab_size = c.vocab_size;
    p.hidden_size = c.hidden_size;
    p.intermediate_size = c.intermediate_size;
    p.num_layers = c.num_hidden_layers;
    p.num_heads = c.num_attention_heads;
    p.num_kv_heads = c.num_key_value_heads;
    p.head_dim = c.head_dim;
    p.max_seq_len = c.max_position_embeddings;
    p.rms_norm_eps = c.rms_norm_eps;
    p.rope_theta = c.rope_theta;
    p.sliding_window = c.sliding_window;
    p.max_window_layers = c.max_window_layers;
    p.rope_scaling = c.rope_scaling;
    p.bos_token_id = c.bos_token_id;
    p.eos_token_ids = c.eos_token_ids;
    p.num_experts = c.num_experts;
    p.num_experts_used = c.num_experts_used;
    p.expert_intermediate_size = c.expert_intermediate_size;
    p.shared_expert_intermediate_size = c.shared_expert_intermediate_size;
    p.norm_topk_prob = c.norm_topk_prob;
    return p;
}

}  // namespace

const std::vector<std::string>& hf_supported_architectures() {
    static const std::vector<std::string> kNames = [] {
        std::vector<std::string> v;
        for (const ArchNames& a : kArchitectures) v.emplace_back(a.hf_class);
        return v;
    }();
    return kNames;
}

core::Result<HfConfig> parse_hf_config(const std::string& json_text, const std::string& name) {
    KILN_ASSIGN_OR_RETURN(json root, parse_object(json_text, name));
    Fields f(root, name);
    HfConfig c;
    KILN_ASSIGN_OR_RETURN(const ArchNames* arch, pick_architecture(f, name));
    c.architecture = arch->hf_class;
    c.model_type = arch->model_type;
    KILN_RETURN_IF_ERROR(parse_sizes(f, name, &c));
    c.rms_norm_eps = f.get_num("rms_norm_eps").value_or(1e-6);
    KILN_RETURN_IF_ERROR(parse_rope(f, name, &c));
    const bool gemma = is_gemma(c.model_type);
    c.tie_word_embeddings = f.get_bool("tie_word_embeddings").value_or(gemma);
    KILN_RETURN_IF_ERROR(parse_sliding_window(f, name, &c));
    // Qwen2 always has q/k/v biases, Qwen2-MoE unless qkv_bias is false; MistralAttention and
    // MixtralAttention have none whatever the config says.
    const std::string& mt = c.model_type;
    c.attention_bias = mt == "qwen2" || (mt == "qwen2_moe" && f.get_bool("qkv_bias").value_or(true)) ||
                       (mt == "gpt_oss" && f.get_bool("attention_bias").value_or(true)) ||
                       (mt != "mistral" && mt != "mixtral" && mt != "qwen2_moe" &&
                        f.get_bool("attention_bias").value_or(false));
    KILN_RETURN_IF_ERROR(parse_experts(f, name, &c));
    c.hidden_act = gemma ? f.get_str("hidden_activation").value_or("gelu_pytorch_tanh")
                         : f.get_str("hidden_act").value_or("silu");
    if (gemma) {
        c.query_pre_attn_scalar = f.get_num("query_pre_attn_scalar").value_or(256.0);
        // Gemma2Config defaults to 50 / 30 (absent); null, and Gemma 3's default, is none.
        const bool g2 = c.model_type == "gemma2";
        c.attn_softcap = f.has("attn_logit_softcapping") ? f.get_num("attn_logit_softcapping").value_or(0.0) : g2 ? 50.0 : 0.0;
        c.final_softcap = f.has("final_logit_softcapping") ? f.get_num("final_logit_softcapping").value_or(0.0) : g2 ? 30.0 : 0.0;
    }
    c.torch_dtype = f.get_str("torch_dtype").value_or(f.get_str("dtype").value_or(""));
    c.bos_token_id = f.get_int("bos_token_id");
    c.eos_token_ids = f.get_int_list("eos_token_id");
    c.pad_token_id = f.get_int("pad_token_id");
    KILN_RETURN_IF_ERROR(f.status());
    KILN_RETURN_IF_ERROR(check_unsupported(f, name, c));
    KILN_RETURN_IF_ERROR(f.status());
    KILN_RETURN_IF_ERROR(check_hyper_params(hyper_params(c), FieldNames::kHf, name));
    return c;
}

core::Result<HfConfig> load_hf_config(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(std::string text, core::read_text_file(path, size_t(16) << 20));
    return parse_hf_config(text, path);
}

core::Result<GenerationConfig> parse_generation_config(const std::string& json_text, const std::string& name) {
    KILN_ASSIGN_OR_RETURN(json root, parse_object(json_text, name));
    Fields f(root, name);
    GenerationConfig g;
    g.temperature = f.get_num("temperature");
    g.top_p = f.get_num("top_p");
    g.top_k = f.get_int("top_k");
    g.repetition_penalty = f.get_num("repetition_penalty");
    g.do_sample = f.get_bool("do_sample");
    g.max_length = f.get_int("max_length");
    g.max_new_tokens = f.get_int("max_new_tokens");
    g.bos_token_id = f.get_int("bos_token_id");
    g.eos_token_ids = f.get_int_list("eos_token_id");
    g.pad_token_id = f.get_int("pad_token_id");
    KILN_RETURN_IF_ERROR(f.status());
    if (g.temperature && (*g.temperature < 0 || !std::isfinite(*g.temperature)))
        return core::error(StatusCode::kCorrupt) << name << ": temperature " << *g.temperature << " is negative";
    if (g.top_p && !(*g.top_p >= 0 && *g.top_p <= 1))
        return core::error(StatusCode::kCorrupt) << name << ": top_p " << *g.top_p << " is outside [0, 1]";
    return g;
}

core::Result<GenerationConfig> load_generation_config(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(std::string text, core::read_text_file(path, size_t(1) << 20));
    return parse_generation_config(text, path);
}

}  // namespace kiln::formats
