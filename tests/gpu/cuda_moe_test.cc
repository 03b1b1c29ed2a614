// kernels/cuda/moe.h against the CPU's mixture-of-experts pieces: moe_route and moe_group give
// ops::moe_route's ids (ties included) and weights and ops::MoeGroups' grouping exactly (weights
// within a few ulp: expf); moe_grouped_matmul gives each entry its expert's product (f32, bf16, f16
// and block weights against kernels/ref's decoded values, within 1e-4 of sum |x w|; float rows of
// any length), with an expert that got no rows and one with more than the 8 rows of a pass; moe_combine sums in ascending
// expert id like the CPU, bit for bit. Without a device only the argument checks run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/moe.h"
#include "kernels/ref/dequant.h"
#include "ops/moe.h"

namespace kiln::kernels::cuda {
namespace {

using core::DType;
using test::download;
using test::upload;

TEST(CudaMoeKernels, ArgumentChecks) {
    const float* p = reinterpret_cast<const float*>(16);  // never dereferenced
    float* f = reinterpret_cast<float*>(16);
    int32_t* i = reinterpret_cast<int32_t*>(16);
    const auto bad = core::StatusCode::kInvalidArgument;
    EXPECT_EQ(moe_route(p, 4, 8, 9, false, i, f).code(), bad);  // top 9 of 8
    EXPECT_EQ(moe_route(p, 4, 8, 0, false, i, f).code(), bad);
    EXPECT_EQ(moe_route(nullptr, 4, 8, 2, false, i, f).code(), bad);
    EXPECT_TRUE(moe_route(p, 0, 8, 2, false, i, f).is_ok());
    EXPECT_EQ(moe_group(i, 4, 2, 2000, i, i, i).code(), bad);  // over 1024 experts
    ExpertMatrices w{DType::kQ4_0, p, 4, 64, 48};  // k 48: not whole groups of 32
    EXPECT_EQ(moe_grouped_matmul(w, p, nullptr, 2, i, 8, f).code(), bad);
    w.k = 64;
    EXPECT_TRUE(moe_grouped_matmul(w, p, nullptr, 2, i, 0, f).is_ok());
    w.type = DType::kI8;
    EXPECT_EQ(moe_grouped_matmul(w, p, nullptr, 2, i, 8, f).code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(moe_combine(i, p, i, p, 4, 0, 64, f).code(), bad);
    EXPECT_EQ(add_sigmoid_gated_rows(p, p, 4, 0, f).code(), bad);
}

struct Routed {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    ops::MoeGroups groups;
};

// Logits on a coarse grid (many ties), routed on the host.
Routed route_on_host(const std::vector<float>& logits, int64_t rows, int64_t E, int64_t k, bool norm) {
    Routed r;
    r.ids.resize(size_t(rows * k));
    r.weights.resize(size_t(rows * k));
    ops::moe_route(logits.data(), rows, E, k, norm, r.ids.data(), r.weights.data());
    r.groups.build(r.ids.data(), rows, k, E);
    return r;
}

TEST(CudaMoeKernels, RouteAndGroupMatchTheHost) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(3);
    struct Case {
        int64_t rows, E, k;
        bool norm;
    };
    for (const Case c : {Case{1, 8, 2, true}, Case{37, 8, 2, false}, Case{300, 60, 4, true}, Case{5, 128, 8, true}}) {
        std::vector<float> logits(size_t(c.rows * c.E));
        for (float& l : logits) l = float(int(rng() % 7) - 3) * 0.5f;  // ties on every row
        const Routed want = route_on_host(logits, c.rows, c.E, c.k, c.norm);
        const size_t N = size_t(c.rows * c.k);
        DeviceBuffer dl = upload(logits), ids = upload(std::vector<int32_t>(N, -1)),
                     w = upload(std::vector<float>(N, NAN)), off = upload(std::vector<int32_t>(size_t(c.E) + 1, -1)),
                     ent = upload(std::vector<int32_t>(N, -1)), pos = upload(std::vector<int32_t>(N, -1));
        ASSERT_TRUE(moe_route(dl.as<float>(), c.rows, c.E, c.k, c.norm, ids.as<int32_t>(), w.as<float>()).is_ok());
        ASSERT_TRUE(moe_group(ids.as<int32_t>(), c.rows, c.k, c.E, off.as<int32_t>(), ent.as<int32_t>(),
                              pos.as<int32_t>())
                        .is_ok());
        EXPECT_EQ(download<int32_t>(ids, N), want.ids) << c.rows << " rows, top " << c.k << " of " << c.E;
        const std::vector<float> got_w = download<float>(w, N);
        for (size_t i = 0; i < N; ++i) EXPECT_NEAR(got_w[i], want.weights[i], 4e-6f * want.weights[i]) << i;
        const std::vector<int32_t> got_off = download<int32_t>(off, size_t(c.E) + 1), got_ent = download<int32_t>(ent, N),
                                   got_pos = download<int32_t>(pos, N);
        for (int64_t e = 0; e <= c.E; ++e) EXPECT_EQ(got_off[size_t(e)], want.groups.offsets[size_t(e)]) << e;
        for (size_t i = 0; i < N; ++i) {
            EXPECT_EQ(got_ent[i], want.groups.entries[i]) << i;
            EXPECT_EQ(got_ent[size_t(got_pos[i])], int32_t(i)) << "slot_pos is not entries' inverse at " << i;
        }
    }
}

// n x k weights per expert of `type`, their f32 values on the host.
std::vector<uint8_t> random_experts(DType type, int64_t E, int64_t n, int64_t k, std::mt19937& rng,
                                    std::vector<float>* values) {
    values->resize(size_t(E * n * k));
    std::normal_distribution<float> dist(0.0f, 0.2f);
    std::vector<uint8_t> w;
    if (type == DType::kF32 || type == DType::kBF16 || type == DType::kF16) {
        const size_t b = type == DType::kF32 ? 4 : 2;
        w.resize(values->size() * b);
        for (size_t i = 0; i < values->size(); ++i) {
            const float v = dist(rng);
            if (type == DType::kF32) {
                std::memcpy(&w[4 * i], &v, 4);
                (*values)[i] = v;
            } else {
                const uint16_t h = type == DType::kBF16 ? core::f32_to_bf16(v) : core::f32_to_fp16(v);
                std::memcpy(&w[2 * i], &h, 2);
                (*values)[i] = type == DType::kBF16 ? core::bf16_to_f32(h) : core::fp16_to_f32(h);
            }
        }
        return w;
    }
    w = test::random_blocks(type, E * n, k, rng);
    EXPECT_TRUE(ref::dequantize_row(type, w.data(), values->data(), E * n * k).is_ok());
    return w;
}

TEST(CudaMoeKernels, GroupedMatmulGivesEachEntryItsExpertsProduct) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t E = 5, n = 40, top_k = 2, rows = 13;
    // Expert 2 gets nothing, expert 0 more than 8 entries (two passes over its weights).
    std::vector<float> logits(size_t(rows * E), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        logits[size_t(r * E)] = 3.0f;
        logits[size_t(r * E + 1 + (r % 4 == 1 ? 3 : r % 4))] = 2.0f;  // 1, 4, 3 (never 2)
    }
    const Routed routed = route_on_host(logits, rows, E, top_k, true);
    ASSERT_EQ(routed.groups.count(2), 0);
    ASSERT_GT(routed.groups.count(0), 8);
    const int64_t N = rows * top_k;
    std::vector<int32_t> offsets(routed.groups.offsets.begin(), routed.groups.offsets.end());
    std::vector<int32_t> entries(routed.groups.entries.begin(), routed.groups.entries.end());
    DeviceBuffer d_off = upload(offsets), d_ent = upload(entries);
    // k 256, and 40 for the float types (a partial last group of 32)
    struct Case {
        DType type;
        int64_t k;
    };
    for (const Case c : {Case{DType::kF32, 256}, Case{DType::kBF16, 256}, Case{DType::kF16, 256}, Case{DType::kQ8_0, 256},
                         Case{DType::kQ4_0, 256}, Case{DType::kQ4_K, 256}, Case{DType::kF32, 40}, Case{DType::kBF16, 40}}) {
        const DType type = c.type;
        const int64_t k = c.k;
        std::vector<float> x(size_t(std::max(rows, N) * k));
        for (float& v : x) v = dist(rng);
        DeviceBuffer dx = upload(x);
        std::vector<float> wf;
        const std::vector<uint8_t> w = random_experts(type, E, n, k, rng, &wf);
        DeviceBuffer dw = upload(w);
        const ExpertMatrices m{type, dw.data(), E, n, k};
        for (const bool gather : {true, false}) {  // gate/up (rows gathered) and down (rows in entry order)
            DeviceBuffer dy = upload(std::vector<float>(size_t(N * n), NAN));
            const core::Status st = moe_grouped_matmul(m, dx.as<float>(), gather ? d_ent.as<int32_t>() : nullptr,
                                                       top_k, d_off.as<int32_t>(), N, dy.as<float>());
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            const std::vector<float> got = download<float>(dy, size_t(N * n));
            for (int64_t e = 0; e < E; ++e)
                for (int64_t i = offsets[size_t(e)]; i < offsets[size_t(e) + 1]; ++i) {
                    const float* xr = x.data() + (gather ? entries[size_t(i)] / top_k : i) * k;
                    for (int64_t r = 0; r < n; ++r) {
                        const float* wr = wf.data() + (e * n + r) * k;
                        double want = 0, mag = 0;
                        for (int64_t j = 0; j < k; ++j) {
                            want += double(xr[j]) * wr[j];
                            mag += std::fabs(double(xr[j]) * wr[j]);
                        }
                        ASSERT_NEAR(got[size_t(i * n + r)], want, 1e-4 * mag + 1e-6)
                            << core::dtype_name(type) << (gather ? " gathered" : "") << " expert " << e << " entry "
                            << i << " row " << r;
                    }
                }
        }
    }
}

TEST(CudaMoeKernels, CombineSumsInAscendingExpertIdLikeTheCpu) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t rows = 9, E = 16, k = 4, H = 300, N = rows * k;
    std::vector<float> logits(size_t(rows * E));
    for (float& l : logits) l = dist(rng);
    const Routed routed = route_on_host(logits, rows, E, k, false);
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) pos[size_t(routed.groups.entries[size_t(i)])] = int32_t(i);
    std::vector<float> y(static_cast<size_t>(N * H)), gate(static_cast<size_t>(rows)), shared(static_cast<size_t>(rows * H));
    for (float& v : y) v = dist(rng);
    for (float& v : gate) v = dist(rng);
    for (float& v : shared) v = dist(rng);
    std::vector<float> want(size_t(rows * H), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<int64_t> order(static_cast<size_t>(k));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return routed.ids[size_t(r * k + a)] < routed.ids[size_t(r * k + b)];
        });
        for (int64_t c = 0; c < H; ++c) {
            float o = 0.0f;
            for (const int64_t j : order) {
                volatile float prod = routed.weights[size_t(r * k + j)] * y[size_t(pos[size_t(r * k + j)] * H + c)];
                o = o + prod;
            }
            want[size_t(r * H + c)] = o;
        }
    }
    DeviceBuffer d_ids = upload(routed.ids), d_w = upload(routed.weights), d_pos = upload(pos), d_y = upload(y),
                 d_out = upload(std::vector<float>(size_t(rows * H), NAN));
    ASSERT_TRUE(moe_combine(d_ids.as<int32_t>(), d_w.as<float>(), d_pos.as<int32_t>(), d_y.as<float>(), rows, k, H,
                            d_out.as<float>())
                    .is_ok());
    const std::vector<float> got = download<float>(d_out, size_t(rows * H));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
    // The shared expert's gated add on top.
    DeviceBuffer d_g = upload(gate), d_s = upload(shared);
    ASSERT_TRUE(add_sigmoid_gated_rows(d_g.as<float>(), d_s.as<float>(), rows, H, d_out.as<float>()).is_ok());
    const std::vector<float> got2 = download<float>(d_out, size_t(rows * H));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < H; ++c) {
            const double g = 1.0 / (1.0 + std::exp(-double(gate[size_t(r)])));
            ASSERT_NEAR(got2[size_t(r * H + c)], want[size_t(r * H + c)] + g * shared[size_t(r * H + c)], 1e-5)
                << r << "," << c;
        }
}

}  // namespace
}  // namespace kiln::kernels::cuda
