// token_logprobs: one pass for the max, one for the sum of exponentials (double), a bounded
// selection for the top alternatives (no full sort of the vocabulary).
#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::sampling {
namespace {

float clean(float x) {
    return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

// a before b in the top list: larger logit first, lower id on ties.
bool better(const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t num_top) {
    const float inf = std::numeric_limits<float>::infinity();
    float max = -inf;
    for (float x : logits) max = std::max(max, clean(x));
    TokenLogprobs r;
    r.token = token;
    if (max == -inf) {  // nothing is possible: every logprob is -inf
        r.logprob = -inf;
        for (int32_t i = 0; i < std::min<int32_t>(num_top, int32_t(logits.size())); ++i) r.top.push_back({i, -inf});
        return r;
    }
    double sum = 0;
    for (float x : logits) sum += std::exp(double(clean(x)) - double(max));
    const double lse = double(max) + std::log(sum);
    auto lp = [&](float x) { return float(double(clean(x)) - lse); };
    r.logprob = lp(logits[size_t(token)]);

    const size_t k = size_t(std::clamp<int32_t>(num_top, 0, int32_t(logits.size())));
    if (k == 0) return r;
    // A heap of the k best so far (its front is the worst of them).
    std::vector<std::pair<int32_t, float>> heap;
    heap.reserve(k + 1);
    for (size_t i = 0; i < logits.size(); ++i) {
        std::pair<int32_t, float> c{int32_t(i), clean(logits[i])};
        if (heap.size() < k) {
            heap.push_back(c);
            std::push_heap(heap.begin(), heap.end(), better);
        } else if (better(c, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), better);
            heap.back() = c;
            std::push_heap(heap.begin(), heap.end(), better);
        }
    }
    std::sort(heap.begin(), heap.end(), better);
    for (auto& [id, x] : heap) x = lp(x);
    r.top = std::move(heap);
    return r;
}

}  // namespace kiln::sampling
