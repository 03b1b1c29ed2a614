// The pre-tokenizer regexes (tokenizer/regex_split.h, gguf_pre_tokenizers.cc): every
// tokenizer.ggml.pre name llama.cpp knows either gives regexes that PCRE2 compiles (deepseek-llm's once
// did not: its letter class had ranges that an NFC normalization of the source had turned backwards)
// or is refused by name; deepseek-llm's letter class holds the letters it names and not the ASCII
// punctuation a normalized "K-ℭ" range swallowed; the digit groupings llama.cpp writes as code
// (afmoe, tiny_aya, superbpe), gpt-4o's case split and qwen35's marks cut as llama.cpp's code does.
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
    ASSERT_GT(all.size(), 80u);
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

// The pieces a pre-tokenizer's regexes cut `text` into, each regex re-splitting the previous pieces.
std::vector<std::string> pre_pieces(const std::string& pre, const std::string& text) {
    auto p = gguf_pre_tokenizer(pre);
    EXPECT_TRUE(p.is_ok()) << pre << ": " << p.status().to_string();
    if (!p.is_ok()) return {};
    std::vector<Span> spans = {{0, uint32_t(text.size())}};
    for (const std::string& re : p->regexes) {
        auto s = Splitter::compile(re, false, SplitBehavior::kIsolated, false);
        EXPECT_TRUE(s.is_ok()) << s.status().to_string();
        if (!s.is_ok()) return {};
        std::vector<Span> next;
        (*s)->split(text, spans, next);
        spans = std::move(next);
    }
    std::vector<std::string> r;
    for (const Span& sp : spans) r.push_back(text.substr(sp.begin, sp.end - sp.begin));
    return r;
}

TEST(RegexSplit, EveryNameLlamaCppKnowsRunsOrIsRefusedByName) {
    const std::vector<std::string> all = gguf_pre_tokenizer_list();
    EXPECT_GE(all.size(), 90u);  // llama.cpp 00ad355e: 90 names, with "default"
    int refused = 0;
    for (const std::string& name : all) {
        auto p = gguf_pre_tokenizer(name);
        if (p.is_ok()) {
            EXPECT_FALSE(p->regexes.empty()) << name;
            continue;
        }
        ++refused;
        EXPECT_EQ(p.status().code(), core::StatusCode::kUnsupported) << name;
        EXPECT_NE(p.status().message().find("'" + name + "'"), std::string::npos) << p.status().message();
        EXPECT_NE(p.status().message().find("not supported"), std::string::npos) << p.status().message();
    }
    EXPECT_EQ(refused, 5);  // kimi-k2, gemma4, granite-embed-multi-311m, sarvam-moe, whitespace
    auto empty = gguf_pre_tokenizer("");  // llama.cpp: missing or empty is "default"
    ASSERT_TRUE(empty.is_ok());
    EXPECT_EQ(empty->regexes, gguf_pre_tokenizer("default")->regexes);
    EXPECT_TRUE(gguf_pre_tokenizer("tekken")->add_bos);
    EXPECT_TRUE(gguf_pre_tokenizer("glm4")->ignore_merges);
    EXPECT_FALSE(gguf_pre_tokenizer("chatglm-bpe")->ignore_merges);
}

TEST(RegexSplit, DigitGroupingAsLlamaCppsCode) {
    using V = std::vector<std::string>;
    // afmoe / tiny_aya: a digit run as its leading len % 3 digits, then threes.
    EXPECT_EQ(pre_pieces("tiny_aya", "1234567"), (V{"1", "234", "567"}));
    EXPECT_EQ(pre_pieces("tiny_aya", "12 345678"), (V{"12", " ", "345", "678"}));
    EXPECT_EQ(pre_pieces("afmoe", "x1234"), (V{"x", "1", "234"}));
    // superbpe: digit runs (\p{N}+), then cut where a multiple of three ASCII digits follows.
    EXPECT_EQ(pre_pieces("superbpe", "ab 1234567 cd"), (V{"ab ", "1", "234", "567", " cd"}));
    EXPECT_EQ(pre_pieces("superbpe", "999"), (V{"999"}));
}

TEST(RegexSplit, CaseSplitAndMarks) {
    using V = std::vector<std::string>;
    // gpt-4o (o200k): an upper-case run then lower case is one piece, case changes cut words.
    EXPECT_EQ(pre_pieces("gpt-4o", "HelloWorld ABCdef"), (V{"Hello", "World", " ABCdef"}));
    // qwen35 keeps combining marks in the word; qwen2 starts a new piece at the mark.
    EXPECT_EQ(pre_pieces("qwen35", "nai\u0308ve"), (V{"nai\u0308ve"}));
    EXPECT_EQ(pre_pieces("qwen2", "nai\u0308ve"), (V{"nai", "\u0308ve"}));
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
