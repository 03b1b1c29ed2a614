// SamplingParams::validate: range checks with messages that name the field (vLLM's
// SamplingParams._verify_args is the model for which values are rejected).
#include "sampling/sampling_params.h"

#include <cmath>

#include "sampling/logprobs.h"

namespace kiln::sampling {

using core::error;
using core::StatusCode;

core::Status SamplingParams::validate(int32_t vocab_size) const {
    if (vocab_size <= 0) return error(StatusCode::kInvalidArgument) << "vocab_size must be > 0, got " << vocab_size;
    if (!std::isfinite(temperature) || temperature < 0.0f) {
        return error(StatusCode::kInvalidArgument) << "temperature must be finite and >= 0, got " << temperature;
    }
    if (top_k < -1) {
        return error(StatusCode::kInvalidArgument) << "top_k must be -1 or 0 (off) or a positive count, got " << top_k;
    }
    if (!(top_p > 0.0f && top_p <= 1.0f)) {
        return error(StatusCode::kInvalidArgument) << "top_p must be in (0, 1], got " << top_p;
    }
    if (!(min_p >= 0.0f && min_p <= 1.0f)) {
        return error(StatusCode::kInvalidArgument) << "min_p must be in [0, 1], got " << min_p;
    }
    if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
        return error(StatusCode::kInvalidArgument)
               << "repetition_penalty must be finite and > 0, got " << repetition_penalty;
    }
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
        return error(StatusCode::kInvalidArgument) << "frequency_penalty must be in [-2, 2], got " << frequency_penalty;
    }
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
        return error(StatusCode::kInvalidArgument) << "presence_penalty must be in [-2, 2], got " << presence_penalty;
    }
    for (const auto& [id, bias] : logit_bias) {
        if (id < 0 || id >= vocab_size) {
            return error(StatusCode::kInvalidArgument)
                   << "logit_bias token id " << id << " out of range [0, " << vocab_size << ")";
        }
        if (!std::isfinite(bias)) {
            return error(StatusCode::kInvalidArgument)
                   << "logit_bias for token " << id << " must be finite, got " << bias;
        }
    }
    if (logprobs < -1 || logprobs > kMaxLogprobs) {
        return error(StatusCode::kInvalidArgument)
               << "logprobs must be -1 (off) or in [0, " << kMaxLogprobs << "], got " << logprobs;
    }
    if (max_tokens < 0) return error(StatusCode::kInvalidArgument) << "max_tokens must be >= 0, got " << max_tokens;
    for (size_t i = 0; i < stop_strings.size(); ++i) {
        if (stop_strings[i].empty()) {
            return error(StatusCode::kInvalidArgument) << "stop_strings[" << i << "] is empty";
        }
    }
    for (int32_t id : stop_ids) {
        if (id < 0 || id >= vocab_size) {
            return error(StatusCode::kInvalidArgument)
                   << "stop_ids token id " << id << " out of range [0, " << vocab_size << ")";
        }
    }
    return core::Status::ok();
}

}  // namespace kiln::sampling
