// Log-probabilities of a generated token for the OpenAI `logprobs` fields: log_softmax of the raw
// model logits (before logit bias, penalties, temperature and truncation — vLLM's default
// "raw_logprobs" mode), so they describe the model, not the sampling settings.
// Invariants: NaN logits count as -inf; top alternatives are sorted by descending logprob, ties by
// lower id; every returned value is <= 0 (or -inf).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kiln::sampling {

inline constexpr int32_t kMaxLogprobs = 20;  // most alternatives a request may ask for (vLLM's default cap)

struct TokenLogprobs {
    int32_t token = 0;
    float logprob = 0;                           // of `token`
    std::vector<std::pair<int32_t, float>> top;  // the num_top most likely tokens, best first
};

// `logits`: one row of raw logits (vocabulary size); `token` in [0, logits.size()); num_top in
// [0, kMaxLogprobs] (clamped to the vocabulary).
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t num_top);

}  // namespace kiln::sampling
