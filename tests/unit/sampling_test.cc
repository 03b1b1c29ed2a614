// Sampler and SamplingParams::validate: greedy/top-k/top-p/min-p edge cases on hand-built
// distributions, temperature checked statistically (binomial sd bounds, fixed seed), seeding,
// penalties and logit bias on hand-computed logits; speculative decoding's acceptance rule (verify)
// checked by chi-square against the exact distribution, with a wrong rule shown to fail the same test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "support/chi_square.h"

namespace kiln::sampling {
namespace {

SamplingParams seeded(uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    p.has_seed = true;
    return p;
}

std::vector<float> random_logits(int32_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng);
    return v;
}

std::set<int32_t> ids_of(const std::vector<TokenProb>& d) {
    std::set<int32_t> s;
    for (const TokenProb& t : d) s.insert(t.id);
    return s;
}

// Logits whose softmax is exactly {0.5, 0.25, 0.125, 0.125} in real arithmetic.
std::vector<float> halves() {
    return {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
}

TEST(Sampler, GreedyPicksLowestIdOnTies) {
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler s(p, 5, 0);
    std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 2.0f};
    EXPECT_EQ(s.sample(logits, {}), 1);
    std::vector<float> all_equal(5, 0.5f);
    EXPECT_EQ(s.sample(all_equal, {}), 0);
    std::vector<float> with_nan = {std::nanf(""), 1.0f, 1.0f, 0.0f, 0.0f};
    EXPECT_EQ(s.sample(with_nan, {}), 1);
}

TEST(Sampler, TopK1MatchesGreedy) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
        std::vector<float> logits = random_logits(1000, seed);
        logits[size_t(seed * 37 % 1000)] = 100.0f;
        logits[size_t(seed * 53 % 1000)] = 100.0f;  // a tie: both must pick the lower id
        std::vector<float> copy = logits;
        SamplingParams p = seeded(seed);
        p.top_k = 1;
        Sampler topk(p, 1000, 0);
        p.temperature = 0.0f;
        Sampler greedy(p, 1000, 0);
        EXPECT_EQ(topk.sample(logits, {}), greedy.sample(copy, {})) << "seed " << seed;
    }
}

TEST(Sampler, TopKKeepsTheKLargest) {
    std::vector<float> logits = random_logits(4097, 7);
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    SamplingParams p = seeded(1);
    p.top_k = 10;
    Sampler s(p, 4097, 0);
    std::vector<float> work = logits;
    auto d = s.distribution(work, {});
    ASSERT_EQ(d.size(), 10u);
    for (const TokenProb& t : d) EXPECT_GE(logits[size_t(t.id)], sorted[9]);
    double sum = 0;
    for (const TokenProb& t : d) sum += t.prob;
    EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(Sampler, TopPOneKeepsAll) {
    SamplingParams p = seeded(1);
    p.top_p = 1.0f;
    Sampler s(p, 4, 0);
    std::vector<float> l = halves();
    EXPECT_EQ(s.distribution(l, {}).size(), 4u);
}

TEST(Sampler, TinyTopPKeepsOnlyTheArgmax) {
    SamplingParams p = seeded(1);
    p.top_p = 1e-6f;
    std::vector<float> logits = random_logits(5000, 3);
    int32_t best = argmax_lowest_id(logits);
    Sampler s(p, 5000, 0);
    auto d = s.distribution(logits, {});
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].id, best);
    EXPECT_FLOAT_EQ(d[0].prob, 1.0f);
}

TEST(Sampler, TopPExactCumulativeBoundary) {
    // Cumulative masses 0.5, 0.75, 0.875, 1: p equal to one of them keeps exactly that prefix.
    struct Case {
        float p;
        size_t kept;
    };
    for (Case c : {Case{0.5f, 1}, Case{0.75f, 2}, Case{0.875f, 3}, Case{0.76f, 3}, Case{0.49f, 1}, Case{0.9f, 4}}) {
        SamplingParams p = seeded(1);
        p.top_p = c.p;
        Sampler s(p, 4, 0);
        std::vector<float> l = halves();
        auto d = s.distribution(l, {});
        EXPECT_EQ(d.size(), c.kept) << "top_p " << c.p;
        EXPECT_EQ(d[0].id, 0);
    }
    // Kept probabilities are renormalized: p=0.75 leaves {2/3, 1/3}.
    SamplingParams p = seeded(1);
    p.top_p = 0.75f;
    Sampler s(p, 4, 0);
    std::vector<float> l = halves();
    auto d = s.distribution(l, {});
    ASSERT_EQ(d.size(), 2u);
    EXPECT_NEAR(d[0].prob, 2.0 / 3.0, 1e-6);
    EXPECT_NEAR(d[1].prob, 1.0 / 3.0, 1e-6);
}

TEST(Sampler, TopPOnFlatDistributionGrowsPastFirstGuess) {
    // 1000 equal tokens, p = 0.5: exactly 500 kept (more than the first partial-sort guess), lowest ids.
    SamplingParams p = seeded(1);
    p.top_p = 0.5f;
    Sampler s(p, 1000, 0);
    std::vector<float> flat(1000, 0.0f);
    auto d = s.distribution(flat, {});
    ASSERT_EQ(d.size(), 500u);
    EXPECT_EQ(*ids_of(d).rbegin(), 499);
}

TEST(Sampler, MinP) {
    // max prob 0.5: min_p 0.26 -> threshold 0.13 drops the two 0.125 tokens; 0.24 -> 0.12 keeps all.
    SamplingParams p = seeded(1);
    p.min_p = 0.26f;
    Sampler s(p, 4, 0);
    std::vector<float> l = halves();
    auto d = s.distribution(l, {});
    EXPECT_EQ(ids_of(d), (std::set<int32_t>{0, 1}));
    p.min_p = 0.24f;
    Sampler s2(p, 4, 0);
    l = halves();
    EXPECT_EQ(s2.distribution(l, {}).size(), 4u);
    p.min_p = 1.0f;  // only the max survives
    Sampler s3(p, 4, 0);
    l = halves();
    auto d3 = s3.distribution(l, {});
    ASSERT_EQ(d3.size(), 1u);
    EXPECT_EQ(d3[0].id, 0);
}

// Draws n tokens at temperature t from logits {0, 1, 2, 3} and checks each frequency against
// softmax(logits / t) within 5 binomial standard deviations, plus a chi-square bound.
void check_temperature(float t, uint64_t seed) {
    const std::vector<float> base = {0.0f, 1.0f, 2.0f, 3.0f};
    std::vector<double> expect(4);
    double z = 0;
    for (size_t i = 0; i < 4; ++i) z += std::exp(double(base[i]) / t);
    for (size_t i = 0; i < 4; ++i) expect[i] = std::exp(double(base[i]) / t) / z;

    SamplingParams p = seeded(seed);
    p.temperature = t;
    Sampler s(p, 4, 0);
    const int n = 40000;
    std::vector<int> counts(4, 0);
    for (int i = 0; i < n; ++i) {
        std::vector<float> l = base;
        ++counts[size_t(s.sample(l, {}))];
    }
    double chi2 = 0;
    for (size_t i = 0; i < 4; ++i) {
        double mean = n * expect[i];
        double sd = std::sqrt(n * expect[i] * (1 - expect[i]));
        EXPECT_NEAR(counts[i], mean, 5 * sd) << "t=" << t << " token " << i << " seed " << seed;
        chi2 += (counts[i] - mean) * (counts[i] - mean) / mean;
    }
    EXPECT_LT(chi2, 20.5) << "t=" << t;  // 3 dof: P(chi2 > 20.5) ~ 1.3e-4
}

// n logits drawn uniformly from [-spread, spread].
std::vector<float> uniform_logits(int32_t n, uint32_t seed, float spread) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-spread, spread);
    std::vector<float> out(static_cast<size_t>(n));
    for (float& x : out) x = u(rng);
    return out;
}

// Temperature alone over a vocabulary of many softmax blocks (kernels/cpu/softmax.h: 256 each, and a
// tail): the draw found through block sums picks tokens at their softmax rates, never a banned (-inf)
// or NaN one; 16 groups of tokens (one per 150 ids, across block edges) checked by chi-square.
TEST(Sampler, PlainDrawOverManyBlocks) {
    const int32_t V = 2400;
    std::vector<float> base = uniform_logits(V, 5, 4.0f);
    for (int32_t i = 7; i < V; i += 97) base[size_t(i)] = -std::numeric_limits<float>::infinity();
    base[300] = std::numeric_limits<float>::quiet_NaN();
    const float t = 0.8f;
    std::vector<double> expect(16, 0.0);
    double z = 0;
    for (int32_t i = 0; i < V; ++i)
        if (std::isfinite(base[size_t(i)])) z += std::exp(double(base[size_t(i)]) / t);
    for (int32_t i = 0; i < V; ++i)
        if (std::isfinite(base[size_t(i)])) expect[size_t(i / 150)] += std::exp(double(base[size_t(i)]) / t) / z;
    SamplingParams p = seeded(21);
    p.temperature = t;
    Sampler s(p, V, 0);
    const int n = 60000;
    std::vector<int> counts(16, 0);
    for (int k = 0; k < n; ++k) {
        std::vector<float> l = base;
        const int32_t id = s.sample(l, {});
        ASSERT_TRUE(id >= 0 && id < V && std::isfinite(base[size_t(id)])) << "drew " << id;
        ++counts[size_t(id / 150)];
    }
    double chi2 = 0;
    for (size_t g = 0; g < 16; ++g) {
        const double mean = n * expect[g];
        chi2 += (counts[g] - mean) * (counts[g] - mean) / mean;
    }
    EXPECT_LT(chi2, 44.3) << "15 dof: P(chi2 > 44.3) ~ 1e-4";
}

// A grammar's mask given to sample(): the same as -inf written outside it. Greedy picks the same
// token; a draw never leaves the allowed tokens and follows the softmax over them (chi-square), with
// and without top-k / top-p; nothing allowed but -inf logits falls back as the written row does.
// Token i is allowed when i % every == 3 % every.
void check_allowed_mask(int32_t every) {
    const int32_t V = 700;
    std::vector<float> base = uniform_logits(V, 9, 3.0f);
    std::vector<uint64_t> allowed(size_t(V + 63) / 64, 0);
    std::vector<int32_t> ids;
    for (int32_t i = 3 % every; i < V; i += every) ids.push_back(i), allowed[size_t(i) >> 6] |= uint64_t(1) << (i & 63);
    base[size_t(ids[2])] = base[size_t(ids[5])] = 5.0f;  // a tie at the top: the lower id wins greedy
    auto written = [&] {
        std::vector<float> l(static_cast<size_t>(V), -std::numeric_limits<float>::infinity());
        for (int32_t i : ids) l[size_t(i)] = base[size_t(i)];
        return l;
    };
    SamplingParams g = seeded(1);
    g.temperature = 0.0f;
    Sampler sg(g, V, 0);
    std::vector<float> l1 = base, l2 = written();
    EXPECT_EQ(sg.sample(l1, {}, allowed), ids[2]);
    EXPECT_EQ(sg.sample(l2, {}), ids[2]);
    for (int variant = 0; variant < 3; ++variant) {
        SamplingParams p = seeded(40 + uint64_t(variant));
        p.temperature = 0.9f;
        if (variant == 1) p.top_k = 10;
        if (variant == 2) p.top_p = 0.8f;
        Sampler want(p, V, 0);  // the distribution over the written row
        std::vector<float> lw = written();
        std::map<int32_t, double> expect;
        for (const TokenProb& t : want.distribution(lw, {})) expect[t.id] = t.prob;
        Sampler s(p, V, 0);
        std::map<int32_t, int> counts;
        const int n = 20000;
        for (int k = 0; k < n; ++k) {
            std::vector<float> l = base;
            const int32_t id = s.sample(l, {}, allowed);
            ASSERT_TRUE((allowed[size_t(id) >> 6] >> (id & 63)) & 1) << "drew " << id << " (variant " << variant << ")";
            ++counts[id];
        }
        double chi2 = 0;
        for (const auto& [id, pr] : expect) chi2 += (counts[id] - n * pr) * (counts[id] - n * pr) / (n * pr);
        for (const auto& [id, c] : counts) EXPECT_TRUE(expect.count(id)) << "drew " << id << " outside the distribution";
        EXPECT_LT(chi2, 20.0 + 2.0 * double(expect.size())) << "variant " << variant << ", " << expect.size() << " tokens";
    }
    std::vector<float> dead = base, dead_written(static_cast<size_t>(V), -std::numeric_limits<float>::infinity());
    for (int32_t i : ids) dead[size_t(i)] = -std::numeric_limits<float>::infinity();
    SamplingParams t = seeded(3);
    t.temperature = 0.7f;
    Sampler s1(t, V, 0), s2(t, V, 0);
    EXPECT_EQ(s1.sample(dead, {}, allowed), s2.sample(dead_written, {}));
}

TEST(Sampler, AllowedMaskActsAsMinusInfinity) {
    check_allowed_mask(37);  // few allowed: gathered as candidates
    check_allowed_mask(2);   // half the vocabulary: -inf written, then the plain softmax (no cuts)
}

TEST(Sampler, TemperatureShapesTheDistribution) {
    check_temperature(1.0f, 11);
    check_temperature(0.5f, 12);
    check_temperature(2.0f, 13);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
    auto run = [](uint64_t seed) {
        SamplingParams p = seeded(seed);
        p.top_p = 0.95f;
        Sampler s(p, 1000, 0);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) {
            std::vector<float> l = random_logits(1000, uint64_t(i));
            out.push_back(s.sample(l, {}));
        }
        return out;
    };
    EXPECT_EQ(run(42), run(42));
    EXPECT_NE(run(42), run(43));
}

TEST(Sampler, PenaltiesOnHandComputedLogits) {
    SamplingParams p;
    p.temperature = 0.0f;  // greedy: the logits span then holds exactly the penalized values
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    // prompt {0, 1, 0}, generated {2, 2, 3}: freq/presence only touch 2 and 3, repetition all of 0..3.
    Sampler s(p, 6, 3);
    const std::vector<int32_t> ids = {0, 1, 0, 2, 2, 3};
    std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, -1.0f};
    int32_t tok = s.sample(l, ids);
    EXPECT_FLOAT_EQ(l[0], 1.0f);                           // 2 / 2 (once, despite two occurrences)
    EXPECT_FLOAT_EQ(l[1], -4.0f);                          // -2 * 2
    EXPECT_FLOAT_EQ(l[2], 1.0f / 2 - (0.5f * 2 + 0.25f));  // 0.5 - 1.25
    EXPECT_FLOAT_EQ(l[3], 0.5f / 2 - (0.5f * 1 + 0.25f));  // 0.25 - 0.75
    EXPECT_FLOAT_EQ(l[4], 3.0f);                           // unseen
    EXPECT_FLOAT_EQ(l[5], -1.0f);
    EXPECT_EQ(tok, 4);

    // Scratch state is reset: the same call again gives the same values.
    std::vector<float> l2 = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, -1.0f};
    s.sample(l2, ids);
    EXPECT_EQ(l, l2);
    // Out-of-range history ids are ignored, not a crash.
    std::vector<int32_t> bad = {-1, 99, 4};
    std::vector<float> l3 = {0.0f, 0.0f, 0.0f, 0.0f, 3.0f, 0.0f};
    s.sample(l3, bad);
    EXPECT_FLOAT_EQ(l3[4], 1.5f);  // all three ids are prompt: repetition only
}

TEST(Sampler, PenaltyRepeatsGreedyAvoidance) {
    // A strong repetition penalty moves greedy off a token it has already produced.
    SamplingParams p;
    p.temperature = 0.0f;
    p.repetition_penalty = 1.5f;
    Sampler s(p, 3, 1);
    std::vector<float> l = {0.0f, 3.0f, 2.5f};
    std::vector<int32_t> ids = {0, 1};
    EXPECT_EQ(s.sample(l, ids), 2);  // 3 / 1.5 = 2 < 2.5
}

TEST(Sampler, LogitBiasForcesAndBans) {
    SamplingParams p = seeded(5);
    p.logit_bias = {{7, 100.0f}};
    Sampler s(p, 1000, 0);
    for (int i = 0; i < 200; ++i) {
        std::vector<float> l = random_logits(1000, uint64_t(i));
        EXPECT_EQ(s.sample(l, {}), 7);
    }
    std::vector<float> l = {1.0f, 5.0f, 2.0f};
    SamplingParams g;
    g.temperature = 0.0f;
    g.logit_bias = {{1, -100.0f}};
    Sampler ban(g, 3, 0);
    EXPECT_EQ(ban.sample(l, {}), 2);
}

TEST(Sampler, AllBannedFallsBackToLowestId) {
    SamplingParams p = seeded(1);
    Sampler s(p, 4, 0);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> l = {-inf, -inf, -inf, -inf};
    EXPECT_EQ(s.sample(l, {}), 0);
}

TEST(Sampler, LargeVocabTopKTopPMinP) {
    const int32_t vocab = 151936;
    SamplingParams p = seeded(9);
    p.temperature = 0.7f;
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.2f;
    Sampler s(p, vocab, 2);
    std::vector<float> logits = random_logits(vocab, 99);
    std::vector<float> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + 59, sorted.end(), std::greater<>());
    const float kth60 = sorted[59];  // penalties can reorder the top 50 only among a few
    std::vector<int32_t> history = {1, 2, 3};
    for (int i = 0; i < 20; ++i) {
        std::vector<float> l = logits;
        int32_t tok = s.sample(l, history);
        EXPECT_GE(logits[size_t(tok)], kth60);
    }
}

TEST(Sampler, VerifyGreedyAcceptsOnlyTheArgmax) {
    SamplingParams p = seeded(1);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    Sampler s(p, 4, 0);
    const std::vector<float> logits = {1.0f, 3.0f, 2.9f, 3.0f};  // ids 1 and 3 tie: 1 wins
    std::vector<float> l = logits;
    Sampler::Verdict v = s.verify(l, {}, 1);
    EXPECT_TRUE(v.accepted);
    EXPECT_EQ(v.token, 1);
    l = logits;
    v = s.verify(l, {}, 3);
    EXPECT_FALSE(v.accepted);
    EXPECT_EQ(v.token, 1);
    l = logits;  // with 1 and 3 in the history the penalty halves them: 2 is the argmax
    const std::vector<int32_t> history = {1, 3};
    v = s.verify(l, history, 2);
    EXPECT_TRUE(v.accepted);
    EXPECT_EQ(v.token, 2);
}

// Draws `trials` tokens through `rule` and tests them against the exact distribution of p's
// pipeline on `logits` (Sampler::distribution); returns the chi-square p-value.
double verify_fit(const SamplingParams& p, const std::vector<float>& logits, const std::vector<int32_t>& history,
                  int trials, const std::function<int32_t(Sampler&, std::vector<float>&)>& rule) {
    const int32_t vocab = int32_t(logits.size());
    Sampler s(p, vocab, 1);
    std::vector<float> l = logits;
    std::map<int32_t, double> exact;
    for (const TokenProb& t : s.distribution(l, history)) exact[t.id] = t.prob;
    std::map<int32_t, int64_t> counts;
    for (int i = 0; i < trials; ++i) {
        l = logits;
        ++counts[rule(s, l)];
    }
    return test::chi_square(exact, counts).p_value;
}

TEST(Sampler, VerifyKeepsTheTargetDistributionExactly) {
    const int32_t vocab = 12;
    const std::vector<float> logits = random_logits(vocab, 17);
    const std::vector<int32_t> history = {3, 3, 5};
    std::vector<SamplingParams> params(5, seeded(5));
    params[1].temperature = 0.7f;
    params[1].top_k = 6;
    params[2].top_p = 0.8f;
    params[3].min_p = 0.1f;
    params[3].repetition_penalty = 1.5f;
    params[4].temperature = 1.6f;
    params[4].presence_penalty = 0.8f;
    const int trials = 20000;
    std::mt19937_64 rng(3);
    // A draft model's distribution q: random, wider than p's support.
    std::vector<TokenProb> q;
    double qsum = 0;
    for (int32_t id = 0; id < vocab; ++id) q.push_back({id, float(0.05 + double(rng() % 100) / 100.0)});
    for (const TokenProb& t : q) qsum += t.prob;
    for (TokenProb& t : q) t.prob = float(t.prob / qsum);
    std::vector<double> qw;
    for (const TokenProb& t : q) qw.push_back(t.prob);
    std::discrete_distribution<int32_t> draw_q(qw.begin(), qw.end());
    for (size_t c = 0; c < params.size(); ++c) {
        SCOPED_TRACE(::testing::Message() << "params " << c);
        for (int32_t draft : {0, 4, 11}) {  // a point mass (n-gram lookup) on tokens of high and low p
            const double pv = verify_fit(params[c], logits, history, trials, [&](Sampler& s, std::vector<float>& l) {
                return s.verify(l, history, draft).token;
            });
            EXPECT_GT(pv, 1e-3) << "point-mass draft " << draft;
        }
        const double pv = verify_fit(params[c], logits, history, trials, [&](Sampler& s, std::vector<float>& l) {
            const int32_t d = draw_q(rng);
            return s.verify(l, history, d, q).token;
        });
        EXPECT_GT(pv, 1e-3) << "drafts drawn from q";
    }
    // The test has the power to see a wrong rule: accept with probability p(d), else draw from p
    // (not from the residual) over-weights the draft.
    const int32_t draft = 4;
    const double wrong = verify_fit(params[0], logits, history, trials, [&](Sampler& s, std::vector<float>& l) {
        double pd = 0;
        std::vector<float> l2 = l;
        const std::vector<TokenProb> d = s.distribution(l2, history);
        for (const TokenProb& t : d) pd = t.id == draft ? t.prob : pd;
        if (double(rng() >> 11) * 0x1.0p-53 < pd) return draft;
        return s.sample(l, history);
    });
    EXPECT_LT(wrong, 1e-6);
}

TEST(SamplingParams, DefaultsValidate) {
    EXPECT_TRUE(SamplingParams{}.validate(10).is_ok());
}

TEST(SamplingParams, ValidateNamesTheField) {
    struct Case {
        const char* field;
        void (*mutate)(SamplingParams&);
    };
    const Case cases[] = {
        {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
        {"temperature", [](SamplingParams& p) { p.temperature = std::numeric_limits<float>::infinity(); }},
        {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
        {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
        {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }},
        {"top_p", [](SamplingParams& p) { p.top_p = std::nanf(""); }},
        {"min_p", [](SamplingParams& p) { p.min_p = -0.1f; }},
        {"min_p", [](SamplingParams& p) { p.min_p = 1.1f; }},
        {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
        {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = std::nanf(""); }},
        {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 2.5f; }},
        {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = std::nanf(""); }},
        {"logit_bias",
         [](SamplingParams& p) {
             p.logit_bias = {{10, 1.0f}};
         }},
        {"logit_bias",
         [](SamplingParams& p) {
             p.logit_bias = {{-1, 1.0f}};
         }},
        {"logit_bias",
         [](SamplingParams& p) {
             p.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
         }},
        {"max_tokens", [](SamplingParams& p) { p.max_tokens = -1; }},
        {"stop_strings",
         [](SamplingParams& p) {
             p.stop_strings = {"ok", ""};
         }},
        {"stop_ids", [](SamplingParams& p) { p.stop_ids = {10}; }},
    };
    for (const Case& c : cases) {
        SamplingParams p;
        c.mutate(p);
        core::Status st = p.validate(10);
        EXPECT_EQ(st.code(), core::StatusCode::kInvalidArgument) << c.field;
        EXPECT_NE(st.message().find(c.field), std::string::npos) << st.message();
        auto r = Sampler::create(p, 10, 0);
        EXPECT_FALSE(r.is_ok()) << c.field;
    }
    SamplingParams ok;
    ok.top_k = -1;
    ok.temperature = 0.0f;
    ok.max_tokens = 0;
    EXPECT_TRUE(ok.validate(10).is_ok());
    EXPECT_FALSE(SamplingParams{}.validate(0).is_ok());
    EXPECT_FALSE(Sampler::create(ok, 10, -1).is_ok());
    EXPECT_TRUE(Sampler::create(ok, 10, 0).is_ok());
}

}  // namespace
}  // namespace kiln::sampling
