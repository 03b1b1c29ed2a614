// TokenizerState: everything a loaded tokenizer knows, filled in by one of the loaders
// (load_gguf.cc, load_hf.cc, load_llama2c.cc) and then frozen by finalize(). Internal to
// src/tokenizer; the public face is tokenizer.h.
//
// Text pipeline per text segment (the runs between matched added tokens), in order:
//   normalizers (Prepend / PrependFirst / PrependSpace / Replace / NFC)
//   -> splitters (regex pre-tokenizers, applied one after the other)
//   -> per piece: initial symbols (bytes for byte-level, characters with byte fallback for spm)
//   -> bpe_merge over `pairs`.
// Invariants after finalize(): tokens, types and token_to_id agree; every id stored anywhere
// (pairs, added, byte_token, bos/eos, prefix/suffix) is < tokens.size() or -1.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe_merge.h"
#include "tokenizer/regex_split.h"

namespace kiln::tokenizer {

// GGUF tokenizer.ggml.token_type values (llama.cpp llama_token_type).
enum class TokenType : uint8_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

enum class ModelKind { kSpm, kBpe };

struct NormalizerStep {
    enum class Kind {
        kPrepend,                // prepend `to` to every non-empty segment (HF Prepend normalizer)
        kPrependIfMissing,       // ... unless the segment starts with `to` (HF Metaspace, ByteLevel prefix space)
        kPrependIfMissingFirst,  // ... and only if the segment starts the text (Metaspace prepend_scheme "first")
        kReplace,                // replace every occurrence of literal `from` with `to`
        kNfc,                    // Unicode NFC
    };
    Kind kind;
    std::string from, to;
};

struct AddedToken {
    int32_t id;
    std::string text;
    bool special;                         // control: matched only when parse_special, dropped by decode(skip_special)
    bool lstrip = false, rstrip = false;  // absorb whitespace to the left / right of the match
};

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct TokenizerState {
    ModelKind kind = ModelKind::kSpm;
    std::string pre_name = "none";
    std::vector<std::string> tokens;  // id -> vocabulary string
    std::vector<TokenType> types;     // id -> type
    std::vector<float> scores;        // spm: id -> score (empty for rank-based vocabularies)
    TokenMap token_to_id;             // built by finalize() unless a loader filled it
    PairTable pairs;

    std::vector<AddedToken> added;
    std::vector<NormalizerStep> normalizers;
    std::vector<std::unique_ptr<Splitter>> splitters;
    bool ignore_merges = false;  // a piece that is a whole token is emitted without merging (Llama-3)
    bool byte_fallback = true;   // spm: unknown characters -> <0xNN> tokens (else the unknown token)
    bool fuse_unk = false;       // consecutive unknown characters -> one unknown token
    int32_t unk_id = -1;
    bool strip_prefix_space = false;  // spm decode: the first text piece loses its dummy-prefix space

    int32_t bos_id = -1, eos_id = -1;
    std::vector<int32_t> prefix_ids, suffix_ids;  // added by encode(add_special)
    std::string chat_template;

    // Derived by finalize().
    std::array<int32_t, 256> byte_token{};                 // spm: <0xNN> ids; bpe: id of the byte's alphabet character
    std::array<std::string, 256> byte_chars;               // bpe: UTF-8 of each byte's alphabet character
    std::array<int32_t, 128> ascii_token{};                // spm: id of each ASCII character's token (-1 if none)
    std::array<std::vector<uint32_t>, 256> added_by_byte;  // indices into `added`, longest first

    // Builds the lookup tables and checks the invariants; `source` names the file in errors.
    core::Status finalize(const std::string& source);
    // SentencePiece pair table from scores: every normal token that splits into two normal /
    // user-defined tokens is a merge, ranked by the dense rank of its score (best score = 0).
    void build_score_pairs();
    int32_t find(std::string_view text) const {
        auto it = token_to_id.find(text);
        return it == token_to_id.end() ? -1 : it->second;
    }
};

}  // namespace kiln::tokenizer
