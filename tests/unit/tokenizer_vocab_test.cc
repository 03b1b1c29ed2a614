// llama.cpp's tokenizer test vectors (test-tokenizer-0) against kiln's GGUF tokenizers: for each
// vocab/ggml-vocab-<name>.gguf, the .inp file holds test strings, each followed by a line
// "__ggml_vocab_test__" (so a case excludes the "\n" before the separator), and the .out file
// holds the expected ids, one line per case, encoded without BOS/EOS and without parsing special
// tokens. Every case must match exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "formats/gguf.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::tokenizer {
namespace {

struct VocabCase {
    std::string text;
    std::vector<int32_t> ids;
};

std::string read_all(const std::string& path) {
    std::vector<uint8_t> bytes = test::read_file(path);
    return std::string(bytes.begin(), bytes.end());
}

std::vector<VocabCase> read_cases(const std::string& inp_path, const std::string& out_path) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::string inp = read_all(inp_path);
    std::vector<VocabCase> cases;
    for (size_t pos = 0, hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
        cases.push_back({inp.substr(pos, hit - pos), {}});
    std::istringstream out(read_all(out_path));
    std::string line;
    for (size_t i = 0; std::getline(out, line); ++i) {
        if (i >= cases.size()) break;
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
    }
    return cases;
}

std::string escaped(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '\n')
            out += "\\n";
        else if (c == '\t')
            out += "\\t";
        else if (c == '\r')
            out += "\\r";
        else if (c < 0x20)
            out += "\\x" + std::to_string(c);
        else
            out += char(c);
    }
    return out;
}

std::string join(const std::vector<int32_t>& ids) {
    std::string out;
    for (int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
    return out;
}

class VocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabTest, MatchesLlamaCppVectors) {
    const std::string base = test::testdata(std::string("vocab/ggml-vocab-") + GetParam() + ".gguf");
    if (!test::file_exists(base)) KILN_SKIP_MISSING() << "missing " << base;
    auto gguf = formats::GgufFile::open(base);
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().to_string();
    auto tok = Tokenizer::from_gguf(*gguf);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    std::vector<VocabCase> cases = read_cases(base + ".inp", base + ".out");
    ASSERT_EQ(cases.size(), 46u) << "unexpected number of cases in " << base << ".inp";
    size_t passed = 0;
    for (const VocabCase& c : cases) {
        std::vector<int32_t> got = (*tok)->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
        if (got == c.ids) {
            ++passed;
            // Byte-exact round trip (the dummy-prefix space of SPM is dropped again by decode).
            EXPECT_EQ((*tok)->decode(got), c.text) << "decode of case '" << escaped(c.text) << "'";
            continue;
        }
        ADD_FAILURE() << GetParam() << ": case '" << escaped(c.text) << "'\n  expected: " << join(c.ids)
                      << "\n  actual:   " << join(got);
    }
    std::printf("[ vocab %s ] %zu/%zu cases passed\n", GetParam(), passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(GgmlVocab, VocabTest, ::testing::Values("llama-spm", "llama-bpe", "qwen2", "gpt-2"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                             std::string name = info.param;
                             for (char& c : name)
                                 if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                             return name;
                         });

}  // namespace
}  // namespace kiln::tokenizer
