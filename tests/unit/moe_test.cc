// The mixture-of-experts block on the CPU (ops/moe.h, ops::CpuBackend::moe_mlp) against its definition
// (formats/hyper_params.h), with experts made to be told apart: expert e's MLP is (e + 1) * silu(x) * x
// and the router's logits are c_e * x[0], so which experts a row gets, and with what weight, is known
// in closed form. A wrong expert index, a row scattered to the wrong place or a weight applied to the
// wrong slot changes the output by a whole multiple of silu(x) * x.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu_backend.h"
#include "ops/moe.h"

namespace kiln::ops {
namespace {

TEST(MoeRoute, TopKInLogitOrderTiesToTheLowerId) {
    const float logits[] = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f};
    int32_t ids[3];
    float w[3];
    moe_route(logits, 1, 5, 3, /*norm_topk=*/false, ids, w);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 2);  // 3.0 twice: expert 1 first, then 2
    EXPECT_EQ(ids[2], 4);
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - 3.0);
    EXPECT_NEAR(w[0], 1.0 / sum, 1e-6);
    EXPECT_NEAR(w[2], std::exp(-1.0) / sum, 1e-6);
    moe_route(logits, 1, 5, 3, /*norm_topk=*/true, ids, w);
    const double chosen = 2.0 + std::exp(-1.0);
    EXPECT_NEAR(w[0], 1.0 / chosen, 1e-6);
    EXPECT_NEAR(w[1], 1.0 / chosen, 1e-6);
    EXPECT_NEAR(w[2], std::exp(-1.0) / chosen, 1e-6);
}

TEST(MoeRoute, AllTiedPicksTheFirstExperts) {
    const float logits[] = {0.5f, 0.5f, 0.5f, 0.5f};
    int32_t ids[2];
    float w[2];
    moe_route(logits, 1, 4, 2, true, ids, w);
    EXPECT_EQ(ids[0], 0);
    EXPECT_EQ(ids[1], 1);
    EXPECT_FLOAT_EQ(w[0], 0.5f);
}

TEST(MoeGroups, EachExpertsRowsInRowOrder) {
    const int32_t ids[] = {2, 0, /*row 1*/ 0, 1, /*row 2*/ 2, 1};
    MoeGroups g;
    g.build(ids, 3, 2, 4);
    EXPECT_EQ(g.offsets, (std::vector<int64_t>{0, 2, 4, 6, 6}));
    EXPECT_EQ(g.entries, (std::vector<int64_t>{1, 2, 3, 5, 0, 4}));  // r * k + j
    EXPECT_EQ(g.count(3), 0);
}

constexpr int64_t kH = 32, kE = 4;
// Router logit of expert e is kC[e] * x[0]: x[0] > 0 picks experts 1 and 3, x[0] < 0 experts 0 and 2.
constexpr float kC[kE] = {0.0f, 3.0f, 1.0f, 2.0f};

struct Block {
    std::vector<std::vector<float>> storage;
    std::vector<std::unique_ptr<CpuWeight>> owned;
    std::vector<const Weight*> gate_up, down;
    MoeWeights w;

    kernels::ref::WeightView view(std::vector<float> m, int64_t rows, int64_t cols) {
        storage.push_back(std::move(m));
        return kernels::ref::make_weight_view(storage.back().data(), core::DType::kF32, rows, cols);
    }
    const CpuWeight* add(std::vector<float> m, int64_t rows, int64_t cols) {
        auto lin = make_linear(view(std::move(m), rows, cols), {});
        EXPECT_TRUE(lin.is_ok()) << lin.status().to_string();
        owned.push_back(CpuWeight::of(std::move(*lin)));
        return owned.back().get();
    }
    // A gated MLP's [gate; up] as the CPU model builds it (fused when the kernels allow).
    const CpuWeight* add_gate_up(std::vector<float> gate, std::vector<float> up) {
        const kernels::ref::WeightView parts[] = {view(std::move(gate), kH, kH), view(std::move(up), kH, kH)};
        auto w = CpuWeight::fuse(parts, kSwigluBlock, {});
        EXPECT_TRUE(w.is_ok()) << w.status().to_string();
        owned.push_back(std::move(*w));
        return owned.back().get();
    }
    static std::vector<float> identity(float scale) {
        std::vector<float> m(size_t(kH * kH), 0.0f);
        for (int64_t i = 0; i < kH; ++i) m[size_t(i * kH + i)] = scale;
        return m;
    }
    explicit Block(bool shared) {
        std::vector<float> router(size_t(kE * kH), 0.0f);
        for (int64_t e = 0; e < kE; ++e) router[size_t(e * kH)] = kC[e];
        w.router = add(router, kE, kH);
        for (int64_t e = 0; e < kE; ++e) {
            gate_up.push_back(add_gate_up(identity(1.0f), identity(1.0f)));
            down.push_back(add(identity(float(e + 1)), kH, kH));
        }
        w.gate_up = gate_up;
        w.down = down;
        if (shared) {  // shared expert: 10 * silu(x) * x, gated by sigmoid(x[1])
            w.shared_gate_up = add_gate_up(identity(1.0f), identity(1.0f));
            w.shared_down = add(identity(10.0f), kH, kH);
            std::vector<float> g(size_t(kH), 0.0f);
            g[1] = 1.0f;
            w.shared_gate = add(g, 1, kH);
        }
    }
};

double silu_x(double x) {
    return x / (1.0 + std::exp(-x)) * x;
}

// The block's output for row x, from the definition.
std::vector<double> expected(const float* x, bool norm, bool shared) {
    double logits[kE], max = -1e30, sum = 0;
    for (int64_t e = 0; e < kE; ++e) max = std::max(max, logits[e] = double(kC[e]) * x[0]);
    for (double l : logits) sum += std::exp(l - max);
    const int a = x[0] > 0 ? 1 : 0, b = x[0] > 0 ? 3 : 2;  // the two largest logits
    double wa = std::exp(logits[a] - max) / sum, wb = std::exp(logits[b] - max) / sum;
    if (norm) {
        const double s = wa + wb;
        wa /= s, wb /= s;
    }
    std::vector<double> out(static_cast<size_t>(kH));
    const double g = 1.0 / (1.0 + std::exp(-double(x[1])));
    for (int64_t i = 0; i < kH; ++i) {
        out[size_t(i)] = (wa * (a + 1) + wb * (b + 1)) * silu_x(x[i]);
        if (shared) out[size_t(i)] += g * 10.0 * silu_x(x[i]);
    }
    return out;
}

std::vector<float> rows_of_inputs(int64_t rows) {
    std::vector<float> x(size_t(rows * kH));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < kH; ++i)
            x[size_t(r * kH + i)] = float(std::sin(0.7 * double(r * kH + i) + 0.3)) * (r % 2 ? -1.0f : 1.0f) *
                                    (i == 0 ? 1.0f + 0.1f * float(r) : 1.0f);
    return x;
}

class MoeMlp : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// Both ways of running the experts: one thread (expert after expert, each over its rows) and two
// threads with few rows (the experts side by side, one per thread).
TEST_P(MoeMlp, MatchesTheDefinitionWithKnownExperts) {
    const auto [norm, shared] = GetParam();
    for (int threads : {1, 2}) {
        core::ThreadPool pool(threads);
        CpuBackend be(&pool, kernels::cpu::Isa::kRef);
        Block blk(shared);
        const int64_t rows = 7;
        const std::vector<float> x = rows_of_inputs(rows);
        std::vector<float> out(size_t(rows * kH));
        ASSERT_TRUE(be.moe_mlp(blk.w, MoeParams{2, norm, GatedAct::kSilu}, x.data(), rows, out.data()).is_ok());
        for (int64_t r = 0; r < rows; ++r) {
            const std::vector<double> want = expected(&x[size_t(r * kH)], norm, shared);
            for (int64_t i = 0; i < kH; ++i)
                ASSERT_NEAR(out[size_t(r * kH + i)], want[size_t(i)], 1e-5 * (1.0 + std::abs(want[size_t(i)])))
                    << threads << " threads, row " << r << " column " << i;
        }
    }
}

TEST_P(MoeMlp, EachRowAloneEqualsTheBatchBitForBit) {
    const auto [norm, shared] = GetParam();
    core::ThreadPool pool(2);
    CpuBackend be(&pool, kernels::cpu::Isa::kRef);
    Block blk(shared);
    const int64_t rows = 20;  // batched: expert after expert (40 routed rows); alone: side by side
    const std::vector<float> x = rows_of_inputs(rows);
    std::vector<float> batched(size_t(rows * kH)), alone(static_cast<size_t>(kH));
    const MoeParams p{2, norm, GatedAct::kSilu};
    ASSERT_TRUE(be.moe_mlp(blk.w, p, x.data(), rows, batched.data()).is_ok());
    for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(be.moe_mlp(blk.w, p, &x[size_t(r * kH)], 1, alone.data()).is_ok());
        EXPECT_EQ(std::vector<float>(batched.begin() + r * kH, batched.begin() + (r + 1) * kH), alone) << "row " << r;
    }
}

// Expert parallelism's parts (Backend::moe_router / moe_experts / moe_combine): two "ranks", each
// holding two of the four experts (the others null), each routing the rows in two ranges and filling
// its experts' slots; the slots put together
// and combined in two row ranges give moe_mlp's result bit for bit (int8 activations: the
// default kernels), and moe_mlp refuses a block with experts missing.
TEST_P(MoeMlp, ExpertHalvesOnTwoRanksEqualTheWholeBitForBit) {
    const auto [norm, shared] = GetParam();
    core::ThreadPool pool(2);
    CpuBackend be(&pool, kernels::cpu::best_isa());
    Block blk(shared);
    const int64_t rows = 9;
    const std::vector<float> x = rows_of_inputs(rows);
    const MoeParams p{2, norm, GatedAct::kSilu};
    std::vector<float> whole(size_t(rows * kH));
    ASSERT_TRUE(be.moe_mlp(blk.w, p, x.data(), rows, whole.data()).is_ok());
    MoeSlots rank[2];
    for (int r = 0; r < 2; ++r) {
        std::vector<const Weight*> gu = blk.gate_up, dn = blk.down;
        for (int64_t e = 0; e < kE; ++e)
            if (e / 2 != r) gu[size_t(e)] = dn[size_t(e)] = nullptr;
        MoeWeights mine = blk.w;
        mine.gate_up = gu;
        mine.down = dn;
        ASSERT_TRUE(be.moe_router(mine, p, x.data(), 0, 4, rank[r]).is_ok());  // in two row ranges
        ASSERT_TRUE(be.moe_router(mine, p, x.data(), 4, rows - 4, rank[r]).is_ok());
        ASSERT_TRUE(be.moe_experts(mine, p, x.data(), rows, rank[r]).is_ok());
        if (r == 0) {
            std::vector<float> out(size_t(rows * kH));
            EXPECT_FALSE(be.moe_mlp(mine, p, x.data(), rows, out.data()).is_ok());
        }
    }
    ASSERT_EQ(rank[0].ids, rank[1].ids);
    MoeSlots all = rank[0];
    for (int64_t s = 0; s < rows * 2; ++s)  // each slot from the rank holding its expert
        if (all.ids[size_t(s)] / 2 == 1)
            std::copy_n(rank[1].y.data() + s * kH, kH, all.y.data() + s * kH);
    std::vector<float> combined(size_t(rows * kH));
    ASSERT_TRUE(be.moe_combine(blk.w, p, x.data(), 0, 4, all, combined.data()).is_ok());
    ASSERT_TRUE(be.moe_combine(blk.w, p, x.data(), 4, rows - 4, all, combined.data() + 4 * kH).is_ok());
    EXPECT_EQ(combined, whole);
}

INSTANTIATE_TEST_SUITE_P(NormShared, MoeMlp,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

}  // namespace
}  // namespace kiln::ops
