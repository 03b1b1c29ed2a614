// SamplingParams: the per-request knobs of token selection and stopping, plus validate(), which turns
// every out-of-range value a user can send into a Status naming the field (never an abort).
// Field meanings and defaults follow vLLM's SamplingParams / the OpenAI API: temperature 0 = greedy,
// top_k 0 or -1 = off, top_p 1 = off, min_p 0 = off, repetition_penalty 1 = off (HF/CTRL style),
// frequency/presence penalties in [-2, 2] (OpenAI), max_tokens default 16 (vLLM / OpenAI completions).
// Invariant: a Sampler or StopChecker is only ever built from params that passed validate().
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::sampling {

struct SamplingParams {
    float temperature = 1.0f;                           // 0 (below kGreedyTemperature) = greedy argmax
    int32_t top_k = 0;                                  // 0 or -1 = off
    float top_p = 1.0f;                                 // (0, 1]; 1 = off
    float min_p = 0.0f;                                 // [0, 1]; 0 = off
    float repetition_penalty = 1.0f;                    // > 0; over prompt + generated tokens
    float frequency_penalty = 0.0f;                     // [-2, 2]; over generated tokens only
    float presence_penalty = 0.0f;                      // [-2, 2]; over generated tokens only
    std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added to its logit); repeats add up
    uint64_t seed = 0;
    bool has_seed = false;  // false: the sampler seeds itself from std::random_device
    int32_t max_tokens = 16;
    std::vector<std::string> stop_strings;  // non-empty; excluded from the emitted text
    std::vector<int32_t> stop_ids;          // token ids that end generation (like EOS)
    bool ignore_eos = false;
    int32_t logprobs = -1;  // -1: off; 0..kMaxLogprobs: each new token's logprob plus this many alternatives

    // kOk, or kInvalidArgument with a message naming the offending field and its value.
    core::Status validate(int32_t vocab_size) const;
};

// Temperatures below this are treated as greedy (vLLM's _SAMPLING_EPS): dividing by them would overflow.
inline constexpr float kGreedyTemperature = 1e-5f;

}  // namespace kiln::sampling
