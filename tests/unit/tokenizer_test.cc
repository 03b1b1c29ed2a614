// Tokenizer tests beyond llama.cpp's vectors (those are in tokenizer_vocab_test.cc):
//  - llama2.c tokenizers: tok512.bin against the stories260K goldens, Llama-2 tokenizer.bin against
//    sentencepiece 0.2.3 (tokenizers/llama2/tokenizer.model), and the GGUF llama-spm vocabulary;
//  - HF tokenizer.json for Llama-3, Qwen3 and Mistral against HF tokenizers 0.23.3;
//  - added/special tokens with parse_special on and off, BOS/EOS policy, decode, StreamDecoder;
//  - clear errors for an unknown pre-tokenizer and for corrupt inputs.
// Expected ids were produced with the Python packages named above (tokenizers 0.23.3:
// Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids, with
// encode_special_tokens=True for the "special tokens as text" cases; sentencepiece 0.2.3:
// SentencePieceProcessor(model_file=...).encode(text)).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "support/test_support.h"
#include "tokenizer/unicode.h"

namespace kiln::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// Loaded once per test binary (loading the large tokenizer.json files dominates a debug run).
std::shared_ptr<const Tokenizer> load_or_skip(const std::string& rel) {
    static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
    if (auto it = cache.find(rel); it != cache.end()) return it->second;
    const std::string path = test::testdata(rel);
    if (!test::file_exists(path)) return nullptr;
    auto tok = Tokenizer::load(path);
    EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
    if (!tok.is_ok()) return nullptr;
    return cache[rel] = std::shared_ptr<const Tokenizer>(std::move(tok).value());
}

#define LOAD_OR_SKIP(var, rel)    \
    auto var = load_or_skip(rel); \
    if (!var) KILN_SKIP_MISSING() << "missing test data " << rel

std::string read_text(const std::string& path) {
    std::vector<uint8_t> b = test::read_file(path);
    return std::string(b.begin(), b.end());
}

struct Case {
    std::string text;
    Ids ids;
};

// Shared inputs for the HF/sentencepiece tables below.
const char* const kTexts[] = {
    "Hello world",
    " Hello  world!\n\nThe year 2024: 12345 apples.",
    "I'm sure it's 'quoted' \xE2\x80\x94 ok?",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB"
    "\xE3\x81\xA1\xE3\x81\xAF",                          // 你好，世界！こんにちは
    "\xF0\x9F\xA6\x99 llamas \xF0\x9F\x98\x80\t\ttabs",  // 🦙 llamas 😀
    "   leading spaces",
    "caf\xC3\xA9 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m",  // café naïve Ångström
    "",
};

void expect_table(const Tokenizer& tok, const std::vector<Ids>& expected, const char* what) {
    ASSERT_EQ(expected.size(), std::size(kTexts));
    for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(tok.encode(kTexts[i], false, true), expected[i])
            << what << " case " << i << ": '" << kTexts[i] << "'";
        EXPECT_EQ(tok.decode(expected[i]), kTexts[i]) << what << " decode case " << i;
    }
}

TEST(Llama2cTokenizer, Tok512MatchesStories260KGoldens) {
    LOAD_OR_SKIP(tok, "models/stories260K/tok512.bin");
    EXPECT_EQ(tok->vocab_size(), 512);
    EXPECT_EQ(tok->kind(), "spm");
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    // logits_top5_once_upon_a_time.txt: input ids (BOS + encode("Once upon a time")).
    EXPECT_EQ(tok->encode("Once upon a time"), (Ids{1, 403, 407, 261, 378}));
    EXPECT_EQ(tok->decode({1, 403, 407, 261, 378}, /*skip_special=*/true), "Once upon a time");
    EXPECT_EQ(tok->decode({1, 403, 407, 261, 378}), "<s> Once upon a time");
    // The greedy golden: its ids decode to its text.
    std::string ids_file = read_text(test::testdata("models/stories260K/greedy_empty_prompt_256.ids.txt"));
    size_t lb = ids_file.find("\nids ["), rb = ids_file.find(']', lb);
    ASSERT_NE(lb, std::string::npos);
    Ids ids;
    std::string list = ids_file.substr(lb + 6, rb - lb - 6);
    for (size_t pos = 0; pos < list.size();) {
        size_t comma = list.find(',', pos);
        ids.push_back(std::stoi(list.substr(pos, comma - pos)));
        pos = comma == std::string::npos ? list.size() : comma + 1;
    }
    ASSERT_EQ(ids.size(), 256u);
    std::string text = read_text(test::testdata("models/stories260K/greedy_empty_prompt_256.txt"));
    EXPECT_EQ(tok->decode(ids) + "\n", text);  // the golden file ends with a newline after the text
}

TEST(Llama2cTokenizer, Llama2BinMatchesSentencepiece) {
    LOAD_OR_SKIP(tok, "tokenizers/llama2/tokenizer.bin");
    EXPECT_EQ(tok->vocab_size(), 32000);
    // sentencepiece 0.2.3, tokenizers/llama2/tokenizer.model
    const std::vector<Ids> sp = {
        {15043, 3186},
        {29871, 15043, 29871, 3186,  29991, 13,    13,    1576,  1629,  29871, 29906, 29900,
         29906, 29946, 29901, 29871, 29896, 29906, 29941, 29946, 29945, 623,   793,   29889},
        {306, 29915, 29885, 1854, 372, 29915, 29879, 525, 339, 5715, 29915, 813, 3431, 29973},
        {29871, 30919, 31076, 30214, 30793, 30967, 30584, 30589, 30389, 30353, 30644, 30449},
        {29871, 243, 162, 169, 156, 11829, 294, 29871, 243, 162, 155, 131, 12, 12, 21175},
        {1678, 8236, 8162},
        {274, 28059, 1055, 30085, 345, 11260, 865, 25961},
        {},
    };
    expect_table(*tok, sp, "llama2 tokenizer.bin");
    // The GGUF llama-spm vocabulary is the same one: identical ids.
    LOAD_OR_SKIP(gguf_tok, "vocab/ggml-vocab-llama-spm.gguf");
    expect_table(*gguf_tok, sp, "ggml-vocab-llama-spm.gguf");
    EXPECT_EQ(gguf_tok->encode("Hello world"), (Ids{1, 15043, 3186}));
    EXPECT_EQ(gguf_tok->decode({1, 15043, 3186}), "<s> Hello world");
    EXPECT_EQ(gguf_tok->decode({1, 15043, 3186}, true), "Hello world");
}

TEST(HfTokenizer, Llama3MatchesHfTokenizers) {
    LOAD_OR_SKIP(tok, "tokenizers/llama3");
    EXPECT_EQ(tok->kind(), "bpe");
    EXPECT_EQ(tok->vocab_size(), 128256);
    EXPECT_EQ(tok->bos_id(), 128000);
    EXPECT_EQ(tok->eos_id(), 128001);
    EXPECT_FALSE(tok->chat_template().empty());
    const std::vector<Ids> hf = {
        {9906, 1917},
        {22691, 220, 1917, 2268, 791, 1060, 220, 2366, 19, 25, 220, 4513, 1774, 41776, 13},
        {40, 2846, 2771, 433, 596, 364, 64825, 6, 2001, 5509, 30},
        {57668, 53901, 3922, 102616, 6447, 90115},
        {9468, 99, 247, 9507, 29189, 91416, 197, 3324, 3518},
        {256, 6522, 12908},
        {936, 59958, 95980, 588, 80352, 983, 496, 86684},
        {},
    };
    expect_table(*tok, hf, "llama3");
    // This tokenizer.json's post-processor is plain ByteLevel and its config has no add_bos_token:
    // HF adds nothing, and so does kiln.
    EXPECT_EQ(tok->encode("Hello world", true), (Ids{9906, 1917}));
}

TEST(HfTokenizer, Qwen3MatchesHfTokenizers) {
    LOAD_OR_SKIP(tok, "tokenizers/qwen3");
    EXPECT_EQ(tok->kind(), "bpe");
    EXPECT_EQ(tok->bos_id(), -1);
    EXPECT_EQ(tok->eos_id(), 151645);  // <|im_end|> per tokenizer_config.json
    const std::vector<Ids> hf = {
        {9707, 1879},
        {21927, 220, 1879, 2219, 785, 1042, 220, 17, 15, 17, 19, 25, 220, 16, 17, 18, 19, 20, 40676, 13},
        {40, 2776, 2704, 432, 594, 364, 63725, 6, 1959, 5394, 30},
        {108386, 3837, 99489, 6313, 89015},
        {149955, 9323, 28089, 90316, 197, 3244, 3435},
        {256, 6388, 12621},
        {924, 58858, 94880, 586, 79252, 968, 495, 85584},
        {},
    };
    expect_table(*tok, hf, "qwen3");
    // NFC normalizer: decomposed "cafe\u0301 ta\u0300i" tokenizes as the composed text.
    EXPECT_EQ(tok->encode("cafe\xCC\x81 ta\xCC\x80i", false), (Ids{924, 58858, 128556}));
}

TEST(HfTokenizer, MistralMatchesHfTokenizers) {
    LOAD_OR_SKIP(tok, "tokenizers/mistral");
    EXPECT_EQ(tok->kind(), "spm");
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    const std::vector<Ids> hf = {
        {22557, 1526},
        {28705, 22557, 28705, 1526,  28808, 13,    13,    1014,  879,   28705, 28750, 28734,
         28750, 28781, 28747, 28705, 28740, 28750, 28770, 28781, 28782, 979,   2815,  28723},
        {315, 28742, 28719, 1864, 378, 28742, 28713, 464, 364, 4618, 28742, 1040, 3614, 28804},
        {28705, 29383, 29530, 28924, 30050, 29822, 29267, 29543, 29585, 29174, 30173, 29277},
        {28705, 243, 162, 169, 156, 17620, 293, 28705, 30575, 12, 12, 24856},
        {2287, 5374, 10599},
        {28345, 1879, 28920, 333, 15744, 817, 1042, 16707},
        {},
    };
    expect_table(*tok, hf, "mistral");
    EXPECT_EQ(tok->encode("Hello world"), (Ids{1, 22557, 1526}));  // TemplateProcessing / add_bos_token
    EXPECT_EQ(tok->encode(""), (Ids{1}));
}

TEST(SpecialTokens, ParseSpecialOnAndOff) {
    LOAD_OR_SKIP(llama3, "tokenizers/llama3");
    const std::string chat = "<|begin_of_text|>Hi<|eot_id|>";
    EXPECT_EQ(llama3->encode(chat, false, true), (Ids{128000, 13347, 128009}));
    EXPECT_EQ(llama3->encode(chat, false, false),
              (Ids{27, 91, 7413, 3659, 4424, 91, 29, 13347, 27, 91, 68, 354, 851, 91, 29}));
    EXPECT_EQ(llama3->encode("a<|start_header_id|>user<|end_header_id|>\n\nb", false),
              (Ids{64, 128006, 882, 128007, 271, 65}));
    EXPECT_TRUE(llama3->is_special(128009));
    EXPECT_FALSE(llama3->is_special(9906));
    EXPECT_EQ(llama3->decode({128000, 9906, 1917, 128009}), "<|begin_of_text|>Hello world<|eot_id|>");
    EXPECT_EQ(llama3->decode({128000, 9906, 1917, 128009}, true), "Hello world");

    LOAD_OR_SKIP(qwen3, "tokenizers/qwen3");
    // <think> / </think> are non-special added tokens: matched even with parse_special off.
    const std::string q = "<|im_start|>user\n<think>x</think><|im_end|>";
    EXPECT_EQ(qwen3->encode(q, false, true), (Ids{151644, 872, 198, 151667, 87, 151668, 151645}));
    EXPECT_EQ(qwen3->encode(q, false, false),
              (Ids{27, 91, 318, 4906, 91, 29, 872, 198, 151667, 87, 151668, 27, 91, 318, 6213, 91, 29}));

    LOAD_OR_SKIP(mistral, "tokenizers/mistral");
    EXPECT_EQ(mistral->encode("Hello<s>world</s>", false, true), (Ids{22557, 1, 1526, 2}));
    EXPECT_EQ(mistral->encode("Hello<s>world</s>", false, false),
              (Ids{22557, 28789, 28713, 28767, 9471, 700, 28713, 28767}));
    EXPECT_EQ(mistral->encode("<unk> x", false, true), (Ids{0, 28705, 1318}));
    EXPECT_EQ(mistral->encode("<unk> x", false, false), (Ids{523, 2060, 28767, 1318}));
}

TEST(SpecialTokens, GgufAddBosPolicy) {
    LOAD_OR_SKIP(llama_bpe, "vocab/ggml-vocab-llama-bpe.gguf");
    EXPECT_EQ(llama_bpe->pre(), "llama-bpe");
    EXPECT_EQ(llama_bpe->encode("Hello world"), (Ids{128000, 9906, 1917}));  // llama-bpe adds BOS by default
    LOAD_OR_SKIP(qwen2, "vocab/ggml-vocab-qwen2.gguf");
    EXPECT_EQ(qwen2->encode("Hello world"), (Ids{9707, 1879}));
    EXPECT_FALSE(qwen2->chat_template().empty());
}

// Pushes ids one at a time: every chunk is valid UTF-8 and the chunks add up to decode(ids).
void expect_streams(const Tokenizer& tok, const Ids& ids) {
    StreamDecoder dec(tok);
    std::string all;
    for (int32_t id : ids) {
        std::string chunk = dec.push(id);
        EXPECT_TRUE(utf8_valid(chunk)) << "chunk after id " << id << " is not valid UTF-8";
        all += chunk;
    }
    all += dec.flush();
    EXPECT_EQ(all, tok.decode(ids));
}

TEST(StreamDecoder, NeverSplitsACharacter) {
    LOAD_OR_SKIP(llama2, "tokenizers/llama2/tokenizer.bin");
    // 🦙 is four byte-fallback tokens: nothing comes out until the last one.
    StreamDecoder dec(*llama2);
    EXPECT_EQ(dec.push(1), "<s>");
    EXPECT_EQ(dec.push(243), "");
    EXPECT_EQ(dec.push(162), "");
    EXPECT_EQ(dec.push(169), "");
    EXPECT_EQ(dec.push(156), "\xF0\x9F\xA6\x99");
    EXPECT_EQ(dec.flush(), "");
    expect_streams(*llama2, llama2->encode(kTexts[4]));
    expect_streams(*llama2, llama2->encode(kTexts[3]));
    // An incomplete character at the end becomes U+FFFD on flush; a stray byte right away.
    StreamDecoder cut(*llama2, /*skip_special=*/true);
    EXPECT_EQ(cut.push(243), "");
    EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(cut.push(131), "\xEF\xBF\xBD");  // <0x80>: a continuation byte with no lead

    LOAD_OR_SKIP(llama3, "tokenizers/llama3");
    expect_streams(*llama3, llama3->encode(kTexts[3], false));  // CJK split across byte-level tokens
    expect_streams(*llama3, llama3->encode(kTexts[4], false));  // 🦙 = 3 tokens
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
    LOAD_OR_SKIP(tok, "tokenizers/llama3");
    const std::string text = std::string(kTexts[1]) + kTexts[3] + kTexts[4];
    const Ids expected = tok->encode(text);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 50; ++i) ok[size_t(t)] += tok->encode(text) == expected;
        });
    for (auto& th : threads) th.join();
    for (int v : ok) EXPECT_EQ(v, 50);
}

// A synthetic SentencePiece-style tokenizer.json with a Metaspace pre-tokenizer (prepend_scheme
// "first", split), byte fallback with missing byte tokens, and fuse_unk. Expected ids from HF
// tokenizers 0.23.3 on the same JSON.
TEST(HfTokenizer, MetaspaceByteFallbackAndFuseUnk) {
    const std::string dir = test::temp_dir("tokenizer_metaspace");
    test::write_file(dir + "/tokenizer.json", R"({"added_tokens": [{"id": 5, "content": "<s>", "single_word": false,
        "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
        "post_processor": null, "decoder": null,
        "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
          "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "b": 3, "\u2581a": 4, "<s>": 5, "ab": 6, "\u2581ab": 7,
                    "<0x21>": 8, "<0x3F>": 9},
          "merges": ["a b", "\u2581 a", "\u2581a b", "\u2581 ab"]}})");
    auto tok = Tokenizer::from_hf(dir);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    EXPECT_EQ((*tok)->kind(), "spm");
    EXPECT_EQ((*tok)->pre(), "Metaspace");
    const std::vector<Case> cases = {
        {"ab a b", {7, 4, 1, 3}},
        {"ab<s>ab !", {7, 5, 6, 1, 8}},
        {"  ab", {1, 7}},
        {"x?y", {1, 9, 0}},
        {"xy?x a", {1, 9, 0, 4}},
        {"", {}},
        {"<s>", {5}},
        {" <s> a", {1, 5, 4}},
    };
    for (const Case& c : cases) EXPECT_EQ((*tok)->encode(c.text, false), c.ids) << "'" << c.text << "'";
    EXPECT_EQ((*tok)->decode({7, 4, 1, 3}), "ab a b");
}

TEST(Tokenizer, InvalidUtf8RoundTrips) {
    const std::string text = "ok ÿþ bad Ã cut â endð";
    for (const char* rel : {"tokenizers/llama3", "tokenizers/llama2/tokenizer.bin", "vocab/ggml-vocab-gpt-2.gguf"}) {
        LOAD_OR_SKIP(tok, rel);
        EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << rel;
        expect_streams(*tok, tok->encode(text, false));
    }
}

core::Status load_json_status(const std::string& name, const std::string& json) {
    const std::string dir = test::temp_dir("tokenizer_" + name);
    test::write_file(dir + "/tokenizer.json", json);
    return Tokenizer::from_hf(dir).status();
}

const char* const kMiniVocab = R"("vocab": {"a": 0, "b": 1, "ab": 2})";

TEST(TokenizerErrors, UnknownPreTokenizer) {
    core::Status st =
        load_json_status("unknown_pre", std::string(R"({"model": {"type": "BPE", )") + kMiniVocab +
                                            R"(, "merges": ["a b"]}, "pre_tokenizer": {"type": "Bogus"}})");
    EXPECT_EQ(st.code(), core::StatusCode::kUnsupported);
    EXPECT_NE(st.message().find("unknown pre-tokenizer type 'Bogus'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("known: Sequence, Split, ByteLevel"), std::string::npos) << st.message();

    formats::GgufWriter w;
    w.set("tokenizer.ggml.model", formats::gguf_string("gpt2"));
    w.set("tokenizer.ggml.pre", formats::gguf_string("no-such-pre"));
    w.set("tokenizer.ggml.tokens", formats::gguf_string_array({"a", "b", "ab"}));
    w.set("tokenizer.ggml.merges", formats::gguf_string_array({"a b"}));
    std::vector<uint8_t> bytes = w.to_bytes();
    auto gguf = formats::GgufFile::parse(bytes.data(), bytes.size(), "bogus-pre.gguf");
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().to_string();
    auto tok = Tokenizer::from_gguf(*gguf);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_EQ(tok.status().code(), core::StatusCode::kUnsupported);
    const std::string& msg = tok.status().message();
    EXPECT_NE(msg.find("unknown pre-tokenizer 'no-such-pre'"), std::string::npos) << msg;
    for (const char* known : {"gpt-2", "llama-bpe", "qwen2", "smollm"})
        EXPECT_NE(msg.find(known), std::string::npos) << "error should list " << known << ": " << msg;
}

TEST(TokenizerErrors, CorruptTokenizerJson) {
    const std::string good = std::string(R"({"model": {"type": "BPE", )") + kMiniVocab + R"(, "merges": ["a b"]}})";
    EXPECT_TRUE(load_json_status("good", good).is_ok());
    EXPECT_EQ(load_json_status("truncated", good.substr(0, good.size() / 2)).code(), core::StatusCode::kCorrupt);
    EXPECT_EQ(load_json_status("not_object", "[1, 2]").code(), core::StatusCode::kCorrupt);
    EXPECT_EQ(load_json_status("no_model", "{}").code(), core::StatusCode::kCorrupt);
    EXPECT_EQ(load_json_status("vocab_type", R"({"model": {"type": "BPE", "vocab": [1], "merges": []}})").code(),
              core::StatusCode::kCorrupt);
    core::Status st = load_json_status(
        "bad_merge", std::string(R"({"model": {"type": "BPE", )") + kMiniVocab + R"(, "merges": ["a zz"]}})");
    EXPECT_EQ(st.code(), core::StatusCode::kCorrupt);
    EXPECT_NE(st.message().find("merge #0"), std::string::npos) << st.message();
    EXPECT_EQ(load_json_status("unigram", R"({"model": {"type": "Unigram", "vocab": []}})").code(),
              core::StatusCode::kUnsupported);
    EXPECT_FALSE(Tokenizer::load(test::testdata("no/such/tokenizer.json")).is_ok());
}

TEST(TokenizerErrors, CorruptLlama2cBin) {
    const std::string dir = test::temp_dir("tokenizer_llama2c_corrupt");
    std::vector<uint8_t> good = test::read_file(test::testdata("models/stories260K/tok512.bin"));
    if (good.empty()) KILN_SKIP_MISSING() << "missing tok512.bin";
    test::write_file(dir + "/truncated.bin", std::vector<uint8_t>(good.begin(), good.begin() + 1001));
    auto r = Tokenizer::from_llama2c(dir + "/truncated.bin");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), core::StatusCode::kCorrupt);
    test::write_file(dir + "/tiny.bin", std::vector<uint8_t>{1, 2});
    EXPECT_EQ(Tokenizer::from_llama2c(dir + "/tiny.bin").status().code(), core::StatusCode::kCorrupt);
}

}  // namespace
}  // namespace kiln::tokenizer
