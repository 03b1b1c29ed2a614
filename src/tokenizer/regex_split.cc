// PCRE2-backed Splitter and the llama.cpp pre-tokenizer table (see regex_split.h). The regex
// strings for GGUF names are the ones llama.cpp's llm_tokenizer_bpe uses (llama-vocab.cpp), where
// "(?i:'s|...)" is spelled "(?:'[sS]|...)" so that Unicode case folding (e.g. U+017F) cannot widen it.
// Code points whose NFC form is another character (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A in
// deepseek-llm's letter class) are written as \x{...}: an editor or tool that normalizes this file
// would otherwise turn them into U+03CE, U+03B9, U+0390, U+038A, U+03A9, 'K', which made ranges
// run backwards (PCRE2: "range out of order") or, for "K-ℭ", silently span U+004B..U+212D.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.h"

#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <map>

#include "core/check.h"

namespace kiln::tokenizer {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr size_t kMinMatchLimit = size_t(1) << 16;  // backtracking steps per match attempt, short texts

constexpr const char* kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

enum class PreFamily { kDefault, kLlama3, kDbrx, kGpt2, kQwen2, kSmollm, kDeepseekLlm, kDeepseekCoder, kFalcon };

const std::map<std::string, PreFamily>& pre_names() {
    static const std::map<std::string, PreFamily> kNames = {
        {"default", PreFamily::kDefault},
        {"llama3", PreFamily::kLlama3},
        {"llama-v3", PreFamily::kLlama3},
        {"llama-bpe", PreFamily::kLlama3},
        {"falcon3", PreFamily::kLlama3},
        {"falcon-h1", PreFamily::kLlama3},
        {"pixtral", PreFamily::kLlama3},
        {"midm-2.0", PreFamily::kLlama3},
        {"lfm2", PreFamily::kLlama3},
        {"dbrx", PreFamily::kDbrx},
        {"smaug-bpe", PreFamily::kDbrx},
        {"gpt-2", PreFamily::kGpt2},
        {"phi-2", PreFamily::kGpt2},
        {"jina-es", PreFamily::kGpt2},
        {"jina-de", PreFamily::kGpt2},
        {"jina-v2-es", PreFamily::kGpt2},
        {"jina-v2-de", PreFamily::kGpt2},
        {"a.x-4.0", PreFamily::kGpt2},
        {"mellum", PreFamily::kGpt2},
        {"mpt", PreFamily::kGpt2},
        {"olmo", PreFamily::kGpt2},
        {"exaone4", PreFamily::kGpt2},
        {"qwen2", PreFamily::kQwen2},
        {"deepseek-r1-qwen", PreFamily::kQwen2},
        {"kormo", PreFamily::kQwen2},
        {"stablelm2", PreFamily::kQwen2},
        {"megrez", PreFamily::kQwen2},
        {"smollm", PreFamily::kSmollm},
        {"starcoder", PreFamily::kSmollm},
        {"refact", PreFamily::kSmollm},
        {"command-r", PreFamily::kSmollm},
        {"codeshell", PreFamily::kSmollm},
        {"exaone", PreFamily::kSmollm},
        {"minerva-7b", PreFamily::kSmollm},
        {"deepseek-llm", PreFamily::kDeepseekLlm},
        {"deepseek-coder", PreFamily::kDeepseekCoder},
        {"falcon", PreFamily::kFalcon},
    };
    return kNames;
}

std::vector<std::string> family_regexes(PreFamily f) {
    switch (f) {
        case PreFamily::kLlama3:
        case PreFamily::kDbrx:
            return {kLlama3Regex};
        case PreFamily::kGpt2:
            return {kGpt2Regex};
        case PreFamily::kQwen2:
            return {kQwen2Regex};
        case PreFamily::kSmollm:
            return {R"(\p{N})", kGpt2Regex};
        case PreFamily::kDeepseekLlm:
            return {"[\r\n]",
                    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-"
                    "ᵷᵹ-"
                    "ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-"
                    "ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-"
                    "𞥃]"
                    "+",
                    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                    "\\s+$",
                    "[一-龥ࠀ-一가-퟿]+",
                    "\\p{N}+"};
        case PreFamily::kDeepseekCoder:
            return {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"};
        case PreFamily::kFalcon:
            return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Regex, "[0-9][0-9][0-9]"};
        case PreFamily::kDefault:
            break;
    }
    return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"};
}

}  // namespace

core::Result<std::unique_ptr<Splitter>> Splitter::compile(const std::string& pattern, bool literal,
                                                          SplitBehavior behavior, bool invert) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // PCRE2_LITERAL does not combine with PCRE2_UCP (which only matters for classes anyway).
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &err_off, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return core::error(core::StatusCode::kUnsupported)
               << "pre-tokenizer regex /" << pattern << "/ does not compile at offset " << err_off << ": "
               << reinterpret_cast<const char*>(msg);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
    std::unique_ptr<Splitter> s(new Splitter());
    s->pattern_ = pattern;
    s->code_ = code;
    s->behavior_ = behavior;
    s->invert_ = invert;
    return s;
}

Splitter::~Splitter() {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Splitter::split(std::string_view text, const std::vector<Span>& in, std::vector<Span>& out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(code_), nullptr);
    pcre2_match_context* mc = pcre2_match_context_create(nullptr);
    KILN_CHECK(md != nullptr && mc != nullptr) << "out of memory for PCRE2 match data";
    // PCRE2's default match limit (10M backtracking steps per match attempt) lets a hostile
    // tokenizer.json regex (nested quantifiers) spend ~20 ms per attempt even on a few bytes of text.
    // Real pre-tokenizer regexes backtrack at most a few steps per byte (e.g. \s*[\r\n]+ over a run
    // of spaces), so a limit proportional to the text keeps them exact and bounds the rest.
    const size_t limit = std::max<size_t>(kMinMatchLimit, 64 * text.size());
    pcre2_set_match_limit(mc, uint32_t(std::min<size_t>(limit, UINT32_MAX)));
    for (const Span& span : in) split_one(text, span, md, mc, out);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
}

void Splitter::split_one(std::string_view text, Span span, void* match_data, void* match_context,
                         std::vector<Span>& out) const {
    auto* md = static_cast<pcre2_match_data*>(match_data);
    auto* mc = static_cast<pcre2_match_context*>(match_context);
    auto* code = static_cast<const pcre2_code*>(code_);
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data() + span.begin);
    const size_t len = span.end - span.begin;
    // Emits a segment according to the behaviour; `open` tracks whether the last emitted span may
    // still absorb a neighbour (a gap waiting for its delimiter, or a delimiter waiting for its gap).
    bool last_open = false;
    auto emit = [&](uint32_t b, uint32_t e, bool is_match) {
        if (b == e) return;
        if (invert_) is_match = !is_match;
        Span s{span.begin + b, span.begin + e};
        switch (behavior_) {
            case SplitBehavior::kIsolated:
                out.push_back(s);
                break;
            case SplitBehavior::kRemoved:
                if (!is_match) out.push_back(s);
                break;
            case SplitBehavior::kMergedWithPrevious:
                if (is_match && last_open)
                    out.back().end = s.end;
                else
                    out.push_back(s);
                last_open = !is_match;
                break;
            case SplitBehavior::kMergedWithNext:
                if (!is_match && last_open)
                    out.back().end = s.end;
                else
                    out.push_back(s);
                last_open = is_match;
                break;
        }
    };
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(code, subject, len, pos, PCRE2_NOTEMPTY, md, mc);
        if (rc < 0) break;  // no match (or a resource limit): the rest is a gap
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        // \K (or a lookbehind holding it) can report a match that starts before `pos` or ends where it
        // started; no real pre-tokenizer regex does, so treat the rest as a gap rather than loop.
        if (ov[0] < pos || ov[1] <= ov[0] || ov[1] > len) break;
        emit(uint32_t(pos), uint32_t(ov[0]), false);
        emit(uint32_t(ov[0]), uint32_t(ov[1]), true);
        pos = ov[1];
    }
    emit(uint32_t(pos), uint32_t(len), false);
}

core::Result<GgufPreTokenizer> gguf_pre_tokenizer(const std::string& name) {
    auto it = pre_names().find(name);
    if (it == pre_names().end())
        return core::error(core::StatusCode::kUnsupported)
               << "unknown pre-tokenizer '" << name << "' (tokenizer.ggml.pre); known: " << gguf_pre_tokenizer_names();
    GgufPreTokenizer p;
    p.regexes = family_regexes(it->second);
    p.ignore_merges = it->second == PreFamily::kLlama3;
    p.add_bos = it->second == PreFamily::kLlama3;
    return p;
}

std::string gguf_pre_tokenizer_names() {
    std::string s;
    for (const auto& [name, family] : pre_names()) s += (s.empty() ? "" : ", ") + name;
    return s;
}

}  // namespace kiln::tokenizer
