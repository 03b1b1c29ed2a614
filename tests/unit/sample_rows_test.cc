// kernels/ref/sample.h (the GPU's row sampling, scalar reference) against sampling::Sampler: the
// same adjusted logits, the same kept tokens and probabilities over random logits (ties, -inf,
// NaN) and random knobs; the draw walks the kept tokens in id order and its frequencies follow the
// distribution; Sampler::plan_row's entries and draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "kernels/ref/sample.h"
#include "sampling/sampler.h"
#include "support/random_sampling.h"

namespace kiln {
namespace {

using kernels::ref::LogitAdjustment;
using kernels::ref::SampleRow;
using test::random_history;
using test::random_logits;
using test::random_params;
constexpr float kInf = std::numeric_limits<float>::infinity();

bool same_value(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || a == b;
}

TEST(SampleRows, AdjustmentsEqualTheSamplersPenalties) {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int32_t vocab = int32_t(1 + rng() % 300);
        sampling::SamplingParams p = random_params(vocab, rng);
        p.temperature = 1.0f;  // distribution() then leaves exactly the adjusted logits (NaN as -inf)
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        const std::vector<int32_t> ids = random_history(vocab, rng);
        const int32_t num_prompt = int32_t(ids.empty() ? 0 : rng() % ids.size());
        sampling::Sampler s(p, vocab, num_prompt);
        const std::vector<float> logits = random_logits(vocab, rng);
        std::vector<float> cpu = logits;
        (void)s.distribution(cpu, ids);
        SampleRow row;
        std::vector<LogitAdjustment> adjust(3, LogitAdjustment{0, 9.0f, 1, 1});  // another row's entries first
        s.plan_row(ids, row, adjust);
        EXPECT_EQ(row.adjust_begin, 3);
        EXPECT_EQ(size_t(row.adjust_begin + row.adjust_count), adjust.size());
        for (int32_t j = row.adjust_begin + 1; j < row.adjust_begin + row.adjust_count; ++j)
            EXPECT_LE(adjust[size_t(j - 1)].id, adjust[size_t(j)].id) << "entries not sorted by id";
        std::vector<float> dev = logits;
        kernels::ref::apply_adjustments(dev, row, adjust);
        for (float& l : dev)
            if (std::isnan(l)) l = -kInf;
        for (int32_t i = 0; i < vocab; ++i)
            ASSERT_TRUE(same_value(dev[size_t(i)], cpu[size_t(i)]))
                << "trial " << trial << " id " << i << ": " << dev[size_t(i)] << " vs the Sampler's " << cpu[size_t(i)];
    }
}

TEST(SampleRows, KeptTokensAndProbabilitiesEqualTheSamplers) {
    std::mt19937_64 rng(11);
    int direct = 0, drawn = 0;
    for (int trial = 0; trial < 600; ++trial) {
        const int32_t vocab = std::vector<int32_t>{1, 2, 7, 64, 500, 5000}[size_t(trial % 6)];
        const sampling::SamplingParams p = random_params(vocab, rng);
        const std::vector<int32_t> ids = random_history(vocab, rng);
        const int32_t num_prompt = int32_t(ids.empty() ? 0 : rng() % ids.size());
        sampling::Sampler s(p, vocab, num_prompt);
        const std::vector<float> logits = random_logits(vocab, rng);
        std::vector<float> cpu_logits = logits;
        const std::vector<sampling::TokenProb> cpu = s.distribution(cpu_logits, ids);
        SampleRow row;
        std::vector<LogitAdjustment> adjust;
        s.plan_row(ids, row, adjust);
        std::vector<float> dev = logits;
        double kept = 0.0;
        const int32_t id = kernels::ref::sample_row_filter(dev, row, adjust, &kept);
        std::map<int32_t, float> want;
        for (const sampling::TokenProb& t : cpu)
            if (t.prob > 0.0f) want[t.id] = t.prob;
        if (id >= 0) {  // greedy or nothing finite: one token with probability 1
            ++direct;
            ASSERT_EQ(want.size(), 1u) << "trial " << trial;
            EXPECT_EQ(want.begin()->first, id) << "trial " << trial;
            continue;
        }
        ++drawn;
        const float inv_kept = float(1.0 / kept);
        std::map<int32_t, float> got;
        for (int32_t i = 0; i < vocab; ++i)
            if (dev[size_t(i)] * inv_kept > 0.0f) got[i] = dev[size_t(i)] * inv_kept;
        ASSERT_EQ(got.size(), want.size()) << "trial " << trial << ": kept tokens differ (T " << p.temperature << ", k "
                                           << p.top_k << ", p " << p.top_p << ", min_p " << p.min_p << ")";
        for (const auto& [i, q] : want) {
            ASSERT_TRUE(got.count(i)) << "trial " << trial << ": token " << i << " kept by the Sampler only";
            EXPECT_NEAR(got[i], q, 1e-6 + 1e-5 * q) << "trial " << trial << " token " << i;
        }
    }
    EXPECT_GT(direct, 50);  // both kinds well covered
    EXPECT_GT(drawn, 300);
}

// {0.5, 0.25, 0.125, 0.125} reversed: the likeliest token has the highest id.
TEST(SampleRows, DrawWalksKeptTokensInIdOrder) {
    const std::vector<float> logits = {std::log(0.125f), std::log(0.125f), std::log(0.25f), std::log(0.5f)};
    SampleRow row;
    row.temperature = 1.0f;
    auto draw = [&](double u, int32_t top_k) {
        row.u = u;
        row.top_k = top_k;
        std::vector<float> scratch = logits;
        return kernels::ref::sample_row(scratch, row, {});
    };
    EXPECT_EQ(draw(0.01, 0), 0);
    EXPECT_EQ(draw(0.2, 0), 1);  // cum 0.125, 0.25, 0.5, 1
    EXPECT_EQ(draw(0.3, 0), 2);
    EXPECT_EQ(draw(0.6, 0), 3);
    EXPECT_EQ(draw(0.9999, 0), 3);
    EXPECT_EQ(draw(0.1, 2), 2);  // kept {2: 1/3, 3: 2/3}
    EXPECT_EQ(draw(0.4, 2), 3);
    EXPECT_EQ(draw(0.99, 1), 3);  // top-k 1 is the argmax
    row.top_p = 0.7f;             // {3, 2} reach 0.75
    EXPECT_EQ(draw(0.2, 0), 2);
    EXPECT_EQ(draw(0.5, 0), 3);
    row.top_p = 1.0f;
    row.min_p = 0.4f;  // drops the 0.125s (below 0.4 * 0.5)
    EXPECT_EQ(draw(0.01, 0), 2);
}

TEST(SampleRows, DrawFrequenciesFollowTheDistribution) {
    std::mt19937_64 rng(3);
    const int32_t vocab = 60;
    std::vector<float> logits = random_logits(vocab, rng);
    for (float& l : logits)
        if (!std::isfinite(l)) l = 0.0f;
    sampling::SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = 25;
    p.top_p = 0.9f;
    p.seed = 5;
    p.has_seed = true;
    sampling::Sampler s(p, vocab, 0);
    std::vector<float> scratch = logits;
    std::map<int32_t, double> want;
    for (const sampling::TokenProb& t : s.distribution(scratch, {})) want[t.id] = t.prob;
    ASSERT_GT(want.size(), 3u);
    const int n = 40000;
    std::map<int32_t, int> count;
    SampleRow row;
    std::vector<LogitAdjustment> adjust;
    for (int i = 0; i < n; ++i) {
        adjust.clear();
        s.plan_row({}, row, adjust);
        ASSERT_GE(row.u, 0.0);
        ASSERT_LT(row.u, 1.0);
        scratch = logits;
        ++count[kernels::ref::sample_row(scratch, row, adjust)];
    }
    for (const auto& [id, c] : count) EXPECT_TRUE(want.count(id)) << "drew " << id << ", not a candidate";
    for (const auto& [id, q] : want) {
        const double sd = std::sqrt(n * q * (1 - q));
        EXPECT_NEAR(count[id], n * q, 5 * sd + 1) << "token " << id << " prob " << q;
    }
}

TEST(SampleRows, PlanRowDrawsLikeTheSampler) {
    sampling::SamplingParams p;
    p.temperature = 0.9f;
    p.seed = 42;
    p.has_seed = true;
    sampling::Sampler a(p, 10, 0), b(p, 10, 0);
    std::mt19937_64 want(42);
    SampleRow row;
    std::vector<LogitAdjustment> adjust;
    for (int i = 0; i < 5; ++i) {
        a.plan_row({}, row, adjust);
        EXPECT_EQ(row.u, double(want() >> 11) * 0x1.0p-53);  // Sampler::uniform01 on the request's seed
    }
    b.plan_row({}, row, adjust);
    const double first = row.u;
    p.seed = 43;
    sampling::Sampler c(p, 10, 0);
    c.plan_row({}, row, adjust);
    EXPECT_NE(row.u, first);
    p.temperature = 0.0f;  // greedy: no draw
    sampling::Sampler g(p, 10, 0);
    g.plan_row({}, row, adjust);
    EXPECT_EQ(row.u, 0.0);
    EXPECT_TRUE(adjust.empty());  // no bias, no penalties: no entries
}

TEST(SampleRows, EdgeRows) {
    SampleRow row;
    row.temperature = 1.0f;
    row.u = 0.5;
    std::vector<float> all_inf = {-kInf, -kInf, -kInf};
    EXPECT_EQ(kernels::ref::sample_row(all_inf, row, {}), 0);  // the Sampler's fallback
    std::vector<float> nan_max = {1.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
    row.temperature = 0.0f;
    EXPECT_EQ(kernels::ref::sample_row(nan_max, row, {}), 0);  // NaN never wins; ties to the lower id
    row.temperature = 1.0f;
    row.top_p = 1e-7f;
    std::vector<float> tie = {0.0f, 2.0f, -0.0f, 2.0f};
    EXPECT_EQ(kernels::ref::sample_row(tie, row, {}), 1);  // one token: the lower id of the tie
    const std::vector<LogitAdjustment> ban = {{1, -kInf, 0, 0}, {3, -kInf, 0, 0}, {9, 5.0f, 0, 0}};
    row.adjust_count = 3;  // id 9 is outside the vocabulary: ignored
    row.top_p = 1.0f;
    row.top_k = 1;
    tie = {0.0f, 2.0f, -0.0f, 2.0f};
    EXPECT_EQ(kernels::ref::sample_row(tie, row, ban), 0);  // 0 and -0 tie: the lower id
}

}  // namespace
}  // namespace kiln
