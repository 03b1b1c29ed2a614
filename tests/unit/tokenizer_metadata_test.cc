// Tokenizer::from_gguf_metadata: the GGUF tokenizer loader fed from a key lookup instead of a
// GgufFile (the path kiln convert's "kiln.gguf_tokenizer" safetensors metadata takes). A tokenizer
// built from a copy of a GGUF file's metadata must give the same ids, specials and template as
// from_gguf on the file itself; errors name the caller's source.
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::tokenizer {
namespace {

using formats::GgufFile;
using formats::GgufValue;

const char* const kTexts[] = {
    "Hello world",
    " Hello  world!\n\nThe year 2024: 12345 apples.",
    "I'm sure it's 'quoted' \xE2\x80\x94 ok?",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",  // 你好，世界
    "\xF0\x9F\xA6\x99 llamas\t\ttabs",                               // 🦙
    "bad \xFF\xFE utf-8 \xC3",
    "<s></s><|begin_of_text|><|eot_id|>",
    "",
};

GgufMetadataList copy_metadata(const GgufFile& g) {
    GgufMetadataList out;
    for (const std::string& key : g.keys()) out.emplace_back(key, *g.find(key));
    return out;
}

void expect_same(const Tokenizer& a, const Tokenizer& b, const std::string& what) {
    EXPECT_EQ(a.vocab_size(), b.vocab_size()) << what;
    EXPECT_EQ(a.bos_id(), b.bos_id()) << what;
    EXPECT_EQ(a.eos_id(), b.eos_id()) << what;
    EXPECT_EQ(a.kind(), b.kind()) << what;
    EXPECT_EQ(a.pre(), b.pre()) << what;
    EXPECT_EQ(a.chat_template(), b.chat_template()) << what;
    for (const char* text : kTexts) {
        for (bool add_special : {false, true}) {
            for (bool parse_special : {false, true}) {
                std::vector<int32_t> ids = a.encode(text, add_special, parse_special);
                EXPECT_EQ(ids, b.encode(text, add_special, parse_special))
                    << what << ": '" << text << "' add_special=" << add_special << " parse_special=" << parse_special;
                EXPECT_EQ(a.decode(ids), b.decode(ids)) << what << ": '" << text << "'";
            }
        }
    }
    for (int32_t id = 0; id < a.vocab_size(); id += std::max(1, a.vocab_size() / 997)) {
        EXPECT_EQ(a.token_text(id), b.token_text(id)) << what << " id " << id;
        EXPECT_EQ(a.is_special(id), b.is_special(id)) << what << " id " << id;
    }
}

class GgufMetadataTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufMetadataTest, CopiedKeyListGivesSameTokenizer) {
    const std::string path = test::testdata(std::string("vocab/ggml-vocab-") + GetParam() + ".gguf");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "missing " << path;
    auto gguf = GgufFile::open(path);
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().to_string();
    auto from_file = Tokenizer::from_gguf(*gguf);
    ASSERT_TRUE(from_file.is_ok()) << from_file.status().to_string();

    // An owned copy, with the file closed before the tokenizer is used: nothing may point into it.
    GgufMetadataList copy = copy_metadata(*gguf);
    auto from_list = Tokenizer::from_gguf_metadata(copy, "copy of " + path);
    ASSERT_TRUE(from_list.is_ok()) << from_list.status().to_string();
    copy.clear();
    expect_same(**from_file, **from_list, GetParam());

    auto from_lookup = Tokenizer::from_gguf_metadata([&](const std::string& k) { return gguf->find(k); }, path);
    ASSERT_TRUE(from_lookup.is_ok()) << from_lookup.status().to_string();
    expect_same(**from_file, **from_lookup, std::string(GetParam()) + " (lookup)");
}

INSTANTIATE_TEST_SUITE_P(GgmlVocab, GgufMetadataTest, ::testing::Values("llama-spm", "llama-bpe", "qwen2", "gpt-2"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

// A tiny byte-level vocabulary written in memory, so this runs without the shared test data.
GgufMetadataList tiny_gpt2() {
    // The GPT-2 byte alphabet maps 'a'/'b'/'!' to themselves and ' ' to U+0120 (Ġ).
    return {
        {"tokenizer.ggml.model", formats::gguf_string("gpt2")},
        {"tokenizer.ggml.pre", formats::gguf_string("gpt-2")},
        {"tokenizer.ggml.tokens", formats::gguf_string_array({"a", "b", "!", "\u0120", "ab", "\u0120ab", "<eos>"})},
        {"tokenizer.ggml.token_type", formats::gguf_i32_array({1, 1, 1, 1, 1, 1, 3})},
        {"tokenizer.ggml.merges", formats::gguf_string_array({"a b", "\xC4\xA0 ab"})},
        {"tokenizer.ggml.eos_token_id", formats::gguf_u32(6)},
        {"tokenizer.ggml.add_eos_token", formats::gguf_bool(true)},
        {"tokenizer.chat_template", formats::gguf_string("{{ messages }}")},
    };
}

TEST(GgufMetadata, TinyVocabMatchesGgufFile) {
    const GgufMetadataList meta = tiny_gpt2();
    formats::GgufWriter w;
    for (const auto& [k, v] : meta) w.set(k, v);
    std::vector<uint8_t> bytes = w.to_bytes();
    auto gguf = GgufFile::parse(bytes.data(), bytes.size(), "tiny.gguf");
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().to_string();
    auto a = Tokenizer::from_gguf(*gguf);
    auto b = Tokenizer::from_gguf_metadata(meta, "tiny metadata");
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ((*b)->encode("ab ab!<eos>", true, true), (std::vector<int32_t>{4, 5, 2, 6, 6}));
    EXPECT_EQ((*b)->decode((*b)->encode("ab ab!", false)), "ab ab!");
    EXPECT_EQ((*b)->chat_template(), "{{ messages }}");
    expect_same(**a, **b, "tiny");
}

TEST(GgufMetadata, ErrorsNameTheSource) {
    // No keys at all.
    auto none = Tokenizer::from_gguf_metadata([](const std::string&) -> const GgufValue* { return nullptr; },
                                              "model.safetensors:kiln.gguf_tokenizer");
    ASSERT_FALSE(none.is_ok());
    EXPECT_EQ(none.status().code(), core::StatusCode::kNotFound);
    EXPECT_NE(none.status().message().find("model.safetensors:kiln.gguf_tokenizer"), std::string::npos)
        << none.status().message();

    // An empty lookup function is the same as no keys.
    auto empty_fn = Tokenizer::from_gguf_metadata(GgufLookup(), "nothing");
    EXPECT_EQ(empty_fn.status().code(), core::StatusCode::kNotFound);

    // Wrong types: tokens as a number, an array of ints, an array claiming strings but holding ints.
    for (GgufValue bad : {formats::gguf_u32(3), formats::gguf_i32_array({1, 2}),
                          formats::gguf_array(formats::GgufType::kString, {formats::gguf_i32(1)})}) {
        GgufMetadataList meta = tiny_gpt2();
        meta[2].second = bad;
        auto r = Tokenizer::from_gguf_metadata(meta, "bad-tokens");
        ASSERT_FALSE(r.is_ok());
        EXPECT_EQ(r.status().code(), core::StatusCode::kCorrupt);
        EXPECT_NE(r.status().message().find("bad-tokens: tokenizer.ggml.tokens"), std::string::npos)
            << r.status().message();
    }

    // An out-of-range special id and a mismatched token_type length.
    GgufMetadataList meta = tiny_gpt2();
    meta[5].second = formats::gguf_u32(7);
    EXPECT_EQ(Tokenizer::from_gguf_metadata(meta, "x").status().code(), core::StatusCode::kCorrupt);
    meta = tiny_gpt2();
    meta[3].second = formats::gguf_i32_array({1, 1});
    EXPECT_EQ(Tokenizer::from_gguf_metadata(meta, "x").status().code(), core::StatusCode::kCorrupt);

    // A duplicate key: the first one wins (GgufFile rejects duplicates; a key list may not).
    meta = tiny_gpt2();
    meta.emplace_back("tokenizer.ggml.model", formats::gguf_string("no-such-model"));
    EXPECT_TRUE(Tokenizer::from_gguf_metadata(meta, "dup").is_ok());
}

}  // namespace
}  // namespace kiln::tokenizer
