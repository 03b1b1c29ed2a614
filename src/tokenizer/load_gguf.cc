// Tokenizer::from_gguf / from_gguf_metadata: builds a tokenizer from GGUF tokenizer.ggml.* metadata
// the way llama.cpp's llama_vocab::load does: model "llama" = SentencePiece BPE over scores (dummy
// prefix per tokenizer.ggml.add_space_prefix, default on), model "gpt2" = byte-level BPE over
// tokenizer.ggml.merges with the regexes of tokenizer.ggml.pre; add_bos/add_eos default per model
// and pre-tokenizer and are overridden by tokenizer.ggml.add_bos_token / add_eos_token.
// The loader only sees a key -> value lookup, so the metadata may come from a GgufFile or from
// anywhere else that carries it (kiln convert stores it inside safetensors __metadata__). Values of
// the wrong type are treated as absent, exactly like GgufFile's typed getters.
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

namespace kiln::tokenizer {
namespace {

constexpr const char* kSpmSpace = "\xE2\x96\x81";  // U+2581

// Typed reads over the lookup, with GgufFile's semantics (gguf.cc get_*).
class Meta {
public:
    Meta(const GgufLookup& find, const std::string& source) : find_(find), source_(source) {}
    const std::string& path() const { return source_; }

    const formats::GgufValue* find(const std::string& key) const { return find_ ? find_(key) : nullptr; }
    std::optional<std::string> get_string(const std::string& key) const {
        const formats::GgufValue* v = find(key);
        if (!v || v->type != formats::GgufType::kString) return std::nullopt;
        return v->s;
    }
    std::optional<int64_t> get_int(const std::string& key) const {
        const formats::GgufValue* v = find(key);
        return v ? v->as_int() : std::nullopt;
    }
    std::optional<bool> get_bool(const std::string& key) const {
        const formats::GgufValue* v = find(key);
        if (!v || v->type != formats::GgufType::kBool) return std::nullopt;
        return v->u != 0;
    }
    // The items of an array of strings (nullptr if absent or of another element type).
    const std::vector<formats::GgufValue>* get_string_array(const std::string& key) const {
        const formats::GgufValue* v = find(key);
        if (!v || v->type != formats::GgufType::kArray || v->elem_type != formats::GgufType::kString) return nullptr;
        for (const formats::GgufValue& x : v->array)
            if (x.type != formats::GgufType::kString) return nullptr;
        return &v->array;
    }
    // A numeric array converted with `conv` (as_int / as_float); nullopt if any item does not convert.
    template <typename T, typename Conv>
    std::optional<std::vector<T>> get_numeric_array(const std::string& key, Conv conv) const {
        const formats::GgufValue* v = find(key);
        if (!v || v->type != formats::GgufType::kArray || v->elem_type == formats::GgufType::kBool) return std::nullopt;
        std::vector<T> out;
        out.reserve(v->array.size());
        for (const formats::GgufValue& x : v->array) {
            auto y = conv(x);
            if (!y) return std::nullopt;
            out.push_back(T(*y));
        }
        return out;
    }

private:
    const GgufLookup& find_;
    const std::string& source_;
};

// Reads an optional token id key; absent -> `fallback`.
core::Result<int32_t> read_id(const Meta& g, const std::string& key, int32_t fallback, size_t n) {
    std::optional<int64_t> v = g.get_int(key);
    if (!v) return (fallback >= 0 && size_t(fallback) < n) ? fallback : -1;
    if (*v < 0 || uint64_t(*v) >= n)
        return core::error(core::StatusCode::kCorrupt)
               << g.path() << ": " << key << " = " << *v << " is outside the vocabulary (" << n << " tokens)";
    return int32_t(*v);
}

core::Status load_merges(const Meta& g, TokenizerState& s) {
    const std::vector<formats::GgufValue>* merges = g.get_string_array("tokenizer.ggml.merges");
    if (!merges)
        return core::error(core::StatusCode::kCorrupt) << g.path() << ": byte-level BPE vocabulary without "
                                                       << "tokenizer.ggml.merges (or not an array of strings)";
    std::string joined;
    for (size_t i = 0; i < merges->size(); ++i) {
        const std::string& m = (*merges)[i].s;
        size_t sp = m.find(' ', 1);
        if (sp == std::string::npos) continue;  // llama.cpp skips these as well
        std::string_view a = std::string_view(m).substr(0, sp), b = std::string_view(m).substr(sp + 1);
        joined.assign(a);
        joined.append(b);
        int32_t ia = s.find(a), ib = s.find(b), im = s.find(joined);
        if (ia >= 0 && ib >= 0 && im >= 0) s.pairs.insert(ia, ib, int32_t(i), im);
    }
    return core::Status::ok();
}

core::Status load_vocab(const Meta& g, TokenizerState& s) {
    const std::vector<formats::GgufValue>* tokens = g.get_string_array("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty())
        return core::error(core::StatusCode::kCorrupt)
               << g.path() << ": tokenizer.ggml.tokens is missing, empty or not an array of strings";
    const size_t n = tokens->size();
    s.tokens.reserve(n);
    for (const formats::GgufValue& t : *tokens) s.tokens.push_back(t.s);
    for (size_t i = 0; i < n; ++i)
        if (s.tokens[i].empty()) s.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    if (std::optional<std::vector<int64_t>> types = g.get_numeric_array<int64_t>(
            "tokenizer.ggml.token_type", [](const formats::GgufValue& x) { return x.as_int(); })) {
        if (types->size() != n)
            return core::error(core::StatusCode::kCorrupt) << g.path() << ": tokenizer.ggml.token_type has "
                                                           << types->size() << " entries for " << n << " tokens";
        s.types.resize(n);
        for (size_t i = 0; i < n; ++i)
            s.types[i] = ((*types)[i] >= 0 && (*types)[i] <= 6) ? TokenType((*types)[i]) : TokenType::kUndefined;
    }
    if (std::optional<std::vector<float>> scores = g.get_numeric_array<float>(
            "tokenizer.ggml.scores", [](const formats::GgufValue& x) { return x.as_float(); })) {
        if (scores->size() != n)
            return core::error(core::StatusCode::kCorrupt)
                   << g.path() << ": tokenizer.ggml.scores has " << scores->size() << " entries for " << n << " tokens";
        s.scores = std::move(*scores);
    }
    if (s.types.empty()) s.types.assign(n, TokenType::kNormal);
    s.token_to_id.reserve(n);
    for (size_t i = 0; i < n; ++i) s.token_to_id.emplace(s.tokens[i], int32_t(i));
    for (size_t i = 0; i < n; ++i) {
        TokenType t = s.types[i];
        if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown)
            s.added.push_back({int32_t(i), s.tokens[i], t != TokenType::kUserDefined});
    }
    return core::Status::ok();
}

}  // namespace

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const formats::GgufFile& gguf) {
    return from_gguf_metadata([&gguf](const std::string& key) { return gguf.find(key); }, gguf.path());
}

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf_metadata(const GgufMetadataList& metadata,
                                                                       const std::string& source) {
    // A handful of lookups over a few dozen keys: a linear scan beats building an index. The first
    // occurrence of a key wins, as in GgufFile (which rejects duplicates).
    return from_gguf_metadata(
        [&metadata](const std::string& key) -> const formats::GgufValue* {
            for (const auto& [k, v] : metadata)
                if (k == key) return &v;
            return nullptr;
        },
        source);
}

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf_metadata(const GgufLookup& find,
                                                                       const std::string& source) {
    const Meta g(find, source);
    std::optional<std::string> model = g.get_string("tokenizer.ggml.model");
    if (!model) return core::error(core::StatusCode::kNotFound) << g.path() << ": no tokenizer.ggml.model key";
    auto s = std::make_unique<TokenizerState>();
    KILN_RETURN_IF_ERROR(load_vocab(g, *s));
    const size_t n = s->tokens.size();
    bool add_bos = false;
    if (*model == "llama") {
        s->kind = ModelKind::kSpm;
        s->pre_name = "none";
        bool add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
        s->normalizers.push_back({NormalizerStep::Kind::kReplace, " ", kSpmSpace});
        if (add_space_prefix) s->normalizers.push_back({NormalizerStep::Kind::kPrepend, "", kSpmSpace});
        s->strip_prefix_space = add_space_prefix;
        s->byte_fallback = true;
        add_bos = true;
        KILN_ASSIGN_OR_RETURN(s->bos_id, read_id(g, "tokenizer.ggml.bos_token_id", 1, n));
        KILN_ASSIGN_OR_RETURN(s->eos_id, read_id(g, "tokenizer.ggml.eos_token_id", 2, n));
        KILN_ASSIGN_OR_RETURN(s->unk_id, read_id(g, "tokenizer.ggml.unknown_token_id", 0, n));
        s->build_score_pairs();
    } else if (*model == "gpt2") {
        s->kind = ModelKind::kBpe;
        s->pre_name = g.get_string("tokenizer.ggml.pre").value_or("default");
        auto pre = gguf_pre_tokenizer(s->pre_name);
        if (!pre.is_ok()) return core::error(pre.status().code()) << g.path() << ": " << pre.status().message();
        for (const std::string& re : pre->regexes) {
            KILN_ASSIGN_OR_RETURN(auto sp, Splitter::compile(re, false, SplitBehavior::kIsolated, false));
            s->splitters.push_back(std::move(sp));
        }
        s->ignore_merges = pre->ignore_merges;
        add_bos = pre->add_bos;
        KILN_ASSIGN_OR_RETURN(s->bos_id, read_id(g, "tokenizer.ggml.bos_token_id", -1, n));
        KILN_ASSIGN_OR_RETURN(s->eos_id, read_id(g, "tokenizer.ggml.eos_token_id", -1, n));
        KILN_ASSIGN_OR_RETURN(s->unk_id, read_id(g, "tokenizer.ggml.unknown_token_id", -1, n));
        KILN_RETURN_IF_ERROR(load_merges(g, *s));
    } else {
        return core::error(core::StatusCode::kUnsupported)
               << g.path() << ": tokenizer.ggml.model '" << *model << "' is not supported (known: llama, gpt2)";
    }
    add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(add_bos);
    bool add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    if (add_bos && s->bos_id < 0)
        return core::error(core::StatusCode::kCorrupt) << g.path() << ": add_bos is on but there is no BOS token id";
    if (add_eos && s->eos_id < 0)
        return core::error(core::StatusCode::kCorrupt) << g.path() << ": add_eos is on but there is no EOS token id";
    if (add_bos) s->prefix_ids.push_back(s->bos_id);
    if (add_eos) s->suffix_ids.push_back(s->eos_id);
    s->chat_template = g.get_string("tokenizer.chat_template").value_or("");
    KILN_RETURN_IF_ERROR(s->finalize(g.path()));
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(s)));
}

}  // namespace kiln::tokenizer
