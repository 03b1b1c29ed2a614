// TokenizerState::finalize and the SentencePiece score -> pair table construction
// (see tokenizer_state.h).
#include "tokenizer/tokenizer_state.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace kiln::tokenizer {
namespace {

bool in_range(int32_t id, size_t n) {
    return id >= -1 && (id < 0 || size_t(id) < n);
}

}  // namespace

core::Status TokenizerState::finalize(const std::string& source) {
    const size_t n = tokens.size();
    if (n == 0) return core::error(core::StatusCode::kCorrupt) << source << ": empty vocabulary";
    if (n > size_t(INT32_MAX)) return core::error(core::StatusCode::kCorrupt) << source << ": vocabulary too large";
    if (types.empty()) types.assign(n, TokenType::kNormal);
    if (types.size() != n)
        return core::error(core::StatusCode::kCorrupt)
               << source << ": " << types.size() << " token types for " << n << " tokens";
    if (!scores.empty() && scores.size() != n)
        return core::error(core::StatusCode::kCorrupt)
               << source << ": " << scores.size() << " token scores for " << n << " tokens";
    if (token_to_id.empty()) {
        token_to_id.reserve(n);
        for (size_t i = 0; i < n; ++i) token_to_id.emplace(tokens[i], int32_t(i));  // first wins
    }
    for (int32_t id : {bos_id, eos_id, unk_id})
        if (!in_range(id, n))
            return core::error(core::StatusCode::kCorrupt) << source << ": special token id " << id << " out of range";
    for (const auto* list : {&prefix_ids, &suffix_ids})
        for (int32_t id : *list)
            if (id < 0 || size_t(id) >= n)
                return core::error(core::StatusCode::kCorrupt)
                       << source << ": special token id " << id << " out of range";

    byte_token.fill(-1);
    ascii_token.fill(-1);
    for (int b = 0; b < 256; ++b) {
        if (kind == ModelKind::kSpm) {
            char name[8];
            std::snprintf(name, sizeof(name), "<0x%02X>", b);
            byte_token[size_t(b)] = find(name);
            if (b < 128) ascii_token[size_t(b)] = find(std::string(1, char(b)));
        } else {
            byte_chars[size_t(b)].clear();
            utf8_append(byte_chars[size_t(b)], byte_to_unicode(uint8_t(b)));
            byte_token[size_t(b)] = find(byte_chars[size_t(b)]);
        }
    }

    for (auto& bucket : added_by_byte) bucket.clear();
    for (size_t i = 0; i < added.size(); ++i) {
        const AddedToken& t = added[i];
        if (t.id < 0 || size_t(t.id) >= n)
            return core::error(core::StatusCode::kCorrupt) << source << ": added token id " << t.id << " out of range";
        if (!t.text.empty()) added_by_byte[uint8_t(t.text[0])].push_back(uint32_t(i));
    }
    for (auto& bucket : added_by_byte)
        std::stable_sort(bucket.begin(), bucket.end(),
                         [&](uint32_t a, uint32_t b) { return added[a].text.size() > added[b].text.size(); });
    return core::Status::ok();
}

void TokenizerState::build_score_pairs() {
    const size_t n = tokens.size();
    std::vector<float> distinct;
    distinct.reserve(n);
    for (size_t i = 0; i < n; ++i)
        if (types[i] == TokenType::kNormal) distinct.push_back(scores.empty() ? 0.0f : scores[i]);
    std::sort(distinct.begin(), distinct.end(), std::greater<float>());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    auto rank_of = [&](float score) {
        auto it = std::lower_bound(distinct.begin(), distinct.end(), score, std::greater<float>());
        return int32_t(it - distinct.begin());
    };
    auto mergeable = [&](int32_t id) {
        return id >= 0 && (types[size_t(id)] == TokenType::kNormal || types[size_t(id)] == TokenType::kUserDefined);
    };
    for (size_t i = 0; i < n; ++i) {
        if (types[i] != TokenType::kNormal) continue;
        const std::string& t = tokens[i];
        int32_t rank = rank_of(scores.empty() ? 0.0f : scores[i]);
        for (size_t k = utf8_len(uint8_t(t[0])); k < t.size(); k += utf8_len(uint8_t(t[k]))) {
            int32_t a = find(std::string_view(t).substr(0, k));
            int32_t b = find(std::string_view(t).substr(k));
            if (mergeable(a) && mergeable(b)) pairs.insert(a, b, rank, int32_t(i));
        }
    }
}

}  // namespace kiln::tokenizer
