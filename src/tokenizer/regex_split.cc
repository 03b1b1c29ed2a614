// PCRE2-backed Splitter (see regex_split.h); the GGUF pre-tokenizer table is gguf_pre_tokenizers.cc,
// whose regexes spell "(?i:'s|...)" as "(?:'[sS]|...)" (as llama.cpp does) so that Unicode case
// folding (e.g. U+017F) cannot widen it, and write every non-ASCII character as \x{...}: code points
// whose NFC form is another character (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A in
// deepseek-llm's letter class, U+F900 in afmoe's) would otherwise turn, in an editor or tool that
// normalizes text, into U+03CE, U+03B9, U+0390, U+038A, U+03A9, 'K', U+8C48, which made ranges run
// backwards (PCRE2: "range out of order") or silently widened them ("K-ℭ": U+004B..U+212D).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.h"

#include <pcre2.h>

#include <algorithm>
#include <climits>

#include "core/check.h"

namespace kiln::tokenizer {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr size_t kMinMatchLimit = size_t(1) << 16;  // backtracking steps per match attempt, short texts

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

}  // namespace kiln::tokenizer
