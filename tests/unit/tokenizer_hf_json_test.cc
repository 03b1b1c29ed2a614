// Tokenizer::from_hf_json (tokenizer.json text in memory) and the loader's limits against hostile
// input, mostly found by or written for tests/fuzz/tokenizer_json_fuzz.cc: token ids that are not
// small non-negative integers, vocabularies far larger than the file, deep Sequence nesting,
// normalizers that grow text exponentially, Metaspace after another pre-tokenizer (which the
// whole-text implementation would get wrong), and regexes with catastrophic backtracking.
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// A byte-level-free mini BPE: characters a, b, c and the merge a b -> ab.
std::string mini(const std::string& extra = "", const std::string& vocab = R"("a": 0, "b": 1, "c": 2, "ab": 3)") {
    return R"({"model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": ["a b"]})" + extra + "}";
}

core::StatusCode load_code(const std::string& json, std::string* message = nullptr) {
    auto r = Tokenizer::from_hf_json(json, "mem.json");
    if (message) *message = r.status().message();
    return r.status().code();
}

TEST(HfJson, LoadsFromMemoryWithConfig) {
    const std::string json = mini(R"(, "added_tokens": [{"id": 4, "content": "<s>", "special": true}])",
                                  R"("a": 0, "b": 1, "c": 2, "ab": 3, "<s>": 4)");
    auto plain = Tokenizer::from_hf_json(json, "mem.json");
    ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
    EXPECT_EQ((*plain)->encode("abc<s>"), (Ids{3, 2, 4}));
    EXPECT_EQ((*plain)->bos_id(), -1);

    auto with_cfg = Tokenizer::from_hf_json(json, "mem.json", R"({"add_bos_token": true, "bos_token": "<s>",
        "chat_template": "{{ x }}"})");
    ASSERT_TRUE(with_cfg.is_ok()) << with_cfg.status().to_string();
    EXPECT_EQ((*with_cfg)->bos_id(), 4);
    EXPECT_EQ((*with_cfg)->encode("abc"), (Ids{4, 3, 2}));
    EXPECT_EQ((*with_cfg)->chat_template(), "{{ x }}");

    auto bad_cfg = Tokenizer::from_hf_json(json, "mem.json", "[1]");
    EXPECT_EQ(bad_cfg.status().code(), core::StatusCode::kCorrupt);
    EXPECT_EQ(load_code("{\"model\": "), core::StatusCode::kCorrupt);
}

TEST(HfJson, SameAsFromHfOnAFile) {
    const std::string rel = "tokenizers/llama3/tokenizer.json";
    const std::string path = test::testdata(rel);
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "missing " << rel;
    std::vector<uint8_t> bytes = test::read_file(path);
    auto a = Tokenizer::from_hf(path);
    auto b = Tokenizer::from_hf_json(std::string(bytes.begin(), bytes.end()), path);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    const char* text = " Hello  world! 12345 <|eot_id|> \xE4\xBD\xA0\xE5\xA5\xBD";
    EXPECT_EQ((*a)->encode(text), (*b)->encode(text));
    EXPECT_EQ((*a)->vocab_size(), (*b)->vocab_size());
}

TEST(HfJson, TokenIdsMustBeSmallNonNegativeIntegers) {
    std::string msg;
    for (const char* id : {"-1", "1.5", "1e300", "-1e300", "\"0\"", "true", "null", "4294967296", "2147483648"}) {
        EXPECT_EQ(load_code(mini("", std::string(R"("a": 0, "b": 1, "ab": 2, "c": )") + id), &msg),
                  core::StatusCode::kCorrupt)
            << "vocab id " << id;
        EXPECT_EQ(load_code(mini(std::string(R"(, "added_tokens": [{"id": )") + id + R"(, "content": "x"}])")),
                  core::StatusCode::kCorrupt)
            << "added token id " << id;
        EXPECT_EQ(load_code(mini(std::string(R"(, "post_processor": {"type": "BertProcessing", "cls": ["a", )") + id +
                                 R"(], "sep": ["b", 1]})")),
                  core::StatusCode::kCorrupt)
            << "post-processor id " << id;
    }
    EXPECT_EQ(load_code(mini("", R"("a": 0, "b": 1, "ab": 2, "c": -1)"), &msg), core::StatusCode::kCorrupt);
    EXPECT_NE(msg.find("mem.json: vocab id -1"), std::string::npos) << msg;
}

TEST(HfJson, VocabularyBoundedByFileSize) {
    // One token with id 10^7 in a ~100-byte file would otherwise allocate 10^7 slots.
    std::string msg;
    EXPECT_EQ(load_code(mini("", R"("a": 0, "b": 1, "ab": 2, "c": 10000000)"), &msg), core::StatusCode::kCorrupt);
    EXPECT_NE(msg.find("more than a"), std::string::npos) << msg;
    // Gaps a real file could hold are fine.
    EXPECT_EQ(load_code(mini("", R"("a": 0, "b": 1, "ab": 2, "c": 200)")), core::StatusCode::kOk);
}

TEST(HfJson, DeepNestingRejected) {
    std::string pre = R"({"type": "Digits"})", norm = R"({"type": "NFC"})", post = R"({"type": "ByteLevel"})";
    for (int i = 0; i < 40; ++i) {
        pre = R"({"type": "Sequence", "pretokenizers": [)" + pre + "]}";
        norm = R"({"type": "Sequence", "normalizers": [)" + norm + "]}";
        post = R"({"type": "Sequence", "processors": [)" + post + "]}";
    }
    EXPECT_EQ(load_code(mini(", \"pre_tokenizer\": " + pre)), core::StatusCode::kUnsupported);
    EXPECT_EQ(load_code(mini(", \"normalizer\": " + norm)), core::StatusCode::kUnsupported);
    EXPECT_EQ(load_code(mini(", \"post_processor\": " + post)), core::StatusCode::kUnsupported);
}

TEST(HfJson, NormalizerGrowthBounded) {
    // Each step doubles every "a": 2^40-fold growth after 40 steps.
    std::string steps;
    for (int i = 0; i < 40; ++i)
        steps += std::string(i ? ", " : "") + R"({"type": "Replace", "pattern": {"String": "a"}, "content": "aa"})";
    std::string msg;
    EXPECT_EQ(load_code(mini(R"(, "normalizer": {"type": "Sequence", "normalizers": [)" + steps + "]}"), &msg),
              core::StatusCode::kUnsupported);
    EXPECT_NE(msg.find("grow text"), std::string::npos) << msg;
    // The real ones (Llama-2's Prepend + Replace " " -> U+2581) stay well inside the limit.
    const char* llama2 =
        R"(, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})";
    EXPECT_EQ(load_code(mini(llama2)), core::StatusCode::kOk);
}

TEST(HfJson, MetaspaceOnlyFirst) {
    std::string msg;
    EXPECT_EQ(load_code(mini(R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}]})"),
                        &msg),
              core::StatusCode::kUnsupported);
    EXPECT_NE(msg.find("Metaspace after another pre-tokenizer"), std::string::npos) << msg;
    EXPECT_EQ(load_code(mini(R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
        {"type": "Digits"}]})")),
              core::StatusCode::kOk);
}

TEST(HfJson, CatastrophicRegexStillSplits) {
    // Nested quantifiers that can never match: PCRE2's default limit would spend ~10M steps per attempt.
    // The splitter's match limit gives up early and keeps the text as one piece.
    std::string pres;
    for (int i = 0; i < 8; ++i)
        pres +=
            std::string(i ? ", " : "") +
            R"j({"type": "Split", "pattern": {"Regex": "(?:(?:\\p{L}|\\s|[.!])+)+(*FAIL)"}, "behavior": "Isolated"})j";
    auto tok = Tokenizer::from_hf_json(
        mini(R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [)" + pres + "]}"), "mem.json");
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    std::string text = "ab. ab! ";
    Ids expected = {3, 3};
    for (int i = 0; i < 16; ++i) {
        text += "ab ";
        expected.push_back(3);
    }
    text += "c";
    expected.push_back(2);
    EXPECT_EQ((*tok)->encode(text, false), expected);  // unknown characters are dropped (no unk, no fallback)
}

}  // namespace
}  // namespace kiln::tokenizer
