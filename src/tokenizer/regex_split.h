// Pre-tokenizer regex splitting with PCRE2 (UTF + UCP: \p{L}, \p{N}, \s follow Unicode).
//
// A Splitter cuts every current piece of text into the regex matches and the gaps between them,
// like HF tokenizers' Split pre-tokenizer (behaviours Isolated / Removed / MergedWithPrevious /
// MergedWithNext, optional invert) and like llama.cpp's unicode_regex_split, which applies a list
// of regexes one after the other, each to every piece left by the previous one (matches never
// cross piece boundaries, and unmatched gaps stay pieces). Invalid UTF-8 never fails: it is
// matched in PCRE2_MATCH_INVALID_UTF mode, where invalid bytes match no pattern and end up in gaps.
//
// Also the table of llama.cpp pre-tokenizer names (GGUF tokenizer.ggml.pre) -> regex lists.
// A compiled Splitter is immutable and safe to use from many threads (match data is per call).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln::tokenizer {

// A piece of the text being tokenized: byte offsets [begin, end).
struct Span {
    uint32_t begin;
    uint32_t end;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

class Splitter {
public:
    // `pattern` is a PCRE2 regex (literal text when `literal`).
    static core::Result<std::unique_ptr<Splitter>> compile(const std::string& pattern, bool literal,
                                                           SplitBehavior behavior, bool invert);
    ~Splitter();
    Splitter(const Splitter&) = delete;
    Splitter& operator=(const Splitter&) = delete;

    // Splits each span of `in` (offsets into `text`) and appends the resulting spans to `out`.
    void split(std::string_view text, const std::vector<Span>& in, std::vector<Span>& out) const;
    const std::string& pattern() const { return pattern_; }

private:
    Splitter() = default;
    void split_one(std::string_view text, Span span, void* match_data, void* match_context,
                   std::vector<Span>& out) const;

    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
    SplitBehavior behavior_ = SplitBehavior::kIsolated;
    bool invert_ = false;
};

// The regexes llama.cpp applies for a GGUF tokenizer.ggml.pre name (in order), or kUnsupported
// with a message listing the supported names. `ignore_merges` and `add_bos` get llama.cpp's
// per-name defaults.
struct GgufPreTokenizer {
    std::vector<std::string> regexes;
    bool ignore_merges = false;
    bool add_bos = false;
};
core::Result<GgufPreTokenizer> gguf_pre_tokenizer(const std::string& name);
std::string gguf_pre_tokenizer_names();  // comma-separated, for error messages and --help (supported only)
std::vector<std::string> gguf_pre_tokenizer_list();  // every name llama.cpp knows, supported or not

// HF ByteLevel's built-in GPT-2 pattern (use_regex = true).
extern const char* const kGpt2Pattern;

}  // namespace kiln::tokenizer
