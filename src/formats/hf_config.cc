// config.json / generation_config.json parsing (see hf_config.h). Wrong JSON types are errors that
// name the file and the field; absent optional fields take transformers' defaults for the
// architecture; JSON null counts as absent.
#include "formats/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"

namespace kiln::formats {
namespace {

using core::StatusCode;
using nlohmann::json;

constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxHidden = int64_t(1) << 18;
constexpr int64_t kMaxIntermediate = int64_t(1) << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxPositions = int64_t(1) << 30;

// Typed, optional access to the fields of one JSON object; the first type error sticks in status().
class Fields {
public:
    Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

    const json* raw(const char* key) const {
        auto it = obj_.find(key);
        return it == obj_.end() || it->is_null() ? nullptr : &*it;
    }
    std::optional<int64_t> get_int(const char* key) {
        const json* v = raw(key);
        if (!v) return std::nullopt;
        if (v->is_number_integer() && (!v->is_number_unsigned() || v->get<uint64_t>() <= uint64_t(INT64_MAX)))
            return v->get<int64_t>();
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
        if (v->is_number_integer()) {
            out.push_back(v->get<int64_t>());
        } else if (v->is_array() && v->size() <= 1024) {
            for (const json& e : *v) {
                if (!e.is_number_integer()) {
                    fail(key, "an integer or a list of integers", *v);
                    return {};
                }
                out.push_back(e.get<int64_t>());
            }
        } else {
            fail(key, "an integer or a list of integers", *v);
        }
        return out;
    }
    void fail_msg(const std::string& msg) {
        if (status_.is_ok()) status_ = core::error(StatusCode::kCorrupt) << where_ << ": " << msg;
    }
    const core::Status& status() const { return status_; }

private:
    void fail(const char* key, const char* want, const json& got) {
        std::string text = got.dump();
        if (text.size() > 60) text = text.substr(0, 60) + "...";
        fail_msg(std::string("\"") + key + "\" should be " + want + ", got " + text);
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

core::Result<std::string> pick_architecture(Fields& f, const std::string& name) {
    const json* archs = f.raw("architectures");
    std::string first;
    if (archs && archs->is_array()) {
        for (const json& a : *archs) {
            if (!a.is_string()) continue;
            std::string s = a.get<std::string>();
            if (first.empty()) first = s;
            for (const std::string& known : hf_supported_architectures())
                if (s == known) return s;
        }
    } else if (archs) {
        return core::error(StatusCode::kCorrupt) << name << ": \"architectures\" should be a list of strings";
    }
    if (first.empty()) {  // no architectures list: fall back to model_type
        std::optional<std::string> mt = f.get_str("model_type");
        const std::pair<const char*, const char*> kByType[] = {{"llama", "LlamaForCausalLM"},
                                                               {"mistral", "MistralForCausalLM"},
                                                               {"qwen2", "Qwen2ForCausalLM"},
                                                               {"qwen3", "Qwen3ForCausalLM"}};
        for (const auto& [type, arch] : kByType)
            if (mt && *mt == type) return std::string(arch);
        first = mt ? "model_type " + *mt : "(none given)";
    }
    return core::error(StatusCode::kUnsupported)
           << name << ": architecture " << first << " is not supported (supported: " << supported_list() << ")";
}

void parse_rope_scaling(Fields& parent, const json& obj, RopeScaling* out) {
    Fields f(obj, "");
    std::optional<std::string> type = f.get_str("rope_type");
    if (!type) type = f.get_str("type");
    out->type = type && *type != "default" ? *type : "";
    if (auto v = f.get_num("factor")) out->factor = *v;
    if (auto v = f.get_int("original_max_position_embeddings")) out->original_max_position_embeddings = *v;
    if (auto v = f.get_num("low_freq_factor")) out->low_freq_factor = *v;
    if (auto v = f.get_num("high_freq_factor")) out->high_freq_factor = *v;
    if (auto v = f.get_num("beta_fast")) out->beta_fast = *v;
    if (auto v = f.get_num("beta_slow")) out->beta_slow = *v;
    out->attention_factor = f.get_num("attention_factor");
    if (!f.status().is_ok()) parent.fail_msg("rope_scaling" + f.status().message());
    if (!(out->factor > 0) || !std::isfinite(out->factor))
        parent.fail_msg("rope_scaling factor " + std::to_string(out->factor) + " is not a positive number");
}

core::Status check_range(const std::string& name, const char* field, int64_t v, int64_t max) {
    if (v <= 0 || v > max)
        return core::error(StatusCode::kCorrupt)
               << name << ": \"" << field << "\" is " << v << ", outside [1, " << max << "]";
    return core::Status::ok();
}

core::Status validate(const HfConfig& c, const std::string& name) {
    KILN_RETURN_IF_ERROR(check_range(name, "vocab_size", c.vocab_size, kMaxVocab));
    KILN_RETURN_IF_ERROR(check_range(name, "hidden_size", c.hidden_size, kMaxHidden));
    KILN_RETURN_IF_ERROR(check_range(name, "intermediate_size", c.intermediate_size, kMaxIntermediate));
    KILN_RETURN_IF_ERROR(check_range(name, "num_hidden_layers", c.num_hidden_layers, kMaxLayers));
    KILN_RETURN_IF_ERROR(check_range(name, "num_attention_heads", c.num_attention_heads, kMaxHeads));
    KILN_RETURN_IF_ERROR(check_range(name, "num_key_value_heads", c.num_key_value_heads, kMaxHeads));
    KILN_RETURN_IF_ERROR(check_range(name, "head_dim", c.head_dim, kMaxHeadDim));
    KILN_RETURN_IF_ERROR(check_range(name, "max_position_embeddings", c.max_position_embeddings, kMaxPositions));
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": num_attention_heads " << c.num_attention_heads
               << " is not a multiple of num_key_value_heads " << c.num_key_value_heads;
    if (c.head_dim % 2 != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": head_dim " << c.head_dim << " is odd (RoPE rotates pairs)";
    if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
        return core::error(StatusCode::kCorrupt) << name << ": rms_norm_eps " << c.rms_norm_eps << " is not positive";
    if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
        return core::error(StatusCode::kCorrupt) << name << ": rope_theta " << c.rope_theta << " is not positive";
    if (c.sliding_window < 0)
        return core::error(StatusCode::kCorrupt) << name << ": sliding_window " << c.sliding_window << " is negative";
    return core::Status::ok();
}

}  // namespace

const std::vector<std::string>& hf_supported_architectures() {
    static const std::vector<std::string> kArchs = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                                    "Qwen3ForCausalLM"};
    return kArchs;
}

core::Result<HfConfig> parse_hf_config(const std::string& json_text, const std::string& name) {
    KILN_ASSIGN_OR_RETURN(json root, parse_object(json_text, name));
    Fields f(root, name);
    HfConfig c;
    KILN_ASSIGN_OR_RETURN(c.architecture, pick_architecture(f, name));
    const bool is_mistral = c.architecture == "MistralForCausalLM";
    const bool is_qwen2 = c.architecture == "Qwen2ForCausalLM";
    const bool is_qwen3 = c.architecture == "Qwen3ForCausalLM";
    c.model_type = is_mistral ? "mistral" : is_qwen2 ? "qwen2" : is_qwen3 ? "qwen3" : "llama";

    const char* kRequired[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads"};
    for (const char* key : kRequired)
        if (!f.raw(key)) return core::error(StatusCode::kCorrupt) << name << ": missing \"" << key << "\"";
    c.vocab_size = f.get_int("vocab_size").value_or(0);
    c.hidden_size = f.get_int("hidden_size").value_or(0);
    c.intermediate_size = f.get_int("intermediate_size").value_or(0);
    c.num_hidden_layers = f.get_int("num_hidden_layers").value_or(0);
    c.num_attention_heads = f.get_int("num_attention_heads").value_or(0);
    c.num_key_value_heads = f.get_int("num_key_value_heads").value_or(c.num_attention_heads);
    int64_t default_head_dim = is_qwen3 ? 128 : c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
    if (!is_qwen3 && !f.raw("head_dim") && c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads != 0)
        return core::error(StatusCode::kCorrupt)
               << name << ": hidden_size " << c.hidden_size << " is not a multiple of num_attention_heads "
               << c.num_attention_heads << " and no head_dim is given";
    c.head_dim = f.get_int("head_dim").value_or(default_head_dim);
    c.max_position_embeddings = f.get_int("max_position_embeddings")
                                    .value_or(is_mistral               ? 4096 * 32
                                              : (is_qwen2 || is_qwen3) ? 32768
                                                                       : 2048);
    c.rms_norm_eps = f.get_num("rms_norm_eps").value_or(1e-6);
    c.rope_theta = f.get_num("rope_theta").value_or(10000.0);
    if (const json* rs = f.raw("rope_scaling")) {
        if (!rs->is_object()) return core::error(StatusCode::kCorrupt) << name << ": \"rope_scaling\" is not an object";
        parse_rope_scaling(f, *rs, &c.rope_scaling);
    }
    if (const json* rp = f.raw("rope_parameters"); rp && rp->is_object()) {  // transformers >= 5
        Fields pf(*rp, name + ": rope_parameters");
        if (auto theta = pf.get_num("rope_theta")) c.rope_theta = *theta;
        parse_rope_scaling(f, *rp, &c.rope_scaling);
        KILN_RETURN_IF_ERROR(pf.status());
    }
    c.tie_word_embeddings = f.get_bool("tie_word_embeddings").value_or(false);
    if (is_mistral) {
        // Absent: MistralConfig's default 4096; null: full attention.
        c.sliding_window = root.contains("sliding_window") ? f.get_int("sliding_window").value_or(0) : 4096;
    } else if ((is_qwen2 || is_qwen3) && f.get_bool("use_sliding_window").value_or(false)) {
        c.sliding_window = f.get_int("sliding_window").value_or(4096);
    } else if (!is_qwen2 && !is_qwen3) {
        c.sliding_window = f.get_int("sliding_window").value_or(0);
    }
    c.attention_bias = is_qwen2 || f.get_bool("attention_bias").value_or(false);
    c.hidden_act = f.get_str("hidden_act").value_or("silu");
    c.torch_dtype = f.get_str("torch_dtype").value_or(f.get_str("dtype").value_or(""));
    c.bos_token_id = f.get_int("bos_token_id");
    c.eos_token_ids = f.get_int_list("eos_token_id");
    c.pad_token_id = f.get_int("pad_token_id");
    KILN_RETURN_IF_ERROR(f.status());
    KILN_RETURN_IF_ERROR(validate(c, name));
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
