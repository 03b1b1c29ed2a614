// Random sampling inputs for the tests of kernels/ref/sample.h and kernels/cuda/sample.h: logits
// with exact ties, -inf and NaN; valid SamplingParams over every knob; histories with repeats and
// ids outside the vocabulary.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "sampling/sampling_params.h"

namespace kiln::test {

// Normal logits; some rounded to a coarse grid (exact ties), some -inf, an occasional NaN.
inline std::vector<float> random_logits(int32_t n, std::mt19937_64& rng) {
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> v = std::vector<float>(size_t(n));
    for (float& x : v) {
        x = nd(rng);
        const float r = u(rng);
        if (r < 0.2f) x = std::round(x * 2.0f) / 2.0f;
        if (r > 0.97f) x = -std::numeric_limits<float>::infinity();
        if (r > 0.995f) x = std::numeric_limits<float>::quiet_NaN();
    }
    return v;
}

inline sampling::SamplingParams random_params(int32_t vocab, std::mt19937_64& rng) {
    auto pick = [&](auto... v) {
        const std::vector<std::common_type_t<decltype(v)...>> all{v...};
        return all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng)];
    };
    sampling::SamplingParams p;
    p.temperature = pick(0.0f, 0.3f, 0.7f, 1.0f, 1.0f, 1.6f);
    p.top_k = pick(0, 0, 1, 5, 40, vocab - 1, vocab);
    p.top_p = pick(1.0f, 1.0f, 0.95f, 0.8f, 0.5f, 0.1f, 1e-7f);
    p.min_p = pick(0.0f, 0.0f, 0.02f, 0.3f);
    p.repetition_penalty = pick(1.0f, 1.0f, 1.3f, 0.8f);
    p.frequency_penalty = pick(0.0f, 0.5f, -0.4f);
    p.presence_penalty = pick(0.0f, 0.7f);
    if (pick(0, 1) == 1) {
        p.logit_bias = {{int32_t(rng() % uint64_t(vocab)), 2.5f}, {int32_t(rng() % uint64_t(vocab)), -1.0f}};
        p.logit_bias.push_back(p.logit_bias.front());  // a repeat adds again
    }
    p.seed = rng();
    p.has_seed = true;
    return p;
}

// A history over the vocabulary with repeats and two ids outside it (ignored by both).
inline std::vector<int32_t> random_history(int32_t vocab, std::mt19937_64& rng) {
    std::vector<int32_t> ids = std::vector<int32_t>(size_t(rng() % 40));
    const int32_t narrow = std::max(1, std::min(vocab, 12));
    for (int32_t& id : ids) id = int32_t(rng() % uint64_t(rng() % 2 ? vocab : narrow));
    if (!ids.empty()) ids[size_t(rng() % ids.size())] = -1;
    if (ids.size() > 1) ids[size_t(rng() % ids.size())] = vocab + 3;
    return ids;
}

}  // namespace kiln::test
