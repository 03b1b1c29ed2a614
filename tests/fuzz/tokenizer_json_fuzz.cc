// libFuzzer target for the tokenizer.json loader (Tokenizer::from_hf_json). The input is
// tokenizer.json text, optionally followed by a NUL byte and tokenizer_config.json text (JSON never
// holds a raw NUL). When it loads, a fixed set of strings (ASCII, UTF-8, invalid UTF-8, special-token
// text, whitespace runs) is encoded with and without special-token parsing, every id is checked to be
// inside the vocabulary, and the ids are decoded in one go and through a StreamDecoder; every token
// is decoded on its own too. The loader bounds the vocabulary by the input size and the normalizers'
// growth, so the work per input stays proportional to the input. Corpus: tests/fuzz/corpus/tokenizer_json
// (scripts/gen_tokenizer_seeds.py). KILN_FUZZ_VERBOSE=1 prints why each input did not load.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

using kiln::tokenizer::StreamDecoder;
using kiln::tokenizer::Tokenizer;

namespace {

const char* const kTexts[] = {
    "Hello world! It's 2024: 12345 apples.",
    "  leading\n\n\ttabs   trailing  ",
    "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\xA6\x99 na\xC3\xAFve",  // café 你好 🦙 naïve
    "bad \xFF\xFE utf-8 \xC3 cut \xE2\x82",
    "<s></s><unk><|endoftext|><|begin_of_text|><|eot_id|><mask>[CLS][SEP]",
    "\xE2\x96\x81x \xE2\x96\x81\xE2\x96\x81y \xC4\xA0z",  // ▁x ▁▁y Ġz
    "",
};

bool verbose() {
    static const bool v = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
    return v;
}

void check_ids(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // encode must only emit vocabulary ids
}

void decode_all_ways(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    volatile size_t sink = tok.decode(ids).size() + tok.decode(ids, true).size();
    StreamDecoder sd(tok);
    for (int32_t id : ids) sink = sink + sd.push(id).size();
    sink = sink + sd.flush().size();
    (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    const size_t nul = in.find('\0');
    std::string_view json = in.substr(0, nul);
    std::string_view config = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
    auto r = Tokenizer::from_hf_json(json, "fuzz/tokenizer.json", config);
    if (!r.is_ok()) {
        if (verbose()) std::fprintf(stderr, "not loaded: %s\n", r.status().to_string().c_str());
        return 0;
    }
    const Tokenizer& tok = **r;
    if (verbose()) std::fprintf(stderr, "loaded: %s, %d tokens\n", tok.kind().c_str(), int(tok.vocab_size()));
    if (tok.bos_id() >= tok.vocab_size() || tok.eos_id() >= tok.vocab_size()) __builtin_trap();
    for (const char* text : kTexts) {
        for (bool parse_special : {false, true}) {
            std::vector<int32_t> ids = tok.encode(text, /*add_special=*/true, parse_special);
            check_ids(tok, ids);
            decode_all_ways(tok, ids);
        }
    }
    // Every token alone (bounded: the vocabulary is at most as large as the input), its text
    // re-encoded for the first few, and ids outside the vocabulary (decode skips them).
    volatile size_t sink = 0;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        sink = sink + tok.piece(id, false, true).size() + tok.piece(id, true, false).size();
        if (id < 64) {
            std::vector<int32_t> ids = tok.encode(tok.token_text(id), false, true);
            check_ids(tok, ids);
            decode_all_ways(tok, ids);
        }
    }
    decode_all_ways(tok, {-1, tok.vocab_size(), INT32_MAX, INT32_MIN, tok.vocab_size() - 1, 0});
    (void)sink;
    return 0;
}
