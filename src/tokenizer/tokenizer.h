// Tokenizer: text <-> token ids for the vocabularies kiln loads.
//
// Two model kinds:
//  - "spm": SentencePiece-style BPE (Llama-2, Mistral, llama2.c). Spaces become U+2581, a dummy
//    "▁" prefix is added per the vocabulary's config, characters are merged pairwise by best score
//    (GGUF tokenizer.ggml.model "llama", llama2.c tokenizer.bin) or lowest merge rank (HF
//    tokenizer.json), and characters outside the vocabulary fall back to <0xNN> byte tokens.
//  - "bpe": byte-level BPE (GPT-2, Llama-3, Qwen2/3, SmolLM). Text is split by the pre-tokenizer
//    regex(es), each piece's bytes are written in the GPT-2 byte alphabet and merged by rank.
// Both follow llama.cpp's llm_tokenizer_spm / llm_tokenizer_bpe (tested on its ggml-vocab-*
// files) and HF tokenizers (compared on wikitext).
//
// Added tokens: control tokens (GGUF token_type 3, HF added_tokens with special=true; also the
// unknown token) are matched in the text only when parse_special is set; user-defined tokens
// (type 4, HF special=false) are always matched, as both llama.cpp and HF do. Matching is
// leftmost-longest (HF's added-vocabulary matcher) before any normalization or BPE.
//
// A Tokenizer is immutable after load; encode/decode are const and safe from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::formats {
class GgufFile;
struct GgufValue;
}  // namespace kiln::formats

namespace kiln::tokenizer {

struct TokenizerState;  // tokenizer_state.h

// GGUF metadata by key: the value, or nullptr when the key is absent. The values must stay alive
// for the duration of the from_gguf_metadata call only (the tokenizer copies what it keeps).
using GgufLookup = std::function<const formats::GgufValue*(const std::string& key)>;
// Metadata as an ordered key list (loader::GgufMetadata has this type; the first entry of a key wins).
using GgufMetadataList = std::vector<std::pair<std::string, formats::GgufValue>>;

class Tokenizer {
public:
    // tokenizer.ggml.* metadata of a GGUF file.
    static core::Result<std::unique_ptr<Tokenizer>> from_gguf(const formats::GgufFile& gguf);
    // The same tokenizer.ggml.* keys from anywhere else (e.g. the "kiln.gguf_tokenizer" metadata of
    // a converted safetensors checkpoint). `source` names the origin in error messages.
    static core::Result<std::unique_ptr<Tokenizer>> from_gguf_metadata(const GgufLookup& find,
                                                                       const std::string& source);
    static core::Result<std::unique_ptr<Tokenizer>> from_gguf_metadata(const GgufMetadataList& metadata,
                                                                       const std::string& source);
    // A tokenizer.json file, or a directory holding tokenizer.json (and optionally
    // tokenizer_config.json: add_bos_token / add_eos_token, bos_token / eos_token, chat_template).
    static core::Result<std::unique_ptr<Tokenizer>> from_hf(const std::string& path);
    // tokenizer.json text (and optionally tokenizer_config.json text; empty = none) already in
    // memory; `name` names the source in error messages. from_hf reads the files and calls this.
    static core::Result<std::unique_ptr<Tokenizer>> from_hf_json(std::string_view tokenizer_json,
                                                                 const std::string& name,
                                                                 std::string_view config_json = {});
    // A llama2.c tokenizer.bin (int32 max_token_len, then per token: f32 score, int32 len, bytes).
    static core::Result<std::unique_ptr<Tokenizer>> from_llama2c(const std::string& tokenizer_bin_path);
    // Dispatch on the path: *.gguf, a directory or *.json (HF), anything else llama2.c .bin.
    static core::Result<std::unique_ptr<Tokenizer>> load(const std::string& path);

    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // add_special: BOS/EOS (or the HF post-processor's tokens) as the vocabulary asks.
    // parse_special: control tokens written in the text become their ids (else they are text).
    std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = true) const;
    // Bytes of the ids' text (not necessarily valid UTF-8 if the ids cut a character). skip_special
    // drops control tokens. Out-of-range ids are skipped.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

    std::string token_text(int32_t id) const;  // raw vocabulary string ("" if out of range)
    int32_t vocab_size() const;
    int32_t bos_id() const;                    // -1 when none
    int32_t eos_id() const;                    // -1 when none
    bool is_special(int32_t id) const;         // control / unknown token
    std::string kind() const;                  // "spm" or "bpe"
    std::string pre() const;                   // pre-tokenizer name ("llama-bpe", "hf-split", "none", ...)
    const std::string& chat_template() const;  // empty if none

    // Bytes token `id` contributes to decoded text. `first` = nothing was emitted before it (an SPM
    // dummy-prefix space is then dropped). Used by decode and StreamDecoder.
    std::string piece(int32_t id, bool skip_special, bool first) const;

private:
    explicit Tokenizer(std::unique_ptr<TokenizerState> state);
    std::unique_ptr<TokenizerState> s_;
};

// Incremental decoding for streaming output: push() returns the text completed by one more id,
// holding back the bytes of a UTF-8 character that is not complete yet (so it never emits half a
// character). Bytes that can never form a valid character are emitted as U+FFFD. flush() returns
// what is held back (an incomplete tail becomes U+FFFD).
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false) : tok_(tok), skip_special_(skip_special) {}
    std::string push(int32_t id);
    std::string flush();

private:
    const Tokenizer& tok_;
    bool skip_special_;
    bool first_ = true;
    std::string pending_;
};

}  // namespace kiln::tokenizer
