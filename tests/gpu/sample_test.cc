// kernels/cuda/sample_rows against kernels/ref/sample.h, row by row: after the kernel, a drawn
// row's buffer holds the filtered probabilities (0 for dropped tokens) exactly where the reference's
// does (the same kept tokens, values within float rounding of expf); the sampled ids equal the
// reference's; rows may differ only at a boundary (a top-p cut by rounding, u at a CDF edge), a few
// per batch at most; greedy and
// all -inf rows, ties at the top-k and top-p thresholds, large vocabularies (151936) with a
// near-flat distribution, sparse kept sets (never a dropped token), penalties and bias from
// Sampler::plan_row, determinism, a bad entry range.
// Argument checks run without a device.
#include "kernels/cuda/sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cuda/device.h"
#include "kernels/ref/sample.h"
#include "sampling/sampler.h"
#include "support/random_sampling.h"

namespace kiln::kernels::cuda {
namespace {

using ref::LogitAdjustment;
using ref::SampleRow;
using test::download;
using test::upload;

TEST(CudaSample, ArgumentChecksWithoutLaunching) {
    const auto bad = core::StatusCode::kInvalidArgument;
    EXPECT_EQ(sample_rows(nullptr, 1, 0, nullptr, nullptr, 0, nullptr).code(), bad);
    EXPECT_EQ(sample_rows(nullptr, 1, (int64_t(1) << 24) + 1, nullptr, nullptr, 0, nullptr).code(), bad);
    EXPECT_EQ(sample_rows(nullptr, 1, 10, nullptr, nullptr, 0, nullptr).code(), bad);
    EXPECT_EQ(sample_rows(nullptr, -1, 10, nullptr, nullptr, 0, nullptr).code(), bad);
    EXPECT_TRUE(sample_rows(nullptr, 0, 10, nullptr, nullptr, 0, nullptr).is_ok());
}

struct Batch {
    int32_t vocab = 0;
    std::vector<float> logits;  // [rows, vocab]
    std::vector<SampleRow> rows;
    std::vector<LogitAdjustment> adjust;
};

// Runs the kernel on the batch; returns the ids and leaves the rows' buffers in `after`.
std::vector<int32_t> run(const Batch& b, std::vector<float>& after) {
    DeviceBuffer dl = upload(b.logits), dr = upload(b.rows), dids = upload(std::vector<int32_t>(b.rows.size(), -7));
    DeviceBuffer da = b.adjust.empty() ? DeviceBuffer() : upload(b.adjust);
    const core::Status st = sample_rows(dl.as<float>(), int64_t(b.rows.size()), b.vocab, dr.as<SampleRow>(),
                                        b.adjust.empty() ? nullptr : da.as<LogitAdjustment>(), int64_t(b.adjust.size()),
                                        dids.as<int32_t>());
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    after = download<float>(dl, b.logits.size());
    return download<int32_t>(dids, b.rows.size());
}

// Each row against the reference. `edge` counts the rows that differ only at a boundary: the kept set
// by tokens at either side's cut (a top-p cut where the two sides' rounding of expf puts the
// cumulative mass on either side of the target) or the draw where u lies within 1e-6 of the
// token's CDF edge. The drawn token is always one the kernel kept.
void compare(const Batch& b, const char* what, int& edge) {
    std::vector<float> after;
    const std::vector<int32_t> ids = run(b, after);
    const size_t V = size_t(b.vocab);
    edge = 0;
    for (size_t r = 0; r < b.rows.size(); ++r) {
        std::vector<float> want(b.logits.begin() + std::ptrdiff_t(r * V),
                                b.logits.begin() + std::ptrdiff_t((r + 1) * V));
        std::vector<float> scratch = want;
        const int32_t ref_id = ref::sample_row(scratch, b.rows[r], b.adjust);
        double kept = 0.0;
        const int32_t direct = ref::sample_row_filter(want, b.rows[r], b.adjust, &kept);
        if (direct >= 0) {  // greedy, or nothing finite
            ASSERT_EQ(ids[r], ref_id) << what << " row " << r;
            continue;
        }
        // The buffer holds the filtered probabilities; the drawn token is one of the kept.
        ASSERT_GT(after[r * V + size_t(ids[r])], 0.0f) << what << " row " << r << ": drew a dropped token";
        float gpu_min = 1.0f, ref_min = 1.0f;
        for (size_t i = 0; i < V; ++i) {
            if (after[r * V + i] > 0.0f) gpu_min = std::min(gpu_min, after[r * V + i]);
            if (want[i] > 0.0f) ref_min = std::min(ref_min, want[i]);
        }
        int differ = 0;  // a token kept on one side only must sit at that side's cut
        for (size_t i = 0; i < V; ++i) {
            const float g = after[r * V + i], w = want[i];
            if ((g > 0.0f) != (w > 0.0f)) {
                ++differ;
                ASSERT_TRUE(g > 0.0f ? g == gpu_min : w == ref_min)
                    << what << " row " << r << " token " << i << ": kept on one side only (" << g << " vs " << w
                    << ") and not at the cut (" << gpu_min << " vs " << ref_min << ")";
                continue;
            }
            ASSERT_NEAR(g, w, 1e-6f * w + 1e-12f) << what << " row " << r << " token " << i;
        }
        ASSERT_LE(differ, 64) << what << " row " << r << ": the kept tokens differ";
        if (ids[r] == ref_id) continue;
        const float inv = float(1.0 / kept);
        double cum = 0.0;
        for (int32_t i = 0; i < ref_id; ++i) cum += want[size_t(i)] * inv;
        const double lo = cum, hi = cum + want[size_t(ref_id)] * inv, u = b.rows[r].u;
        ASSERT_TRUE(std::abs(u - lo) < 1e-6 || std::abs(u - hi) < 1e-6)
            << what << " row " << r << ": drew " << ids[r] << ", the reference " << ref_id << " (u " << u << " in ["
            << lo << ", " << hi << "))";
        ++edge;
    }
}

TEST(CudaSample, RandomRowsMatchTheReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937_64 rng(21);
    for (int32_t vocab : {1, 2, 7, 33, 1000, 4096, 50000}) {
        Batch b;
        b.vocab = vocab;
        for (int r = 0; r < 48; ++r) {
            const sampling::SamplingParams p = kiln::test::random_params(vocab, rng);
            const std::vector<int32_t> hist = kiln::test::random_history(vocab, rng);
            sampling::Sampler s(p, vocab, int32_t(hist.size() / 2));
            const std::vector<float> l = kiln::test::random_logits(vocab, rng);
            b.logits.insert(b.logits.end(), l.begin(), l.end());
            b.rows.emplace_back();
            s.plan_row(hist, b.rows.back(), b.adjust);
        }
        int edge = 0;
        compare(b, "random", edge);
        EXPECT_LE(edge, 2) << "vocab " << vocab;
        std::vector<float> after1, after2;  // deterministic: the same ids and buffers twice
        EXPECT_EQ(run(b, after1), run(b, after2)) << "vocab " << vocab;
        EXPECT_EQ(0, std::memcmp(after1.data(), after2.data(), after1.size() * sizeof(float))) << "vocab " << vocab;
    }
}

// Flat distributions over a large vocabulary: top-p keeps tens of thousands of tokens, many of them
// tied (logits on a grid), so both selections run on full histograms and the id tie-breaks.
TEST(CudaSample, LargeFlatVocabularies) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937_64 rng(5);
    const int32_t vocab = 151936;
    Batch b;
    b.vocab = vocab;
    std::normal_distribution<float> nd(0.0f, 0.5f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const float top_ps[] = {0.9f, 0.5f, 0.999f, 1.0f, 0.95f, 0.3f};
    const int32_t top_ks[] = {0, 0, 100000, 1000, 40, 0};
    for (int r = 0; r < 6; ++r) {
        for (int32_t i = 0; i < vocab; ++i) b.logits.push_back(std::round(nd(rng) * 8.0f) / 8.0f);
        SampleRow row;
        row.temperature = 0.9f;
        row.top_p = top_ps[r];
        row.top_k = top_ks[r];
        row.min_p = r == 3 ? 0.5f : 0.0f;
        row.u = u(rng);
        b.rows.push_back(row);
    }
    int edge = 0;
    compare(b, "flat", edge);
    EXPECT_LE(edge, 2);
}

// Drawn rows whose kept tokens are a few, far apart (top-k 5, most of the rest banned by -inf
// bias): whole runs of ids hold no mass, and u sweeps the CDF, its edges included.
TEST(CudaSample, SparseKeptSetsNeverDrawADroppedToken) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937_64 rng(9);
    const int32_t vocab = 4096;
    Batch b;
    b.vocab = vocab;
    const std::vector<float> l = kiln::test::random_logits(vocab, rng);
    for (int32_t id = 0; id < vocab; ++id)
        if (id % 700 != 3) b.adjust.push_back({id, -std::numeric_limits<float>::infinity(), 0, 0});
    for (int r = 0; r < 40; ++r) {
        b.logits.insert(b.logits.end(), l.begin(), l.end());
        SampleRow row;
        row.temperature = 1.0f;
        row.top_k = r % 2 ? 5 : 0;
        row.adjust_count = r % 4 < 2 ? int32_t(b.adjust.size()) : 0;
        row.u = r < 38 ? double(r) / 38.0 : 1.0 - 1e-16;
        b.rows.push_back(row);
    }
    int edge = 0;
    compare(b, "sparse", edge);
    EXPECT_LE(edge, 2);
}

TEST(CudaSample, DrawAtChosenPoints) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    // {0.125, 0.125, 0.25, 0.5}: the draw walks ids in order
    const std::vector<float> l = {std::log(0.125f), std::log(0.125f), std::log(0.25f), std::log(0.5f)};
    Batch b;
    b.vocab = 4;
    const double us[] = {0.01, 0.2, 0.3, 0.6, 0.9999};
    const int32_t want[] = {0, 1, 2, 3, 3};
    for (double u : us) {
        b.logits.insert(b.logits.end(), l.begin(), l.end());
        SampleRow row;
        row.temperature = 1.0f;
        row.u = u;
        b.rows.push_back(row);
    }
    std::vector<float> after;
    const std::vector<int32_t> ids = run(b, after);
    for (size_t r = 0; r < ids.size(); ++r) EXPECT_EQ(ids[r], want[r]) << "u " << us[r];
}

TEST(CudaSample, GreedyAllInfAndBadRanges) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    Batch b;
    b.vocab = 5;
    b.logits = {1,    nan,  3,   3,    2,     // greedy: 2
                -inf, -inf, nan, -inf, -inf,  // drawn but nothing finite: 0
                1,    2,    3,   4,    5,     // bias bans 4 and 3, greedy: 2
                1,    2,    3,   4,    5};    // entry range past the list: -1
    b.adjust = {{4, -inf, 0, 0}, {3, -inf, 0, 0}};
    SampleRow greedy, drawn, banned, broken;
    drawn.temperature = 1.0f;
    drawn.u = 0.5;
    banned.adjust_count = 2;
    broken.adjust_begin = 1;
    broken.adjust_count = 2;
    b.rows = {greedy, drawn, banned, broken};
    std::vector<float> after;
    const std::vector<int32_t> ids = run(b, after);
    EXPECT_EQ(ids[0], 2);
    EXPECT_EQ(ids[1], 0);
    EXPECT_EQ(ids[2], 2);
    EXPECT_EQ(ids[3], -1);
}

}  // namespace
}  // namespace kiln::kernels::cuda
