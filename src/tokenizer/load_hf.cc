// Tokenizer::from_hf: HF tokenizers' tokenizer.json (model type BPE) plus, when next to it,
// transformers' tokenizer_config.json.
//
// Supported components (anything else is a kUnsupported error that names what is supported):
//   normalizer: null, Sequence, Prepend, Replace (String pattern), NFC
//   pre_tokenizer: null, Sequence, Split (String/Regex pattern; Isolated, Removed,
//     MergedWithPrevious, MergedWithNext; invert), ByteLevel (add_prefix_space only as the first
//     step, use_regex = the GPT-2 pattern), Metaspace (replacement, prepend_scheme, split; only as
//     the first step), Digits
//   post_processor: null, ByteLevel, TemplateProcessing ("single"), RobertaProcessing,
//     BertProcessing, Sequence
// A ByteLevel pre-tokenizer makes it a byte-level ("bpe") tokenizer, otherwise SentencePiece-style
// ("spm": merges over characters, byte_fallback, unk_token, fuse_unk).
// tokenizer_config.json: add_bos_token / add_eos_token (when present they replace the
// post-processor's tokens, like transformers' LlamaTokenizerFast), bos_token / eos_token,
// chat_template. Malformed JSON or a field of the wrong type is a kCorrupt error naming the file.
//
// Hostile input stays bounded: token ids must be integers, the vocabulary may not have more slots
// than the JSON has bytes (a real tokenizer.json spends far more than a byte per token, so a tiny
// file cannot make us allocate a huge table), Sequence nesting is capped, and normalizers may grow
// text at most kMaxNormalizerGrowth-fold (chained Replace steps could otherwise blow it up
// exponentially at encode time).
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

namespace kiln::tokenizer {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSpmSpace = "\xE2\x96\x81";  // U+2581
constexpr int kMaxNesting = 16;                    // Sequence inside Sequence ...
constexpr size_t kMaxNormalizerGrowth = 64;        // output bytes per input byte, all Replace steps together
constexpr size_t kMaxNormalizerPrepend = 1 << 12;  // bytes all Prepend steps together may add

// What the loader checks as it goes.
struct Limits {
    size_t max_tokens;     // vocabulary slots; bounded by the input size
    size_t growth = 1;     // product of the Replace steps' growth factors so far
    size_t prepended = 0;  // bytes the Prepend steps add
};

core::StatusBuilder corrupt(const std::string& src) {
    core::StatusBuilder b(core::StatusCode::kCorrupt);
    b << src << ": ";
    return b;
}

// A token id: a JSON integer in [0, 2^31). Anything else (floats, negatives, strings) is corrupt.
core::Result<int32_t> token_id(const json& v, const std::string& src, const char* what) {
    if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT32_MAX)) return int32_t(v.get<uint64_t>());
    if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX)
        return int32_t(v.get<int64_t>());
    return corrupt(src) << what << " id " << v.dump(-1, ' ', false, json::error_handler_t::replace)
                        << " is not an integer in [0, 2^31)";
}

core::StatusBuilder unsupported(const std::string& src) {
    core::StatusBuilder b(core::StatusCode::kUnsupported);
    b << src << ": ";
    return b;
}

// A token given as "text" or {"content": "text", ...}; "" if neither.
std::string token_content(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return {};
}

// Records a step that may grow text; errors once the growth passes the caps.
core::Status check_growth(Limits& lim, const NormalizerStep& step, const std::string& src) {
    if (step.kind == NormalizerStep::Kind::kReplace) {
        if (step.from.empty()) return core::Status::ok();  // replace_all ignores an empty pattern
        size_t factor = (step.to.size() + step.from.size() - 1) / step.from.size();
        lim.growth *= std::max<size_t>(factor, 1);
        if (lim.growth > kMaxNormalizerGrowth)
            return unsupported(src) << "normalizers that grow text more than " << kMaxNormalizerGrowth << "-fold";
    } else if (step.kind != NormalizerStep::Kind::kNfc) {
        lim.prepended += step.to.size();
        if (lim.prepended > kMaxNormalizerPrepend)
            return unsupported(src) << "normalizers that prepend more than " << kMaxNormalizerPrepend << " bytes";
    }
    return core::Status::ok();
}

core::Status push_normalizer(TokenizerState& s, Limits& lim, NormalizerStep step, const std::string& src) {
    KILN_RETURN_IF_ERROR(check_growth(lim, step, src));
    s.normalizers.push_back(std::move(step));
    return core::Status::ok();
}

core::Status add_normalizer(const json& n, const std::string& src, TokenizerState& s, Limits& lim, int depth = 0) {
    if (n.is_null()) return core::Status::ok();
    if (depth > kMaxNesting) return unsupported(src) << "normalizers nested deeper than " << kMaxNesting;
    const std::string type = n.at("type").get<std::string>();
    if (type == "Sequence") {
        for (const json& sub : n.at("normalizers")) KILN_RETURN_IF_ERROR(add_normalizer(sub, src, s, lim, depth + 1));
    } else if (type == "Prepend") {
        KILN_RETURN_IF_ERROR(
            push_normalizer(s, lim, {NormalizerStep::Kind::kPrepend, "", n.at("prepend").get<std::string>()}, src));
    } else if (type == "Replace") {
        const json& pat = n.at("pattern");
        if (!pat.is_object() || !pat.contains("String"))
            return unsupported(src) << "Replace normalizer with a regex pattern";
        KILN_RETURN_IF_ERROR(push_normalizer(
            s, lim,
            {NormalizerStep::Kind::kReplace, pat["String"].get<std::string>(), n.at("content").get<std::string>()},
            src));
    } else if (type == "NFC") {
        s.normalizers.push_back({NormalizerStep::Kind::kNfc, "", ""});
    } else {
        return unsupported(src) << "unknown normalizer type '" << type << "' (known: Sequence, Prepend, Replace, NFC)";
    }
    return core::Status::ok();
}

core::Result<SplitBehavior> split_behavior(const std::string& name, const std::string& src) {
    if (name == "Isolated") return SplitBehavior::kIsolated;
    if (name == "Removed") return SplitBehavior::kRemoved;
    if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    return unsupported(src) << "Split behavior '" << name
                            << "' (known: Isolated, Removed, MergedWithPrevious, MergedWithNext)";
}

core::Status add_splitter(TokenizerState& s, const std::string& pattern, bool literal, SplitBehavior b, bool invert) {
    KILN_ASSIGN_OR_RETURN(auto sp, Splitter::compile(pattern, literal, b, invert));
    s.splitters.push_back(std::move(sp));
    return core::Status::ok();
}

// `first` = nothing has touched the text yet (ByteLevel's add_prefix_space is only supported there).
core::Status add_pre_tokenizer(const json& p, const std::string& src, TokenizerState& s, Limits& lim, bool& byte_level,
                               std::string& name, bool& first, int depth = 0) {
    if (p.is_null()) return core::Status::ok();
    if (depth > kMaxNesting) return unsupported(src) << "pre-tokenizers nested deeper than " << kMaxNesting;
    const std::string type = p.at("type").get<std::string>();
    if (type != "Sequence") name += (name.empty() ? "" : "+") + type;
    if (type == "Sequence") {
        for (const json& sub : p.at("pretokenizers"))
            KILN_RETURN_IF_ERROR(add_pre_tokenizer(sub, src, s, lim, byte_level, name, first, depth + 1));
        return core::Status::ok();
    }
    if (type == "Split") {
        const json& pat = p.at("pattern");
        if (!pat.is_object()) return corrupt(src) << "Split pattern must be an object";
        bool literal = pat.contains("String");
        std::string re = literal ? pat["String"].get<std::string>() : pat.at("Regex").get<std::string>();
        KILN_ASSIGN_OR_RETURN(SplitBehavior b, split_behavior(p.at("behavior").get<std::string>(), src));
        KILN_RETURN_IF_ERROR(add_splitter(s, re, literal, b, p.value("invert", false)));
    } else if (type == "ByteLevel") {
        byte_level = true;
        if (p.value("add_prefix_space", false)) {
            if (!first) return unsupported(src) << "ByteLevel add_prefix_space after another pre-tokenizer";
            KILN_RETURN_IF_ERROR(push_normalizer(s, lim, {NormalizerStep::Kind::kPrependIfMissing, "", " "}, src));
        }
        if (p.value("use_regex", true))
            KILN_RETURN_IF_ERROR(add_splitter(s, kGpt2Pattern, false, SplitBehavior::kIsolated, false));
    } else if (type == "Metaspace") {
        // Implemented as normalizers on the whole text, which equals HF's per-piece Metaspace only when
        // no pre-tokenizer ran before it.
        if (!first) return unsupported(src) << "Metaspace after another pre-tokenizer";
        std::string repl = p.value("replacement", std::string(kSpmSpace));
        std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
        KILN_RETURN_IF_ERROR(push_normalizer(s, lim, {NormalizerStep::Kind::kReplace, " ", repl}, src));
        if (scheme == "always")
            KILN_RETURN_IF_ERROR(push_normalizer(s, lim, {NormalizerStep::Kind::kPrependIfMissing, "", repl}, src));
        else if (scheme == "first")
            KILN_RETURN_IF_ERROR(
                push_normalizer(s, lim, {NormalizerStep::Kind::kPrependIfMissingFirst, "", repl}, src));
        else if (scheme != "never")
            return unsupported(src) << "Metaspace prepend_scheme '" << scheme << "'";
        s.strip_prefix_space = scheme != "never";
        if (p.value("split", true))
            KILN_RETURN_IF_ERROR(add_splitter(s, repl, true, SplitBehavior::kMergedWithNext, false));
    } else if (type == "Digits") {
        // HF Digits splits on char::is_numeric, i.e. Unicode N (Nd, Nl, No).
        KILN_RETURN_IF_ERROR(add_splitter(s, p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", false,
                                          SplitBehavior::kIsolated, false));
    } else {
        return unsupported(src) << "unknown pre-tokenizer type '" << type
                                << "' (known: Sequence, Split, ByteLevel, Metaspace, Digits)";
    }
    first = false;
    return core::Status::ok();
}

// Token ids the post-processor puts before / after a single sequence.
core::Status add_post_processor(const json& p, const std::string& src, TokenizerState& s, int depth = 0) {
    if (p.is_null()) return core::Status::ok();
    if (depth > kMaxNesting) return unsupported(src) << "post-processors nested deeper than " << kMaxNesting;
    const std::string type = p.at("type").get<std::string>();
    if (type == "ByteLevel") return core::Status::ok();
    if (type == "Sequence") {
        for (const json& sub : p.at("processors")) KILN_RETURN_IF_ERROR(add_post_processor(sub, src, s, depth + 1));
    } else if (type == "TemplateProcessing") {
        const json& specials = p.at("special_tokens");
        bool after = false;
        for (const json& item : p.at("single")) {
            if (item.contains("Sequence")) {
                after = true;
                continue;
            }
            const std::string key = item.at("SpecialToken").at("id").get<std::string>();
            for (const json& id : specials.at(key).at("ids")) {
                KILN_ASSIGN_OR_RETURN(int32_t v, token_id(id, src, "post_processor special token"));
                (after ? s.suffix_ids : s.prefix_ids).push_back(v);
            }
        }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
        KILN_ASSIGN_OR_RETURN(int32_t cls, token_id(p.at("cls").at(1), src, "post_processor cls"));
        KILN_ASSIGN_OR_RETURN(int32_t sep, token_id(p.at("sep").at(1), src, "post_processor sep"));
        s.prefix_ids.push_back(cls);
        s.suffix_ids.push_back(sep);
    } else {
        return unsupported(src)
               << "unknown post_processor type '" << type
               << "' (known: ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, Sequence)";
    }
    return core::Status::ok();
}

core::Status load_vocab_and_merges(const json& model, const json& added, const std::string& src, const Limits& lim,
                                   TokenizerState& s) {
    if (!model.at("vocab").is_object() || !model.at("merges").is_array() || !added.is_array())
        return core::error(core::StatusCode::kCorrupt)
               << src << ": model.vocab must be an object, model.merges and added_tokens arrays";
    size_t n = 0;
    for (const auto& [text, id] : model.at("vocab").items()) {
        KILN_ASSIGN_OR_RETURN(int32_t i, token_id(id, src, "vocab"));
        n = std::max(n, size_t(i) + 1);
    }
    for (const json& t : added) {
        KILN_ASSIGN_OR_RETURN(int32_t i, token_id(t.at("id"), src, "added token"));
        n = std::max(n, size_t(i) + 1);
    }
    if (n == 0) return corrupt(src) << "empty vocabulary";
    if (n > lim.max_tokens)
        return corrupt(src) << "vocabulary ids go up to " << n - 1 << ", more than a " << lim.max_tokens
                            << "-byte tokenizer.json can describe";
    s.tokens.assign(n, std::string());
    s.types.assign(n, TokenType::kUnused);
    s.token_to_id.reserve(n);
    for (const auto& [text, id] : model.at("vocab").items()) {
        const int32_t i = id.get<int32_t>();  // checked above
        s.tokens[size_t(i)] = text;
        s.types[size_t(i)] = TokenType::kNormal;
        s.token_to_id.emplace(text, i);
    }
    for (const json& t : added) {
        AddedToken a{t.at("id").get<int32_t>(), t.at("content").get<std::string>(), t.value("special", false),
                     t.value("lstrip", false), t.value("rstrip", false)};
        s.tokens[size_t(a.id)] = a.text;
        s.types[size_t(a.id)] = a.special ? TokenType::kControl : TokenType::kUserDefined;
        s.token_to_id.emplace(a.text, a.id);
        s.added.push_back(std::move(a));
    }
    const json& merges = model.at("merges");
    std::string joined;
    for (size_t i = 0; i < merges.size(); ++i) {
        const json& m = merges[i];
        std::string a, b;
        if (m.is_array() && m.size() == 2) {
            a = m[0].get<std::string>();
            b = m[1].get<std::string>();
        } else {
            std::string str = m.get<std::string>();
            size_t sp = str.find(' ', 1);
            if (sp == std::string::npos)
                return core::error(core::StatusCode::kCorrupt)
                       << src << ": merge #" << i << " '" << str << "' has no space";
            a = str.substr(0, sp);
            b = str.substr(sp + 1);
        }
        int32_t ia = s.find(a), ib = s.find(b), im = s.find(a + b);
        if (ia < 0 || ib < 0 || im < 0)
            return core::error(core::StatusCode::kCorrupt)
                   << src << ": merge #" << i << " '" << a << " " << b << "' uses a token missing from the vocabulary";
        s.pairs.insert(ia, ib, int32_t(i), im);
    }
    return core::Status::ok();
}

core::Status apply_config(const json& cfg, TokenizerState& s) {
    auto id_of = [&](const char* key) { return cfg.contains(key) ? s.find(token_content(cfg[key])) : -1; };
    s.bos_id = id_of("bos_token");
    s.eos_id = id_of("eos_token");
    if (s.bos_id < 0 && s.prefix_ids.size() == 1) s.bos_id = s.prefix_ids[0];
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
        s.prefix_ids.clear();
        if (cfg["add_bos_token"].get<bool>() && s.bos_id >= 0) s.prefix_ids.push_back(s.bos_id);
    }
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
        s.suffix_ids.clear();
        if (cfg["add_eos_token"].get<bool>() && s.eos_id >= 0) s.suffix_ids.push_back(s.eos_id);
    }
    if (cfg.contains("chat_template")) {
        const json& t = cfg["chat_template"];
        if (t.is_string()) {
            s.chat_template = t.get<std::string>();
        } else if (t.is_array()) {  // [{"name": ..., "template": ...}]: prefer "default"
            for (const json& e : t)
                if (e.value("name", "") == "default" || s.chat_template.empty())
                    s.chat_template = e.value("template", "");
        }
    }
    return core::Status::ok();
}

core::Result<std::unique_ptr<TokenizerState>> build(const json& j, const json& cfg, const std::string& src,
                                                    Limits& lim) {
    auto s = std::make_unique<TokenizerState>();
    const json& model = j.at("model");
    if (!model.is_object()) return corrupt(src) << "model must be an object";
    const std::string model_type = model.value("type", "BPE");
    if (model_type != "BPE")
        return unsupported(src) << "model type '" << model_type << "' (only BPE tokenizers are supported)";
    if (!model.value("continuing_subword_prefix", json("")).is_null() &&
        !model.value("continuing_subword_prefix", json("")).get<std::string>().empty())
        return unsupported(src) << "BPE continuing_subword_prefix";
    if (!model.value("end_of_word_suffix", json("")).is_null() &&
        !model.value("end_of_word_suffix", json("")).get<std::string>().empty())
        return unsupported(src) << "BPE end_of_word_suffix";
    const json empty = json::array();
    KILN_RETURN_IF_ERROR(load_vocab_and_merges(model, j.value("added_tokens", empty), src, lim, *s));
    KILN_RETURN_IF_ERROR(add_normalizer(j.value("normalizer", json()), src, *s, lim));
    bool byte_level = false, first = true;
    std::string name;
    KILN_RETURN_IF_ERROR(add_pre_tokenizer(j.value("pre_tokenizer", json()), src, *s, lim, byte_level, name, first));
    s->pre_name = name.empty() ? "none" : name;
    KILN_RETURN_IF_ERROR(add_post_processor(j.value("post_processor", json()), src, *s));
    s->kind = byte_level ? ModelKind::kBpe : ModelKind::kSpm;
    s->ignore_merges = model.value("ignore_merges", false);
    s->byte_fallback = model.value("byte_fallback", false);
    s->fuse_unk = model.value("fuse_unk", false);
    const json unk = model.value("unk_token", json());
    if (unk.is_string()) s->unk_id = s->find(unk.get<std::string>());
    if (s->kind == ModelKind::kSpm) {
        for (const NormalizerStep& n : s->normalizers)
            if (n.kind == NormalizerStep::Kind::kPrepend && n.to == kSpmSpace) s->strip_prefix_space = true;
        for (size_t i = 0; i < s->tokens.size(); ++i) {
            const std::string& t = s->tokens[i];
            if (s->types[i] == TokenType::kNormal && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
                s->types[i] = TokenType::kByte;
        }
    }
    if (s->unk_id >= 0) s->types[size_t(s->unk_id)] = TokenType::kUnknown;
    KILN_RETURN_IF_ERROR(apply_config(cfg, *s));
    return s;
}

}  // namespace

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf(const std::string& path) {
    std::error_code ec;
    fs::path json_path = path, cfg_path;
    if (fs::is_directory(json_path, ec)) json_path /= "tokenizer.json";
    cfg_path = json_path.parent_path() / "tokenizer_config.json";
    const std::string src = json_path.string();
    KILN_ASSIGN_OR_RETURN(std::string text, core::read_text_file(src));
    std::string cfg_text;
    if (fs::exists(cfg_path, ec)) {
        KILN_ASSIGN_OR_RETURN(cfg_text, core::read_text_file(cfg_path.string()));
        json cfg = json::parse(cfg_text, nullptr, false);
        if (cfg.is_discarded() || !cfg.is_object())  // checked here so the error names the config file
            return core::error(core::StatusCode::kCorrupt) << cfg_path.string() << ": not a valid JSON object";
    }
    return from_hf_json(text, src, cfg_text);
}

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(std::string_view tokenizer_json,
                                                                 const std::string& name,
                                                                 std::string_view config_json) {
    json j = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
        return core::error(core::StatusCode::kCorrupt) << name << ": not a valid tokenizer.json (JSON parse error)";
    json cfg = json::object();
    if (!config_json.empty()) {
        cfg = json::parse(config_json, nullptr, false);
        if (cfg.is_discarded() || !cfg.is_object())
            return core::error(core::StatusCode::kCorrupt) << name << ": tokenizer_config.json is not a JSON object";
    }
    Limits lim{std::max<size_t>(tokenizer_json.size(), 256)};
    try {
        KILN_ASSIGN_OR_RETURN(std::unique_ptr<TokenizerState> s, build(j, cfg, name, lim));
        KILN_RETURN_IF_ERROR(s->finalize(name));
        return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(s)));
    } catch (const json::exception& e) {
        return core::error(core::StatusCode::kCorrupt) << name << ": malformed tokenizer.json: " << e.what();
    }
}

}  // namespace kiln::tokenizer
