// Prompt lookup (n-gram) speculation: the draft for a sequence is what followed the most recent
// earlier occurrence of its last n tokens, for the largest n in [min_n, max_n] that occurs (Saxena,
// "Prompt Lookup Decoding", 2023; vLLM's `ngram` method). No model: it pays off when the output
// repeats its context (quoting, code edits, summaries that copy names).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::engine {

// Up to max_tokens draft tokens for `tokens` (prompt + generated); empty when no n-gram of length
// min_n..max_n ending the sequence occurred before. Deterministic; O(len * max_n).
std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int64_t max_tokens, int32_t min_n, int32_t max_n);

}  // namespace kiln::engine
