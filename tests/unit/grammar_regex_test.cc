// grammar/regex.h: regex_to_gbnf against Python's re (tests/golden/data/regex_cases.json, from
// scripts/gen_regex_cases.py), format_gbnf against jsonschema's format checker and kiln's documented
// subsets (same file), and integer_range_gbnf exhaustively over [-1200, 1200] plus int64's limits.
// Every expression is compiled with parse_gbnf ("root ::= <expr>") and checked with full_match.
#include "grammar/regex.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "grammar/gbnf.h"

namespace kiln::grammar {
namespace {

using json = nlohmann::json;
using core::StatusCode;

json load_cases() {
    std::string path = std::string(__FILE__);
    path = path.substr(0, path.rfind('/')) + "/../golden/data/regex_cases.json";
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
}

// A string with its control and non-ASCII bytes escaped, for failure messages.
std::string show(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
            out += char(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        }
    }
    return out + "\"";
}

// `expr` as the whole grammar (nullopt, with a test failure, when parse_gbnf refuses it).
std::optional<Grammar> compile(const std::string& expr) {
    auto g = parse_gbnf("root ::= " + expr + "\n");
    EXPECT_TRUE(g.is_ok()) << expr << "\n" << g.status().message();
    if (!g.is_ok()) return std::nullopt;
    return std::move(g).value();
}

std::optional<Grammar> compile_regex(const std::string& pattern) {
    auto expr = regex_to_gbnf(pattern);
    EXPECT_TRUE(expr.is_ok()) << show(pattern) << ": " << expr.status().message();
    if (!expr.is_ok()) return std::nullopt;
    return compile(expr.value());
}

std::string integer_text(std::optional<int64_t> v) { return v ? std::to_string(*v) : std::string("none"); }

std::optional<Grammar> compile_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    auto expr = integer_range_gbnf(lo, hi);
    EXPECT_TRUE(expr.is_ok()) << integer_text(lo) << ".." << integer_text(hi) << ": " << expr.status().message();
    if (!expr.is_ok()) return std::nullopt;
    return compile(expr.value());
}

// ---- regex_to_gbnf ----

TEST(RegexToGbnf, MatchesPythonRe) {
    json data = load_cases();
    ASSERT_GE(data["patterns"].size(), 60u);
    size_t checked = 0;
    for (const auto& p : data["patterns"]) {
        std::string pattern = p["pattern"];
        auto expr = regex_to_gbnf(pattern);
        ASSERT_TRUE(expr.is_ok()) << show(pattern) << ": " << expr.status().message();
        auto g = compile(expr.value());
        if (!g) continue;
        for (const auto& c : p["cases"]) {
            std::string s = c["s"];
            bool expected = c["match"];
            EXPECT_EQ(full_match(*g, s), expected) << "pattern " << show(pattern) << " (GBNF " << expr.value()
                                                   << ") on " << show(s);
            ++checked;
        }
    }
    EXPECT_GE(checked, 500u);
}

TEST(RegexToGbnf, RefusesWithTheConstructNamed) {
    json data = load_cases();
    ASSERT_GE(data["refusals"].size(), 12u);
    for (const auto& r : data["refusals"]) {
        std::string pattern = r["pattern"], code = r["code"], construct = r["construct"];
        auto expr = regex_to_gbnf(pattern);
        ASSERT_FALSE(expr.is_ok()) << show(pattern) << " gave " << expr.value();
        StatusCode want = code == "unsupported" ? StatusCode::kUnsupported : StatusCode::kInvalidArgument;
        EXPECT_EQ(expr.status().code(), want) << show(pattern) << ": " << expr.status().message();
        EXPECT_NE(expr.status().message().find(construct), std::string::npos)
            << show(pattern) << ": " << expr.status().message() << " (wanted \"" << construct << "\")";
    }
}

TEST(RegexToGbnf, ErrorsGiveTheByteOffset) {
    auto offset_of = [](const std::string& pattern) {
        auto r = regex_to_gbnf(pattern);
        return r.is_ok() ? std::string("ok") : r.status().message();
    };
    EXPECT_NE(offset_of("ab(?=c)").find("at offset 2"), std::string::npos) << offset_of("ab(?=c)");
    // Offsets count bytes: "é" is two.
    EXPECT_NE(offset_of("\xC3\xA9(?<=a)").find("at offset 2"), std::string::npos) << offset_of("\xC3\xA9(?<=a)");
    EXPECT_NE(offset_of("a\xE4\xB8\xAD\\b").find("at offset 4"), std::string::npos) << offset_of("a\xE4\xB8\xAD\\b");
    EXPECT_NE(offset_of("(ab").find("at offset 0"), std::string::npos) << offset_of("(ab");
    EXPECT_NE(offset_of("xy[z-a]").find("at offset 3"), std::string::npos) << offset_of("xy[z-a]");
}

TEST(RegexToGbnf, RefusesInvalidUtf8) {
    for (std::string bad : {"a\xFF", "\xC3", "\xE4\xB8", "\xC0\x80", "\xED\xA0\x80"}) {
        auto r = regex_to_gbnf(bad);
        ASSERT_FALSE(r.is_ok()) << show(bad);
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << show(bad);
        EXPECT_NE(r.status().message().find("UTF-8"), std::string::npos) << r.status().message();
    }
}

TEST(RegexToGbnf, RepetitionBoundsAndNesting) {
    EXPECT_TRUE(regex_to_gbnf("a{10000}").is_ok());
    EXPECT_TRUE(regex_to_gbnf("a{0,10000}").is_ok());
    for (std::string big : {"a{10001}", "a{1,10001}", "a{99999999999999999999}", "a{10001,}"}) {
        auto r = regex_to_gbnf(big);
        ASSERT_FALSE(r.is_ok()) << big;
        EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << big;
    }
    std::string deep = std::string(150, '(') + "a" + std::string(150, ')');
    EXPECT_TRUE(regex_to_gbnf(deep).is_ok());
    std::string too_deep = std::string(5000, '(') + "a" + std::string(5000, ')');
    auto r = regex_to_gbnf(too_deep);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

// Repeated parts that can be empty are rewritten (no left recursion in the compiled grammar) without
// blowing up: the output stays about as long as the pattern.
TEST(RegexToGbnf, NullableRepetitionsStayLinear) {
    std::string body;
    for (int i = 0; i < 120; ++i) body += std::string(1, char('a' + i % 3)) + "?";
    for (std::string pattern : {"(" + body + ")*", "(" + body + ")+x", "(" + body + "){2}", "(" + body + "){0,3}y"}) {
        auto expr = regex_to_gbnf(pattern);
        ASSERT_TRUE(expr.is_ok()) << expr.status().message();
        EXPECT_LT(expr.value().size(), 20 * pattern.size()) << pattern.substr(0, 40);
        auto g = compile(expr.value());
        if (!g) continue;
        std::string tail = pattern.back() == 'x' ? "x" : pattern.back() == 'y' ? "y" : "";
        EXPECT_TRUE(full_match(*g, "abcabc" + tail)) << pattern.substr(0, 40);
        EXPECT_TRUE(full_match(*g, "aab" + tail)) << pattern.substr(0, 40);
        EXPECT_FALSE(full_match(*g, "abd" + tail)) << pattern.substr(0, 40);
    }
}

// The expression stands as one unit: between other elements and under a quantifier.
TEST(RegexToGbnf, EmbedsAsOneUnit) {
    const std::vector<std::string> words = {"", "a", "b", "c", "ab", "bc", "ac", "aa", "bb", "bcc", "z"};
    for (std::string pattern : {"a|bc", "ab", "a*", "[ab]", "(a|b)c?", "b?|ac", ""}) {
        auto expr = regex_to_gbnf(pattern);
        ASSERT_TRUE(expr.is_ok()) << pattern;
        auto once = compile(expr.value());
        auto between = compile("\"<\" " + expr.value() + " \">\"");
        auto twice = compile(expr.value() + "{2}");
        if (!once || !between || !twice) continue;
        for (const std::string& a : words)
            EXPECT_EQ(full_match(*between, "<" + a + ">"), full_match(*once, a)) << pattern << " on " << a;
        // E{2} accepts w iff w splits into two strings E accepts.
        for (const std::string& x : words)
            for (const std::string& y : words) {
                std::string w = x + y;
                bool expected = false;
                for (size_t i = 0; i <= w.size() && !expected; ++i)
                    expected = full_match(*once, w.substr(0, i)) && full_match(*once, w.substr(i));
                EXPECT_EQ(full_match(*twice, w), expected) << pattern << "{2} on " << w;
            }
    }
}

TEST(RegexToGbnf, EscapesOutputCharacters) {
    // Quotes, backslashes and controls in literals; class metacharacters in classes.
    auto lit = regex_to_gbnf("\"\\\\\\x01\\u2028");
    ASSERT_TRUE(lit.is_ok());
    auto g = compile(lit.value());
    ASSERT_TRUE(g.has_value());
    EXPECT_TRUE(full_match(*g, "\"\\\x01\xE2\x80\xA8"));
    EXPECT_FALSE(full_match(*g, "\"\\\x01"));
    EXPECT_EQ(lit.value().find('\x01'), std::string::npos) << "controls are written as escapes";
    auto cls = compile_regex("[\\]\\[\\-^\\\\\"]+");
    ASSERT_TRUE(cls.has_value());
    EXPECT_TRUE(full_match(*cls, "][-^\\\""));
    EXPECT_FALSE(full_match(*cls, "a"));
}

// ---- format_gbnf ----

TEST(FormatGbnf, MatchesCheckerAndSubsets) {
    json data = load_cases();
    for (const char* name : {"date", "time", "date-time", "uuid", "email", "ipv4", "ipv6", "hostname", "uri"}) {
        ASSERT_TRUE(data["formats"].contains(name)) << name;
        auto expr = format_gbnf(name);
        ASSERT_TRUE(expr.is_ok()) << name << ": " << expr.status().message();
        auto g = compile(expr.value());
        if (!g) continue;
        for (const auto& c : data["formats"][name]["cases"]) {
            std::string s = c["s"];
            bool expected = c["match"];
            EXPECT_EQ(full_match(*g, s), expected) << "format " << name << " on " << show(s);
        }
    }
}

TEST(FormatGbnf, NeedsNoJsonEscapes) {
    // The contents go between JSON quotes as they are: no '"', '\\' or control characters can match.
    for (const char* name : {"date", "time", "date-time", "uuid", "email", "ipv4", "ipv6", "hostname", "uri"}) {
        auto g = compile(format_gbnf(name).value());
        ASSERT_TRUE(g.has_value()) << name;
        for (std::string bad : {"a\"b@c.d", "a\\b@c.d", "http://x/\"", "http://x/\\", "http://x/\n"})
            EXPECT_FALSE(full_match(*g, bad)) << name << " on " << show(bad);
    }
}

TEST(FormatGbnf, RefusesOtherFormats) {
    for (const char* name : {"idn-email", "iri", "uri-reference", "json-pointer", "regex", "duration", ""}) {
        auto r = format_gbnf(name);
        ASSERT_FALSE(r.is_ok()) << name;
        EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << name;
        EXPECT_NE(r.status().message().find("\"" + std::string(name) + "\""), std::string::npos) << r.status().message();
    }
}

// ---- integer_range_gbnf ----

using Bound = std::optional<int64_t>;

TEST(IntegerRangeGbnf, ExactOverSmallIntegers) {
    const Bound none;
    std::vector<std::pair<Bound, Bound>> ranges = {
        {none, none}, {0, none},       {none, 0},       {1, none},      {none, -1},     {-1200, 1200},
        {-5, 5},      {-1000, -1},     {-999, -100},    {-100, -10},    {7, 7},         {-7, -7},
        {0, 0},       {10, 99},        {100, 199},      {101, 1099},    {-1199, -1},    {-10, 1000},
        {13, none},   {none, -13},     {-1, 1},         {999, 1001},    {1000, 1000},   {9, 10},
        {-10, -9},    {0, 1},          {-1, 0},         {none, 1000},   {-1000, none},  {123, 456},
        {-456, -123}, {-456, 123},     {1, 9},          {-9, -1},       {200, 1000},    {-1100, 1100},
        {none, 99},   {-99, none},     {19, 21},        {1001, none},   {none, -1001},  {-1200, -1200},
    };
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> pick(-1300, 1300);
    for (int i = 0; i < 30; ++i) {
        int a = pick(rng), b = pick(rng);
        ranges.push_back({std::min(a, b), std::max(a, b)});
    }
    const std::vector<std::string> malformed = {"-0", "007", "00", "01", "-01", "", "+5", "-", " 1", "1 ", "1.0", "1e3", "--1"};
    for (const auto& [lo, hi] : ranges) {
        auto g = compile_range(lo, hi);
        if (!g) continue;
        int wrong = 0;
        for (int64_t n = -1200; n <= 1200 && wrong < 5; ++n) {
            bool expected = (!lo || *lo <= n) && (!hi || n <= *hi);
            if (full_match(*g, std::to_string(n)) != expected) {
                ++wrong;
                ADD_FAILURE() << "range " << integer_text(lo) << ".." << integer_text(hi) << " on " << n << ": "
                              << integer_range_gbnf(lo, hi).value();
            }
        }
        for (const std::string& s : malformed)
            EXPECT_FALSE(full_match(*g, s)) << "range " << integer_text(lo) << ".." << integer_text(hi) << " on " << show(s);
    }
}

TEST(IntegerRangeGbnf, Int64Limits) {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    struct Case {
        Bound lo, hi;
        std::vector<std::pair<std::string, bool>> samples;
    };
    const Bound none;
    std::vector<Case> cases = {
        {kMin, kMax,
         {{"9223372036854775807", true}, {"9223372036854775808", false}, {"-9223372036854775808", true},
          {"-9223372036854775809", false}, {"0", true}, {"10000000000000000000", false}, {"-0", false},
          {"999999999999999999", true}, {"-999999999999999999", true}, {"9223372036854775799", true}}},
        {kMax - 1, none,
         {{"9223372036854775806", true}, {"9223372036854775807", true}, {"9223372036854775808", true},
          {"99999999999999999999999", false}, {"9223372036854775805", false}, {"1", false}}},
        {none, kMin + 1,
         {{"-9223372036854775807", true}, {"-9223372036854775808", true}, {"-9223372036854775806", false},
          {"-99999999999999999999", false}, {"0", false}, {"-1", false}}},
        {kMin, kMin, {{"-9223372036854775808", true}, {"-9223372036854775807", false}, {"9223372036854775808", false}}},
        {kMax, kMax, {{"9223372036854775807", true}, {"9223372036854775806", false}, {"-9223372036854775807", false}}},
        {kMin, -1, {{"-9223372036854775808", true}, {"-1", true}, {"0", false}, {"-9223372036854775809", false}}},
        {123456789012345, 123456789099999,
         {{"123456789012345", true}, {"123456789012344", false}, {"123456789099999", true},
          {"123456789100000", false}, {"123456789050000", true}, {"12345678901234", false}}},
        {-1000000000000, 1000000000000,
         {{"1000000000000", true}, {"1000000000001", false}, {"-1000000000000", true}, {"-1000000000001", false},
          {"999999999999", true}, {"-5", true}}},
    };
    for (const Case& c : cases) {
        auto g = compile_range(c.lo, c.hi);
        if (!g) continue;
        for (const auto& [s, expected] : c.samples)
            EXPECT_EQ(full_match(*g, s), expected)
                << "range " << integer_text(c.lo) << ".." << integer_text(c.hi) << " on " << s;
    }
}

TEST(IntegerRangeGbnf, RefusesAnEmptyRange) {
    auto r = integer_range_gbnf(5, 4);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    r = integer_range_gbnf(std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(IntegerRangeGbnf, StaysCompact) {
    // The digit-by-digit construction: a few hundred bytes even for the widest int64 ranges.
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    EXPECT_LT(integer_range_gbnf(kMin, kMax).value().size(), 1200u);
    // An open side stops at 19 digits (the longest int64), so a model cannot write digits forever.
    EXPECT_EQ(integer_range_gbnf(std::nullopt, std::nullopt).value(), "(\"0\" | \"-\"? [1-9] [0-9]{0,18})");
    EXPECT_EQ(integer_range_gbnf(0, std::nullopt).value(), "(\"0\" | [1-9] [0-9]{0,18})");
    EXPECT_EQ(integer_range_gbnf(7, 7).value(), "(\"7\")");
}

}  // namespace
}  // namespace kiln::grammar
