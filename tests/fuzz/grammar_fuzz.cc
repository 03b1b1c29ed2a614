// libFuzzer target for the structured-output front ends: the first byte picks the reader (GBNF text,
// a regex, or a JSON Schema), the rest is its input. Whatever parses is compiled against a small
// vocabulary and walked for a few tokens, so ASan/UBSan see the parser, the converters, the static
// checks and the matcher on hostile input. Corpus: tests/fuzz/corpus/grammar.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"

using namespace kiln::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    StructuredSpec spec;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    spec.kind = data[0] % 3 == 0 ? StructuredSpec::Kind::kGrammar
                : data[0] % 3 == 1 ? StructuredSpec::Kind::kRegex
                                   : StructuredSpec::Kind::kJsonSchema;
    spec.value = text;
    kiln::core::Result<std::string> gbnf = spec_to_gbnf(spec);
    if (!gbnf.is_ok()) return 0;
    kiln::core::Result<Grammar> g = parse_gbnf(*gbnf);
    if (!g.is_ok()) return 0;
    (void)full_match(*g, text.substr(0, 64));
    static const auto vocab = std::make_shared<TokenTable>(
        std::vector<std::string>{"{", "}", "\"", "a", "ab", "1", "12", ",", ":", " ", "\\", "\xc3\xa9", "-", ".", "[", "]"},
        std::vector<bool>{});
    auto compiled = CompiledGrammar::compile(std::move(*g), vocab);
    Matcher m(compiled);
    std::vector<uint64_t> mask;
    for (size_t step = 0; step < 16 && !m.must_end(); ++step) {
        m.fill_mask(mask);
        int32_t pick = -1;
        for (int32_t id = 0; id < vocab->vocab_size(); ++id)
            if ((mask[size_t(id) >> 6] >> (id & 63)) & 1) pick = id;
        if (pick < 0 || !m.accept_token(pick)) break;
    }
    return 0;
}
