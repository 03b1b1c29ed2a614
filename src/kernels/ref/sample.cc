// Scalar reference of the GPU's row sampling (sample.h): sorts and plain loops, written to state the
// semantics rather than to be fast (the kernel selects with radix passes instead of sorting).
#include "kernels/ref/sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kiln::kernels::ref {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The Sampler's argmax_lowest_id: NaN never wins, the lowest id wins ties, 0 when all are NaN.
int32_t argmax_lowest(std::span<const float> v) {
    int32_t best = -1;
    for (size_t i = 0; i < v.size(); ++i) {
        if (std::isnan(v[i])) continue;
        if (best < 0 || v[i] > v[size_t(best)]) best = int32_t(i);
    }
    return best < 0 ? 0 : best;
}

}  // namespace

void apply_adjustments(std::span<float> logits, const SampleRow& row, std::span<const LogitAdjustment> adjust) {
    const int64_t vocab = int64_t(logits.size());
    const std::span<const LogitAdjustment> entries = adjust.subspan(size_t(row.adjust_begin), size_t(row.adjust_count));
    const float rp = row.repetition_penalty, fp = row.frequency_penalty, pp = row.presence_penalty;
    for (size_t j = 0; j < entries.size();) {
        const int32_t id = entries[j].id;
        size_t end = j;
        while (end < entries.size() && entries[end].id == id) ++end;
        if (id >= 0 && id < vocab) {
            float l = logits[size_t(id)];
            bool in_history = false;
            int64_t generated = 0;
            for (const LogitAdjustment& e : entries.subspan(j, end - j)) {
                if (e.bias != 0.0f) l += e.bias;
                in_history = in_history || e.in_history != 0;
                generated += e.generated;
            }
            if (in_history && rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
            if (generated > 0 && (fp != 0.0f || pp != 0.0f)) l -= fp * float(generated) + pp;
            logits[size_t(id)] = l;
        }
        j = end;
    }
}

int32_t sample_row_filter(std::span<float> logits, const SampleRow& row, std::span<const LogitAdjustment> adjust,
                          double* kept_mass) {
    apply_adjustments(logits, row, adjust);
    if (row.temperature < kSampleGreedyTemperature) return argmax_lowest(logits);
    const size_t vocab = logits.size();
    const float inv_t = 1.0f / row.temperature;
    float max_logit = kNegInf;
    for (float& l : logits) {
        l = std::isnan(l) ? kNegInf : l * inv_t;
        if (l == 0.0f) l = 0.0f;  // -0 == +0: one key for the selections
        max_logit = std::max(max_logit, l);
    }
    if (max_logit == kNegInf) return 0;

    // Top-k: the k best by (logit descending, id ascending).
    std::vector<uint8_t> keep(vocab, 1);
    if (row.top_k > 0 && size_t(row.top_k) < vocab) {
        std::vector<int32_t> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        const auto better = [&](int32_t a, int32_t b) {
            return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
        };
        std::nth_element(order.begin(), order.begin() + (row.top_k - 1), order.end(), better);
        std::fill(keep.begin(), keep.end(), 0);
        for (int32_t r = 0; r < row.top_k; ++r) keep[size_t(order[size_t(r)])] = 1;
    }
    double sum = 0.0;
    for (size_t i = 0; i < vocab; ++i)
        if (keep[i]) sum += std::exp(logits[i] - max_logit);
    const float inv_sum = float(1.0 / sum);
    for (size_t i = 0; i < vocab; ++i) logits[i] = keep[i] ? std::exp(logits[i] - max_logit) * inv_sum : 0.0f;

    // Top-p: the shortest prefix by (probability descending, id ascending) whose fixed-point mass
    // reaches top_p - slack (at least one token); the rest dropped.
    if (row.top_p < 1.0f) {
        const uint64_t target = top_p_target(row.top_p);
        std::vector<int32_t> order;
        for (size_t i = 0; i < vocab; ++i)
            if (logits[i] > 0.0f) order.push_back(int32_t(i));
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
        });
        uint64_t cum = 0;
        size_t n = 0;
        while (n < order.size() && cum < target) cum += top_p_mass(logits[size_t(order[n++])]);
        for (size_t r = n; r < order.size(); ++r) logits[size_t(order[r])] = 0.0f;
    }

    if (row.min_p > 0.0f) {
        const float threshold = row.min_p * *std::max_element(logits.begin(), logits.end());
        for (float& p : logits)
            if (p < threshold) p = 0.0f;
    }
    double kept = 0.0;
    for (float p : logits) kept += p;
    *kept_mass = kept;
    return -1;
}

int32_t sample_row(std::span<float> logits, const SampleRow& row, std::span<const LogitAdjustment> adjust) {
    double kept = 0.0;
    const int32_t direct = sample_row_filter(logits, row, adjust, &kept);
    if (direct >= 0) return direct;
    const float inv_kept = float(1.0 / kept);
    double cum = 0.0;
    int32_t last = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
        const float q = logits[i] * inv_kept;
        if (q > 0.0f) last = int32_t(i);
        cum += q;
        if (row.u < cum) return int32_t(i);
    }
    return last;  // u past the rounded total: the last kept token
}

float scale_max(float* x, float s, int64_t n) {
    float m = kNegInf;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::isnan(x[i]) ? kNegInf : x[i] * s;
        m = std::max(m, x[i]);
    }
    return m;
}

void exp_shift(const float* x, float m, float* p, double* block_sums, int64_t n) {
    for (int64_t b = 0; b < n; b += kExpBlock) {
        double sum = 0.0;
        for (int64_t i = b; i < std::min(n, b + kExpBlock); ++i) {
            p[i] = std::isnan(x[i]) || x[i] == kNegInf ? 0.0f : std::exp(x[i] - m);
            sum += double(p[i]);
        }
        block_sums[b / kExpBlock] = sum;
    }
}

}  // namespace kiln::kernels::ref
