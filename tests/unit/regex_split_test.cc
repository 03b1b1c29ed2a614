// The pre-tokenizer regexes (tokenizer/regex_split.h): every tokenizer.ggml.pre name kiln knows
// gives regexes that PCRE2 compiles (deepseek-llm's once did not: its letter class had ranges that an
// NFC normalization of the source had turned backwards), and deepseek-llm's letter class holds the
// letters it names and not the ASCII punctuation a normalized "K-ℭ" range swallowed.
#include "tokenizer/regex_split.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace kiln::tokenizer {
namespace {

std::vector<std::string> names() {
    std::vector<std::string> out;
    std::stringstream ss(gguf_pre_tokenizer_names());
    for (std::string n; std::getline(ss, n, ',');) out.push_back(n.substr(n.find_first_not_of(' ')));
    return out;
}

// The pieces `pattern` cuts `text` into (kIsolated: matches and the gaps between them).
std::vector<std::string> pieces(const std::string& pattern, const std::string& text) {
    auto s = Splitter::compile(pattern, false, SplitBehavior::kIsolated, false);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return {};
    std::vector<Span> out;
    (*s)->split(text, {{0, uint32_t(text.size())}}, out);
    std::vector<std::string> r;
    for (const Span& sp : out) r.push_back(text.substr(sp.begin, sp.end - sp.begin));
    return r;
}

TEST(RegexSplit, EveryPreTokenizerCompiles) {
    const std::vector<std::string> all = names();
    ASSERT_GT(all.size(), 30u);
    for (const std::string& name : all) {
        auto p = gguf_pre_tokenizer(name);
        ASSERT_TRUE(p.is_ok()) << name << ": " << p.status().to_string();
        for (const std::string& re : p->regexes) {
            auto s = Splitter::compile(re, false, SplitBehavior::kIsolated, false);
            EXPECT_TRUE(s.is_ok()) << name << ": " << s.status().to_string();
        }
    }
    EXPECT_EQ(gguf_pre_tokenizer("no-such-pre").status().code(), core::StatusCode::kUnsupported);
}

TEST(RegexSplit, DeepseekLlmLetterClass) {
    auto p = gguf_pre_tokenizer("deepseek-llm");
    ASSERT_TRUE(p.is_ok());
    ASSERT_GE(p->regexes.size(), 2u);
    const std::string& letters = p->regexes[1];
    // U+1F7D, U+1FD3, U+2126 (Ohm) and U+212A (Kelvin) are letters of the class; '_', '^' and '~'
    // (U+005F, U+005E, U+007E, inside U+004B..U+212D) are not.
    EXPECT_EQ(pieces(letters, "a\u1F7D\u1FD3\u2126\u212Ab"), (std::vector<std::string>{"a\u1F7D\u1FD3\u2126\u212Ab"}));
    EXPECT_EQ(pieces(letters, "ab_cd^e~"), (std::vector<std::string>{"ab", "_", "cd", "^", "e", "~"}));
}

}  // namespace
}  // namespace kiln::tokenizer
