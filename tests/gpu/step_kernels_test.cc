// The small CUDA kernels of the GPU forward pass (kernels/cuda convert, kv_write, argmax,
// embedding's bf16 -> f32 lookup) against the host: conversions bit-exact with core's rounding,
// gather and bias exact, argmax with sampling::argmax_lowest_id's tie and NaN rule, and the fused
// bias + q/k norm + RoPE + paged K/V write against kernels/ref rmsnorm and rope (f32 and f16
// caches, head_dim 8 and 128, shuffled slots). Argument checks run without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cuda {
namespace {

using test::download;
using test::randn;
using test::upload;
using kernels::KvDtype;

TEST(CudaStepKernels, ArgumentChecksWithoutLaunching) {
    const auto bad = core::StatusCode::kInvalidArgument;
    EXPECT_EQ(convert(nullptr, static_cast<__nv_bfloat16*>(nullptr), 4).code(), bad);
    EXPECT_TRUE(convert(nullptr, static_cast<__half*>(nullptr), 0).is_ok());
    EXPECT_EQ(add_bias_rows(nullptr, nullptr, 2, 0).code(), bad);
    EXPECT_EQ(gather_rows(nullptr, 4, nullptr, 1, nullptr).code(), bad);
    EXPECT_EQ(argmax_rows(nullptr, 1, 0, nullptr).code(), bad);
    QkvRopeKvWrite a;
    a.num_tokens = 1;
    a.num_heads = 2;
    a.num_kv_heads = 1;
    a.head_dim = 7;  // odd
    EXPECT_EQ(qkv_rope_kv_write(a).code(), bad);
    a.head_dim = 512;  // over 256
    EXPECT_EQ(qkv_rope_kv_write(a).code(), bad);
    a.head_dim = 64;  // null pointers
    EXPECT_EQ(qkv_rope_kv_write(a).code(), bad);
}

TEST(CudaStepKernels, ConvertGatherBiasEmbedding) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::vector<float> x = randn(1000, 1, 3.0f);
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = 1e-30f;    // below half's smallest subnormal: 0
    x[3] = 70000.0f;  // half overflow: inf
    DeviceBuffer dx = upload(x), db = upload(std::vector<uint16_t>(x.size())),
                 dh = upload(std::vector<uint16_t>(x.size()));
    ASSERT_TRUE(convert(dx.as<float>(), db.as<__nv_bfloat16>(), int64_t(x.size())).is_ok());
    ASSERT_TRUE(convert(dx.as<float>(), dh.as<__half>(), int64_t(x.size())).is_ok());
    const std::vector<uint16_t> b = download<uint16_t>(db, x.size()), h = download<uint16_t>(dh, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(b[i], core::f32_to_bf16(x[i])) << i;
        ASSERT_EQ(h[i], core::f32_to_fp16(x[i])) << i;
    }
    {  // saturating f16: beyond +-65504 clamps, NaN stays, everything else as convert
        std::vector<float> sx = x;
        sx[4] = -1e30f;
        sx[5] = std::numeric_limits<float>::quiet_NaN();
        sx[6] = 65519.0f;  // rounds to inf in plain conversion
        DeviceBuffer dsx = upload(sx), dsh = upload(std::vector<uint16_t>(sx.size()));
        ASSERT_TRUE(convert_saturating(dsx.as<float>(), dsh.as<__half>(), int64_t(sx.size())).is_ok());
        const std::vector<uint16_t> sh = download<uint16_t>(dsh, sx.size());
        EXPECT_EQ(sh[3], core::f32_to_fp16(65504.0f));
        EXPECT_EQ(sh[4], core::f32_to_fp16(-65504.0f));
        EXPECT_TRUE(std::isnan(core::fp16_to_f32(sh[5])));
        EXPECT_EQ(sh[6], core::f32_to_fp16(65504.0f));
        for (size_t i = 7; i < sx.size(); ++i) ASSERT_EQ(sh[i], core::f32_to_fp16(sx[i])) << i;
    }
    // gather rows 3, 0, 3 of a [10, 100] matrix; then add a bias to each row
    const std::vector<int32_t> ids = {3, 0, 3};
    DeviceBuffer dids = upload(ids), dg = upload(std::vector<float>(300));
    ASSERT_TRUE(gather_rows(dx.as<float>(), 100, dids.as<int32_t>(), 3, dg.as<float>()).is_ok());
    const std::vector<float> bias = randn(100, 2);
    DeviceBuffer dbias = upload(bias);
    ASSERT_TRUE(add_bias_rows(dg.as<float>(), dbias.as<float>(), 3, 100).is_ok());
    const std::vector<float> g = download<float>(dg, 300);
    for (int r = 0; r < 3; ++r)
        for (int j = 0; j < 100; ++j)
            ASSERT_EQ(g[size_t(r * 100 + j)], x[size_t(ids[size_t(r)] * 100 + j)] + bias[size_t(j)]);
    // bf16 table -> f32 rows: exact widening; an id out of range gives zeros
    DeviceBuffer dout = upload(std::vector<float>(300, NAN));
    const std::vector<int32_t> eids = {9, -1, 0};
    DeviceBuffer deids = upload(eids);
    ASSERT_TRUE(embedding(db.as<__nv_bfloat16>(), 10, 100, deids.as<int32_t>(), 3, dout.as<float>()).is_ok());
    const std::vector<float> e = download<float>(dout, 300);
    for (int j = 0; j < 100; ++j) {
        ASSERT_EQ(e[size_t(j)], core::bf16_to_f32(b[size_t(900 + j)]));
        ASSERT_EQ(e[size_t(100 + j)], 0.0f);
        ASSERT_EQ(e[size_t(200 + j)], core::bf16_to_f32(b[size_t(j)]));
    }
}

TEST(CudaStepKernels, ArgmaxLowestIdSkipsNan) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t n = 50000;
    std::vector<float> l = randn(size_t(4 * n), 3);
    l[size_t(0 * n + 40000)] = 9.0f;  // row 0: a late maximum, tied with an earlier one
    l[size_t(0 * n + 1234)] = 9.0f;
    l[size_t(1 * n + 7)] = NAN;  // row 1: NaN never wins
    l[size_t(1 * n + 49999)] = 8.0f;
    for (int64_t j = 0; j < n; ++j) l[size_t(2 * n + j)] = NAN;        // row 2: all NaN -> 0
    for (int64_t j = 0; j < n; ++j) l[size_t(3 * n + j)] = -INFINITY;  // row 3: all -inf -> 0
    DeviceBuffer dl = upload(l), di = upload(std::vector<int32_t>(4, -5));
    ASSERT_TRUE(argmax_rows(dl.as<float>(), 4, n, di.as<int32_t>()).is_ok());
    const std::vector<int32_t> ids = download<int32_t>(di, 4);
    EXPECT_EQ(ids[0], 1234);
    EXPECT_EQ(ids[1], 49999);
    EXPECT_EQ(ids[2], 0);
    EXPECT_EQ(ids[3], 0);
}

TEST(CudaStepKernels, QkvRopeKvWriteMatchesReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    struct Shape {
        int64_t heads, kv_heads, dim;
    };
    for (const Shape sh : {Shape{8, 4, 8}, Shape{32, 8, 128}, Shape{9, 3, 64}}) {
        for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kI8, KvDtype::kFp8}) {
            for (bool extras : {false, true}) {  // bias and q/k norms
                const int64_t T = 5, D = sh.dim, Q = sh.heads * D, KV = sh.kv_heads * D, W = Q + 2 * KV;
                const int64_t num_slots = 64;
                const std::vector<float> qkv = randn(size_t(T * W), 7);
                const std::vector<float> bias = randn(size_t(W), 8, 0.5f);
                std::vector<float> qn = randn(size_t(D), 9, 0.2f), kn = randn(size_t(D), 10, 0.2f);
                for (float& v : qn) v += 1.0f;
                for (float& v : kn) v += 1.0f;
                const std::vector<int32_t> positions = {0, 1, 17, 300, 4095};
                const std::vector<int64_t> slots = {40, 3, 63, 0, 21};
                std::vector<double> inv_freq(size_t(D / 2));
                for (int64_t i = 0; i < D / 2; ++i)
                    inv_freq[size_t(i)] = std::pow(10000.0, -2.0 * double(i) / double(D));
                // reference: the CPU layer's order (bias, q/k norm per head, rope)
                std::vector<float> wq(size_t(T * Q)), wk(size_t(T * KV)), wv(size_t(T * KV));
                for (int64_t t = 0; t < T; ++t) {
                    std::vector<float> row(qkv.begin() + t * W, qkv.begin() + (t + 1) * W);
                    if (extras)
                        for (int64_t j = 0; j < W; ++j) row[size_t(j)] += bias[size_t(j)];
                    float* q = row.data();
                    float* k = row.data() + Q;
                    if (extras) {
                        for (int64_t h = 0; h < sh.heads; ++h) ref::rmsnorm(q + h * D, qn.data(), q + h * D, D, 1e-6f);
                        for (int64_t h = 0; h < sh.kv_heads; ++h)
                            ref::rmsnorm(k + h * D, kn.data(), k + h * D, D, 1e-6f);
                    }
                    ref::rope(q, 1, sh.heads, D, &positions[size_t(t)], inv_freq);
                    ref::rope(k, 1, sh.kv_heads, D, &positions[size_t(t)], inv_freq);
                    std::copy_n(q, Q, wq.begin() + t * Q);
                    std::copy_n(k, KV, wk.begin() + t * KV);
                    std::copy_n(row.data() + Q + KV, KV, wv.begin() + t * KV);
                }
                const size_t row_bytes = size_t(kernels::kv_row_bytes(dt, sh.kv_heads, D)),
                             cache_bytes = size_t(num_slots) * row_bytes;
                DeviceBuffer dqkv = upload(qkv), dbias = upload(bias), dqn = upload(qn), dkn = upload(kn);
                DeviceBuffer dpos = upload(positions), dslots = upload(slots), dinv = upload(inv_freq);
                DeviceBuffer dq = upload(std::vector<float>(size_t(T * Q), NAN));
                DeviceBuffer dk = upload(std::vector<uint8_t>(cache_bytes)), dv = upload(std::vector<uint8_t>(cache_bytes));
                QkvRopeKvWrite a;
                a.qkv = dqkv.as<float>();
                a.bias = extras ? dbias.as<float>() : nullptr;
                a.q_norm = extras ? dqn.as<float>() : nullptr;
                a.k_norm = extras ? dkn.as<float>() : nullptr;
                a.eps = 1e-6f;
                a.positions = dpos.as<int32_t>();
                a.slots = dslots.as<int64_t>();
                a.inv_freq = dinv.as<double>();
                a.q_out = dq.as<float>();
                a.k_cache = dk.data();
                a.v_cache = dv.data();
                a.dtype = dt;
                a.num_tokens = T;
                a.num_heads = sh.heads;
                a.num_kv_heads = sh.kv_heads;
                a.head_dim = D;
                const core::Status st = qkv_rope_kv_write(a);
                ASSERT_TRUE(st.is_ok()) << st.to_string();
                const std::vector<float> gq = download<float>(dq, size_t(T * Q));
                // the norm's sum runs in another order, CUDA's double sincos may differ from the
                // host's in the last bit: within a few fp32 ulp
                const float tol = extras ? 4e-6f : 1e-6f;
                for (size_t i = 0; i < gq.size(); ++i)
                    ASSERT_NEAR(gq[i], wq[i], tol * (1.0f + std::fabs(wq[i]))) << "q " << i << " dim " << D;
                const std::vector<uint8_t> gk = download<uint8_t>(dk, cache_bytes), gv = download<uint8_t>(dv, cache_bytes);
                // The reference rows, stored by kernels/ref kv_store_row as the CPU stores them.
                std::vector<uint8_t> rk(row_bytes), rv(row_bytes);
                for (int64_t t = 0; t < T; ++t) {
                    ref::kv_store_row(dt, wk.data() + t * KV, sh.kv_heads, D, rk.data());
                    ref::kv_store_row(dt, wv.data() + t * KV, sh.kv_heads, D, rv.data());
                    const uint8_t* gk_row = gk.data() + size_t(slots[size_t(t)]) * row_bytes;
                    const uint8_t* gv_row = gv.data() + size_t(slots[size_t(t)]) * row_bytes;
                    // v: the bias add only, the same on both: the same bytes, codes and scales included
                    ASSERT_EQ(std::memcmp(gv_row, rv.data(), row_bytes), 0) << "v row " << t;
                    for (int64_t h = 0; h < sh.kv_heads; ++h) {
                        float amax = 0.0f;
                        for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(wk[size_t(t * KV + h * D + d)]));
                        for (int64_t d = 0; d < D; ++d) {
                            const float kt = ref::kv_load(dt, rk.data(), sh.kv_heads, D, h, d);
                            const float got = ref::kv_load(dt, gk_row, sh.kv_heads, D, h, d);
                            // k differs from the host's by an fp32 ulp or so, which may move it to the
                            // neighbouring half, int8 step (amax / 127) or fp8 step (1/8 of the value)
                            const float ktol = dt == KvDtype::kF32   ? tol * (1.0f + std::fabs(kt))
                                               : dt == KvDtype::kF16 ? 1e-3f * (1.0f + std::fabs(kt))
                                               : dt == KvDtype::kI8  ? 1.01f * amax / 127.0f
                                                                     : 0.13f * std::fabs(kt) + 1e-3f * amax;
                            ASSERT_NEAR(got, kt, ktol) << "k " << t << "," << h << "," << d;
                        }
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cuda
