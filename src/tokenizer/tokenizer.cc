// Tokenizer encode/decode, StreamDecoder and the loader dispatch (see tokenizer.h).
//
// encode: added-token partition (leftmost-longest) -> per text segment: normalizers, regex
// splitters, initial symbols, bpe_merge. All scratch memory is local to the call.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "formats/gguf.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/unicode.h"

namespace kiln::tokenizer {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// The byte a "<0xNN>" token stands for, or -1.
int parse_byte_token(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    if (from.empty()) return;
    std::string out;
    out.reserve(s.size() + s.size() / 4);
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos);
        out.append(to);
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
}

// Per-call scratch buffers, reused across the segments and pieces of one encode call.
struct EncodeScratch {
    std::string norm, mapped;
    std::vector<Span> spans, spans_next;
    std::vector<int32_t> ids;
    MergeScratch merge;
};

void encode_piece_bpe(const TokenizerState& s, std::string_view piece, EncodeScratch& sc, std::vector<int32_t>& out) {
    if (piece.size() == 1 && s.byte_token[uint8_t(piece[0])] >= 0) {
        out.push_back(s.byte_token[uint8_t(piece[0])]);
        return;
    }
    if (s.ignore_merges) {
        sc.mapped.clear();
        for (char c : piece) sc.mapped += s.byte_chars[uint8_t(c)];
        if (int32_t id = s.find(sc.mapped); id >= 0) {
            out.push_back(id);
            return;
        }
    }
    sc.ids.clear();
    for (char c : piece) {
        int32_t id = s.byte_token[uint8_t(c)];
        if (id < 0) id = s.unk_id;  // a byte-level vocabulary without this byte (malformed)
        if (id >= 0) sc.ids.push_back(id);
    }
    bpe_merge(s.pairs, sc.ids, sc.merge);
    out.insert(out.end(), sc.ids.begin(), sc.ids.end());
}

void encode_piece_spm(const TokenizerState& s, std::string_view piece, EncodeScratch& sc, std::vector<int32_t>& out) {
    sc.ids.clear();
    // An unknown character's <unk> is held back until the next known character, so with fuse_unk a
    // run of unknown characters (even one interrupted by byte-fallback characters, exactly as HF
    // BPE::merge_word does it) becomes one <unk>.
    bool unk_pending = false;
    auto flush_unk = [&] {
        if (unk_pending) sc.ids.push_back(s.unk_id);
        unk_pending = false;
    };
    for (size_t i = 0; i < piece.size();) {
        size_t n = std::min(utf8_len(uint8_t(piece[i])), piece.size() - i);
        int32_t id = uint8_t(piece[i]) < 128 ? s.ascii_token[uint8_t(piece[i])] : s.find(piece.substr(i, n));
        bool all_bytes = s.byte_fallback;
        for (size_t k = 0; id < 0 && k < n && all_bytes; ++k) all_bytes = s.byte_token[uint8_t(piece[i + k])] >= 0;
        if (id >= 0) {
            flush_unk();
            sc.ids.push_back(id);
        } else if (all_bytes) {
            for (size_t k = 0; k < n; ++k) sc.ids.push_back(s.byte_token[uint8_t(piece[i + k])]);
        } else if (s.unk_id >= 0 && !(unk_pending && s.fuse_unk)) {
            flush_unk();
            unk_pending = true;
        }
        i += n;
    }
    flush_unk();
    bpe_merge(s.pairs, sc.ids, sc.merge);
    out.insert(out.end(), sc.ids.begin(), sc.ids.end());
}

// Applies the normalizers; returns the text to tokenize (a view of `seg` or of sc.norm).
std::string_view normalize(const TokenizerState& s, std::string_view seg, bool starts_text, EncodeScratch& sc) {
    bool owned = false;
    auto own = [&] {
        if (!owned) sc.norm.assign(seg);
        owned = true;
    };
    for (const NormalizerStep& step : s.normalizers) {
        std::string_view cur = owned ? std::string_view(sc.norm) : seg;
        switch (step.kind) {
            case NormalizerStep::Kind::kPrependIfMissingFirst:
                if (!starts_text) break;
                [[fallthrough]];
            case NormalizerStep::Kind::kPrependIfMissing:
                if (cur.substr(0, step.to.size()) == step.to) break;
                [[fallthrough]];
            case NormalizerStep::Kind::kPrepend:
                if (cur.empty()) break;
                own();
                sc.norm.insert(0, step.to);
                break;
            case NormalizerStep::Kind::kReplace:
                if (cur.find(step.from) == std::string_view::npos) break;
                own();
                replace_all(sc.norm, step.from, step.to);
                break;
            case NormalizerStep::Kind::kNfc: {
                std::string tmp;
                if (nfc_normalize(cur, tmp)) {
                    sc.norm.swap(tmp);
                    owned = true;
                }
                break;
            }
        }
    }
    return owned ? std::string_view(sc.norm) : seg;
}

void encode_segment(const TokenizerState& s, std::string_view seg, bool starts_text, EncodeScratch& sc,
                    std::vector<int32_t>& out) {
    if (seg.empty()) return;
    std::string_view text = normalize(s, seg, starts_text, sc);
    if (text.empty()) return;
    sc.spans.assign(1, Span{0, uint32_t(text.size())});
    for (const auto& splitter : s.splitters) {
        sc.spans_next.clear();
        splitter->split(text, sc.spans, sc.spans_next);
        sc.spans.swap(sc.spans_next);
    }
    for (const Span& sp : sc.spans) {
        std::string_view piece = text.substr(sp.begin, sp.end - sp.begin);
        if (s.kind == ModelKind::kBpe)
            encode_piece_bpe(s, piece, sc, out);
        else
            encode_piece_spm(s, piece, sc, out);
    }
}

// Longest added token starting at text[pos], or -1 (index into s.added).
int64_t match_added(const TokenizerState& s, std::string_view text, size_t pos, bool parse_special) {
    for (uint32_t idx : s.added_by_byte[uint8_t(text[pos])]) {
        const AddedToken& t = s.added[idx];
        if (t.special && !parse_special) continue;
        if (text.compare(pos, t.text.size(), t.text) == 0) return idx;
    }
    return -1;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<TokenizerState> state) : s_(std::move(state)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
    const TokenizerState& s = *s_;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 8);
    if (add_special) out.insert(out.end(), s.prefix_ids.begin(), s.prefix_ids.end());
    EncodeScratch sc;
    size_t seg_begin = 0;
    for (size_t pos = 0; pos < text.size();) {
        int64_t idx = s.added_by_byte[uint8_t(text[pos])].empty() ? -1 : match_added(s, text, pos, parse_special);
        if (idx < 0) {
            ++pos;
            continue;
        }
        const AddedToken& t = s.added[size_t(idx)];
        size_t begin = pos, end = pos + t.text.size();
        if (t.lstrip)
            while (begin > seg_begin && is_space(text[begin - 1])) --begin;
        if (t.rstrip)
            while (end < text.size() && is_space(text[end])) ++end;
        encode_segment(s, text.substr(seg_begin, begin - seg_begin), seg_begin == 0, sc, out);
        out.push_back(t.id);
        seg_begin = pos = end;
    }
    encode_segment(s, text.substr(seg_begin), seg_begin == 0, sc, out);
    if (add_special) out.insert(out.end(), s.suffix_ids.begin(), s.suffix_ids.end());
    return out;
}

std::string Tokenizer::piece(int32_t id, bool skip_special, bool first) const {
    const TokenizerState& s = *s_;
    if (id < 0 || size_t(id) >= s.tokens.size()) return {};
    const std::string& text = s.tokens[size_t(id)];
    switch (s.types[size_t(id)]) {
        case TokenType::kControl:
        case TokenType::kUnknown:
            return skip_special ? std::string() : text;
        case TokenType::kUserDefined:
            return text;
        case TokenType::kByte:
            if (int b = parse_byte_token(text); s.kind == ModelKind::kSpm && b >= 0) return std::string(1, char(b));
            break;
        default:
            break;
    }
    std::string out;
    if (s.kind == ModelKind::kSpm) {
        out = text;
        replace_all(out, kSpmSpace, " ");
        if (first && s.strip_prefix_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
        return out;
    }
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        size_t n;
        int32_t cp = utf8_decode(text, i, &n);
        int32_t b = cp >= 0 ? unicode_to_byte(uint32_t(cp)) : -1;
        if (b >= 0)
            out += char(b);
        else
            out.append(text, i, n);  // not in the byte alphabet: keep as is
        i += n;
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    bool first = true;
    for (int32_t id : ids) {
        out += piece(id, skip_special, first);
        if (!(skip_special && is_special(id)) && id >= 0 && id < vocab_size()) first = false;
    }
    return out;
}

std::string Tokenizer::token_text(int32_t id) const {
    return (id >= 0 && size_t(id) < s_->tokens.size()) ? s_->tokens[size_t(id)] : std::string();
}
int32_t Tokenizer::vocab_size() const {
    return int32_t(s_->tokens.size());
}
int32_t Tokenizer::bos_id() const {
    return s_->bos_id;
}
int32_t Tokenizer::eos_id() const {
    return s_->eos_id;
}
bool Tokenizer::is_special(int32_t id) const {
    if (id < 0 || size_t(id) >= s_->types.size()) return false;
    TokenType t = s_->types[size_t(id)];
    return t == TokenType::kControl || t == TokenType::kUnknown;
}
std::string Tokenizer::kind() const {
    return s_->kind == ModelKind::kSpm ? "spm" : "bpe";
}
std::string Tokenizer::pre() const {
    return s_->pre_name;
}
const std::string& Tokenizer::chat_template() const {
    return s_->chat_template;
}

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return from_hf(path);
    std::ifstream in(path, std::ios::binary);
    if (!in) return core::error(core::StatusCode::kNotFound) << path << ": cannot open";
    char head[4] = {};
    in.read(head, 4);
    if (in.gcount() == 4 && std::string_view(head, 4) == "GGUF") {
        KILN_ASSIGN_OR_RETURN(formats::GgufFile gguf, formats::GgufFile::open(path));
        return from_gguf(gguf);
    }
    std::string_view ext = std::string_view(path).substr(path.size() >= 5 ? path.size() - 5 : 0);
    if (ext == ".json" || (in.gcount() > 0 && head[0] == '{')) return from_hf(path);
    return from_llama2c(path);
}

// Emits the complete characters of `pending`, keeping a trailing partial character.
static std::string take_complete(std::string& pending) {
    std::string out;
    size_t i = 0;
    while (i < pending.size()) {
        size_t n;
        if (utf8_decode(pending, i, &n) >= 0) {
            out.append(pending, i, n);
            i += n;
            continue;
        }
        std::string_view rest = std::string_view(pending).substr(i);
        if (utf8_incomplete_tail(rest) == rest.size()) break;  // wait for the rest of the character
        out += kReplacementChar;
        i += 1;
    }
    pending.erase(0, i);
    return out;
}

std::string StreamDecoder::push(int32_t id) {
    pending_ += tok_.piece(id, skip_special_, first_);
    if (!(skip_special_ && tok_.is_special(id)) && id >= 0 && id < tok_.vocab_size()) first_ = false;
    return take_complete(pending_);
}

std::string StreamDecoder::flush() {
    std::string out = take_complete(pending_);
    if (!pending_.empty()) out += kReplacementChar;
    pending_.clear();
    return out;
}

}  // namespace kiln::tokenizer
