// kernels/cuda gemv_blocks (Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K weights as stored, f32 activations)
// against kernels/ref
// matmul on the same blocks: decode batches of 1-8 tokens, rows from 1 to 2048, k from one block to
// 5632; within 1e-4 of sum |x w| (another summation order); output rows past the batch untouched.
// Without a device only the argument checks run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/gemv_quant.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cuda {
namespace {

using core::DType;
using test::download;
using test::upload;

TEST(CudaGemv, ArgumentChecks) {
    const float* p = reinterpret_cast<const float*>(16);  // never dereferenced
    float* y = reinterpret_cast<float*>(16);
    EXPECT_EQ(gemv_blocks(DType::kQ8_0, p, 8, 48, p, 1, y).code(), core::StatusCode::kInvalidArgument);  // k % 32
    EXPECT_EQ(gemv_blocks(DType::kQ8_0, p, 8, 64, p, 9, y).code(), core::StatusCode::kInvalidArgument);  // m > 8
    EXPECT_EQ(gemv_blocks(DType::kQ8_0, nullptr, 8, 64, p, 1, y).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(gemv_blocks(DType::kQ2_K, p, 8, 256, p, 1, y).code(), core::StatusCode::kUnsupported);
    EXPECT_TRUE(gemv_blocks(DType::kQ8_0, p, 8, 64, p, 0, y).is_ok());
    EXPECT_EQ(dequantize_blocks(DType::kQ8_0, p, 48, y).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(dequantize_blocks(DType::kQ5_0, p, 64, y).code(), core::StatusCode::kUnsupported);
    EXPECT_TRUE(gemv_blocks_supports(DType::kQ4_1));
    EXPECT_TRUE(gemv_blocks_supports(DType::kQ6_K));
    EXPECT_FALSE(gemv_blocks_supports(DType::kQ2_K));
    EXPECT_EQ(gemv_blocks(DType::kQ4_K, p, 8, 96, p, 1, y).code(), core::StatusCode::kInvalidArgument);  // k % 256
}

TEST(CudaGemv, MatchesReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    struct Shape {
        int64_t n, k;
    };
    for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
        const size_t block_bytes = core::dtype_info(type).block_bytes;
        const int64_t block_elems = int64_t(core::dtype_info(type).block_size);
        for (const Shape s : {Shape{1, 32}, Shape{37, 64}, Shape{3, 256}, Shape{2048, 2048}, Shape{100, 5632}}) {
            if (s.k % block_elems != 0) continue;
            std::vector<uint8_t> w(size_t(s.n * s.k / block_elems) * block_bytes);
            for (uint8_t& b : w) b = uint8_t(rng());
            for (size_t off = 0; off < w.size(); off += block_bytes) {  // finite, small fp16 scales
                const uint16_t d = core::f32_to_fp16(0.01f * (1.0f + std::fabs(dist(rng))));
                const uint16_t mn = core::f32_to_fp16(0.08f * std::fabs(dist(rng)));
                if (type == DType::kQ6_K) {
                    std::memcpy(&w[off + 208], &d, 2);  // ql, qh, scales, then d
                    continue;
                }
                std::memcpy(&w[off], &d, 2);
                if (type == DType::kQ4_1) {  // the block's minimum (added)
                    const uint16_t neg = core::f32_to_fp16(-0.08f * std::fabs(dist(rng)));
                    std::memcpy(&w[off + 2], &neg, 2);
                }
                if (type == DType::kQ4_K || type == DType::kQ5_K) std::memcpy(&w[off + 2], &mn, 2);  // dmin
            }
            std::vector<float> wf(size_t(s.n * s.k));
            ASSERT_TRUE(ref::dequantize_row(type, w.data(), wf.data(), s.n * s.k).is_ok());
            const ref::WeightView view = ref::make_weight_view(w.data(), type, s.n, s.k);
            DeviceBuffer dw = upload(w);
            {  // the decoded copy equals the reference's values exactly
                DeviceBuffer dd = upload(std::vector<float>(wf.size(), NAN));
                ASSERT_TRUE(dequantize_blocks(type, dw.data(), s.n * s.k, dd.as<float>()).is_ok());
                const std::vector<float> got = download<float>(dd, wf.size());
                for (size_t i = 0; i < wf.size(); ++i) ASSERT_EQ(got[i], wf[i]) << core::dtype_name(type) << " " << i;
            }
            for (int64_t m : {1, 2, 3, 5, 8}) {
                std::vector<float> x(size_t(m * s.k));
                for (float& v : x) v = dist(rng);
                std::vector<float> want(size_t(m * s.n));
                ref::matmul(x.data(), view, nullptr, want.data(), m);
                DeviceBuffer dx = upload(x), dy = upload(std::vector<float>(size_t(kGemvMaxTokens * s.n), NAN));
                const core::Status st = gemv_blocks(type, dw.data(), s.n, s.k, dx.as<float>(), m, dy.as<float>());
                ASSERT_TRUE(st.is_ok()) << st.to_string();
                const std::vector<float> got = download<float>(dy, size_t(kGemvMaxTokens * s.n));
                for (int64_t t = 0; t < kGemvMaxTokens; ++t) {
                    for (int64_t r = 0; r < s.n; ++r) {
                        const float g = got[size_t(t * s.n + r)];
                        if (t >= m) {
                            ASSERT_TRUE(std::isnan(g)) << "row " << t << " past the batch was written";
                            continue;
                        }
                        double mag = 0;
                        for (int64_t i = 0; i < s.k; ++i)
                            mag += std::fabs(double(x[size_t(t * s.k + i)]) * wf[size_t(r * s.k + i)]);
                        ASSERT_NEAR(g, want[size_t(t * s.n + r)], 1e-4 * mag + 1e-6)
                            << core::dtype_name(type) << " n " << s.n << " k " << s.k << " m " << m << " at " << t
                            << "," << r;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cuda
