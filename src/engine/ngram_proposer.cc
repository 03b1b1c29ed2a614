// Prompt lookup (see ngram_proposer.h).
#include "engine/ngram_proposer.h"

#include <algorithm>

namespace kiln::engine {

std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int64_t max_tokens, int32_t min_n, int32_t max_n) {
    const int64_t len = int64_t(tokens.size());
    if (max_tokens <= 0 || min_n < 1) return {};
    for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
        const std::span<const int32_t> suffix = tokens.subspan(size_t(len - n));
        // The most recent earlier occurrence: it starts at j <= len - n - 1, so a token follows it.
        for (int64_t j = len - n - 1; j >= 0; --j) {
            if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
            const int64_t from = j + n, to = std::min(len, from + max_tokens);
            return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
        }
    }
    return {};
}

}  // namespace kiln::engine
