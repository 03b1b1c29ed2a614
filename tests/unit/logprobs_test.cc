// sampling::token_logprobs against a direct double-precision log_softmax and a full sort.
#include "sampling/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace kiln::sampling {
namespace {

std::vector<double> log_softmax(const std::vector<float>& x) {
    double m = -INFINITY;
    for (float v : x) m = std::max(m, double(v));
    double sum = 0;
    for (float v : x) sum += std::exp(double(v) - m);
    std::vector<double> out;
    for (float v : x) out.push_back(double(v) - m - std::log(sum));
    return out;
}

TEST(Logprobs, MatchesLogSoftmaxAndFullSort) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 4.0f);
    for (int vocab : {1, 5, 512, 49152}) {
        std::vector<float> logits(static_cast<size_t>(vocab));
        for (float& v : logits) v = nd(rng);
        if (vocab > 4) logits[3] = logits[1];  // a tie: the lower id comes first
        const std::vector<double> ref = log_softmax(logits);
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
        for (int32_t num_top : {0, 1, 3, kMaxLogprobs}) {
            const int32_t token = vocab / 2;
            TokenLogprobs r = token_logprobs(logits, token, num_top);
            EXPECT_EQ(r.token, token);
            EXPECT_NEAR(r.logprob, ref[size_t(token)], 1e-5);
            ASSERT_EQ(r.top.size(), size_t(std::min(num_top, vocab)));
            for (size_t i = 0; i < r.top.size(); ++i) {
                EXPECT_EQ(r.top[i].first, order[i]) << "vocab " << vocab << " rank " << i;
                EXPECT_NEAR(r.top[i].second, ref[size_t(order[i])], 1e-5);
                EXPECT_LE(r.top[i].second, 0.0f);
            }
        }
    }
}

TEST(Logprobs, NanAndInfinities) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> x = {std::nanf(""), 0.0f, -inf, 0.0f};
    TokenLogprobs r = token_logprobs(x, 0, 4);
    EXPECT_EQ(r.logprob, -inf);  // NaN counts as -inf
    EXPECT_NEAR(r.top[0].second, std::log(0.5), 1e-6);
    EXPECT_EQ(r.top[0].first, 1);
    EXPECT_EQ(r.top[1].first, 3);
    EXPECT_EQ(r.top[2].second, -inf);
    std::vector<float> none = {-inf, -inf};
    r = token_logprobs(none, 1, 2);
    EXPECT_EQ(r.logprob, -inf);
    ASSERT_EQ(r.top.size(), 2u);
    EXPECT_EQ(r.top[0].first, 0);
}

}  // namespace
}  // namespace kiln::sampling
