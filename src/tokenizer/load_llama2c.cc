// Tokenizer::from_llama2c: karpathy/llama2.c tokenizer.bin (int32 max_token_len, then per token
// f32 score, int32 byte length, bytes; the vocabulary size is whatever the file holds). llama2.c
// exports SentencePiece pieces with U+2581 written as ' ' and BOS/EOS as "\n<s>\n" / "\n</s>\n";
// they are mapped back to the SentencePiece spelling so the model behaves exactly like the GGUF
// "llama" tokenizer: ids 0 <unk>, 1 BOS, 2 EOS, <0xNN> byte tokens, dummy prefix, best-score merges.
#include <cstring>

#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

namespace kiln::tokenizer {
namespace {

constexpr const char* kSpmSpace = "\xE2\x96\x81";  // U+2581
constexpr size_t kMaxTokens = size_t(1) << 22;
constexpr int32_t kMaxTokenLen = 1 << 16;

bool is_byte_token(const std::string& t) {
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

}  // namespace

core::Result<std::unique_ptr<Tokenizer>> Tokenizer::from_llama2c(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(core::MappedFile file, core::MappedFile::open(path));
    const uint8_t* p = file.data();
    const size_t size = file.size();
    auto read_i32 = [&](size_t off) {
        int32_t v;
        std::memcpy(&v, p + off, 4);
        return v;
    };
    if (size < 4) return core::error(core::StatusCode::kCorrupt) << path << ": too short for a llama2.c tokenizer";
    int32_t max_len = read_i32(0);
    if (max_len <= 0 || max_len > kMaxTokenLen)
        return core::error(core::StatusCode::kCorrupt) << path << ": implausible max_token_length " << max_len
                                                       << " at offset 0 (not a llama2.c tokenizer.bin?)";
    auto s = std::make_unique<TokenizerState>();
    for (size_t off = 4; off < size;) {
        if (s->tokens.size() >= kMaxTokens)
            return core::error(core::StatusCode::kCorrupt) << path << ": more than " << kMaxTokens << " tokens";
        if (size - off < 8)
            return core::error(core::StatusCode::kCorrupt) << path << ": truncated token header at offset " << off;
        float score;
        std::memcpy(&score, p + off, 4);
        int32_t len = read_i32(off + 4);
        if (len < 0 || len > kMaxTokenLen || size_t(len) > size - off - 8)
            return core::error(core::StatusCode::kCorrupt)
                   << path << ": token " << s->tokens.size() << " has bad length " << len << " at offset " << off + 4;
        s->tokens.emplace_back(reinterpret_cast<const char*>(p + off + 8), size_t(len));
        s->scores.push_back(score);
        off += 8 + size_t(len);
    }
    const size_t n = s->tokens.size();
    if (n < 3) return core::error(core::StatusCode::kCorrupt) << path << ": only " << n << " tokens";
    s->types.assign(n, TokenType::kNormal);
    s->tokens[0] = "<unk>";
    s->tokens[1] = "<s>";
    s->tokens[2] = "</s>";
    s->types[0] = TokenType::kUnknown;
    s->types[1] = s->types[2] = TokenType::kControl;
    for (size_t i = 3; i < n; ++i) {
        std::string& t = s->tokens[i];
        if (is_byte_token(t)) {
            s->types[i] = TokenType::kByte;
            continue;
        }
        for (size_t pos; (pos = t.find(' ')) != std::string::npos;) t.replace(pos, 1, kSpmSpace);
    }
    for (int32_t id = 0; id < 3; ++id) s->added.push_back({id, s->tokens[size_t(id)], true});
    s->kind = ModelKind::kSpm;
    s->normalizers.push_back({NormalizerStep::Kind::kReplace, " ", kSpmSpace});
    s->normalizers.push_back({NormalizerStep::Kind::kPrepend, "", kSpmSpace});
    s->strip_prefix_space = true;
    s->unk_id = 0;
    s->bos_id = 1;
    s->eos_id = 2;
    s->prefix_ids = {1};
    KILN_RETURN_IF_ERROR(s->finalize(path));
    s->build_score_pairs();
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(s)));
}

}  // namespace kiln::tokenizer
