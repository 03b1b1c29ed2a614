// libFuzzer target for encode/decode on real vocabularies. Two tokenizers are loaded once:
// $KILN_FUZZ_TOKENIZER (default <testdata>/vocab/ggml-vocab-llama-bpe.gguf) and
// $KILN_FUZZ_TOKENIZER_SPM (default <testdata>/vocab/ggml-vocab-llama-spm.gguf), where <testdata> is
// $KILN_TESTDATA or /work/shared/testdata; a missing file is reported once and skipped. The input is
// text, encoded with parse_special off and on, then decoded (whole and streamed). Properties, whose
// failure traps so libFuzzer reports the input:
//  - every id is inside the vocabulary;
//  - byte-level BPE from GGUF (no normalizer): decode(encode(x)) == x for every x, and decoding with
//    skip_special drops exactly the BOS that add_special put in front;
//  - SentencePiece-style: decode(encode(x)) == x when x is valid UTF-8, holds no U+2581 (decoded as a
//    space, as sentencepiece does) and no control-token text (each text segment gets its own dummy
//    prefix, as in llama.cpp);
//  - when decode(ids) is valid UTF-8, the StreamDecoder's output equals it.
// Corpus: tests/fuzz/corpus/tokenizer_encode (scripts/gen_tokenizer_seeds.py).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using kiln::tokenizer::StreamDecoder;
using kiln::tokenizer::Tokenizer;

namespace {

struct Loaded {
    std::string path;
    std::unique_ptr<Tokenizer> tok;
    bool exact;                         // byte-level BPE without normalizers: round trip for any input
    std::vector<std::string> specials;  // control / unknown token texts
};

std::string env_or(const char* name, const std::string& fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : fallback;
}

std::vector<Loaded> load_all() {
    const std::string testdata = env_or("KILN_TESTDATA", "/work/shared/testdata");
    std::vector<Loaded> out;
    for (const std::string& path : {env_or("KILN_FUZZ_TOKENIZER", testdata + "/vocab/ggml-vocab-llama-bpe.gguf"),
                                    env_or("KILN_FUZZ_TOKENIZER_SPM", testdata + "/vocab/ggml-vocab-llama-spm.gguf")}) {
        auto r = Tokenizer::load(path);
        if (!r.is_ok()) {
            std::fprintf(stderr, "tokenizer_encode_fuzz: skipping %s: %s\n", path.c_str(),
                         r.status().to_string().c_str());
            continue;
        }
        Loaded l{path, std::move(r).value(), false, {}};
        const bool gguf = path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
        l.exact = gguf && l.tok->kind() == "bpe";
        for (int32_t id = 0; id < l.tok->vocab_size(); ++id)
            if (l.tok->is_special(id)) l.specials.push_back(l.tok->token_text(id));
        out.push_back(std::move(l));
    }
    return out;
}

[[noreturn]] void fail(const Loaded& l, const char* what, std::string_view text, const std::string& got) {
    std::fprintf(stderr, "%s: %s\n  input (%zu bytes): '%.*s'\n  got   (%zu bytes): '%s'\n", l.path.c_str(), what,
                 text.size(), int(text.size()), text.data(), got.size(), got.c_str());
    __builtin_trap();
}

void check(const Loaded& l, std::string_view text) {
    const Tokenizer& tok = *l.tok;
    bool spm_exact = false;
    if (!l.exact && tok.kind() == "spm" && kiln::tokenizer::utf8_valid(text) &&
        text.find("\xE2\x96\x81") == std::string_view::npos) {
        spm_exact = true;
        for (const std::string& s : l.specials)
            if (!s.empty() && text.find(s) != std::string_view::npos) spm_exact = false;
    }
    for (bool parse_special : {false, true}) {
        std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, parse_special);
        for (int32_t id : ids)
            if (id < 0 || id >= tok.vocab_size()) fail(l, "id outside the vocabulary", text, std::to_string(id));
        const std::string decoded = tok.decode(ids);
        if ((l.exact || spm_exact) && decoded != text)
            fail(l, parse_special ? "round trip (parse_special)" : "round trip", text, decoded);
        if (kiln::tokenizer::utf8_valid(decoded)) {
            StreamDecoder sd(tok);
            std::string streamed;
            for (int32_t id : ids) streamed += sd.push(id);
            streamed += sd.flush();
            if (streamed != decoded) fail(l, "stream decode differs from decode", text, streamed);
        } else {
            StreamDecoder sd(tok);
            for (int32_t id : ids) (void)sd.push(id);
            (void)sd.flush();
        }
        if (!parse_special && (l.exact || spm_exact)) {
            // With BOS/EOS added, skip_special must give the text back.
            const std::string skipped = tok.decode(tok.encode(text, /*add_special=*/true, false), true);
            if (skipped != text) fail(l, "round trip with add_special + skip_special", text, skipped);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<Loaded> tokenizers = load_all();
    std::string_view text(reinterpret_cast<const char*>(data), size);
    for (const Loaded& l : tokenizers) check(l, text);
    return 0;
}
