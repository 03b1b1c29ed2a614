// kernels/cuda gemv_blocks (Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1, the K-quants Q2_K - Q6_K and kiln's
// MXFP4 / NVFP4 / E4M3_B32 / MXFP8 blocks as stored, f32 activations)
// against kernels/ref
// matmul on the same blocks: decode batches of 1-8 tokens, rows from 1 to 2048, k from one block to
// 5632; within 1e-4 of sum |x w| (another summation order); output rows past the batch untouched.
// gemm_blocks (the tensor-core GEMM for prompt-sized steps, f16 activations) against a double
// product of the same f16 operands over shapes that straddle its tiles.
// Without a device only the argument checks run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/gemm_quant.h"
#include "kernels/cuda/gemv_quant.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cuda {
namespace {

using core::DType;
using test::download;
using test::random_blocks;
using test::upload;

constexpr DType kTypes[] = {DType::kQ8_0,  DType::kQ4_0,  DType::kQ4_1,    DType::kQ5_0, DType::kQ5_1,
                            DType::kQ2_K,  DType::kQ3_K,  DType::kQ4_K,    DType::kQ5_K, DType::kQ6_K,
                            DType::kMxfp4, DType::kNvfp4, DType::kE4m3B32, DType::kMxfp8, DType::kIq4Nl,
                            DType::kIq4Xs, DType::kTq1_0, DType::kTq2_0};

TEST(CudaGemv, ArgumentChecks) {
    const float* p = reinterpret_cast<const float*>(16);  // never dereferenced
    float* y = reinterpret_cast<float*>(16);
    EXPECT_EQ(gemv_blocks(DType::kQ8_0, p, 8, 48, p, 1, y).code(), core::StatusCode::kInvalidArgument);  // k % 32
    EXPECT_EQ(gemv_blocks(DType::kQ8_0, p, 8, 64, p, 9, y).code(), core::StatusCode::kInvalidArgument);  // m > 8
    EXPECT_EQ(gemv_blocks(DType::kQ8_0, nullptr, 8, 64, p, 1, y).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(gemv_blocks(DType::kBF16, p, 8, 256, p, 1, y).code(), core::StatusCode::kUnsupported);
    EXPECT_TRUE(gemv_blocks(DType::kQ8_0, p, 8, 64, p, 0, y).is_ok());
    EXPECT_EQ(dequantize_blocks(DType::kQ8_0, p, 48, y).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(dequantize_blocks(DType::kF16, p, 64, y).code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(dequantize_blocks(DType::kQ3_K, p, 64, y).code(), core::StatusCode::kInvalidArgument);  // % 256
    EXPECT_TRUE(gemv_blocks_supports(DType::kQ4_1));
    EXPECT_TRUE(gemv_blocks_supports(DType::kQ6_K));
    EXPECT_TRUE(gemv_blocks_supports(DType::kQ2_K));
    EXPECT_TRUE(gemv_blocks_supports(DType::kQ5_1));
    EXPECT_FALSE(gemv_blocks_supports(DType::kBF16));
    EXPECT_EQ(gemv_blocks(DType::kQ4_K, p, 8, 96, p, 1, y).code(), core::StatusCode::kInvalidArgument);  // k % 256
}

TEST(CudaGemv, MatchesReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    struct Shape {
        int64_t n, k;
    };
    for (DType type : kTypes) {
        const int64_t block_elems = int64_t(core::dtype_info(type).block_size);
        for (const Shape s : {Shape{1, 32}, Shape{37, 64}, Shape{3, 256}, Shape{2048, 2048}, Shape{100, 5632}}) {
            if (s.k % block_elems != 0) continue;
            const std::vector<uint8_t> w = random_blocks(type, s.n, s.k, rng);
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

// The FP4 / FP8 decoders on their special codes, bit for bit (any NaN equal to any NaN): E2M1 -0
// (code 8), E8M0 scale 2^-127 (e = 0) and NaN (e = 0xFF), E4M3 subnormals and NaN codes.
TEST(CudaGemv, SpecialCodesDecodeLikeTheReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (DType type : {DType::kMxfp4, DType::kNvfp4, DType::kE4m3B32, DType::kMxfp8}) {
        const size_t bb = core::dtype_info(type).block_bytes;
        const int64_t be = int64_t(core::dtype_info(type).block_size), blocks = 64 / be;
        std::vector<uint8_t> w(size_t(blocks) * bb);
        for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t(i * 37 + 11);  // every code appears
        for (int64_t b = 0; b < blocks; ++b) {
            uint8_t* blk = w.data() + b * int64_t(bb);
            if (type == DType::kMxfp4 || type == DType::kMxfp8) blk[0] = b == 0 ? 0 : 0xff;
            if (type == DType::kNvfp4) {
                const uint16_t d = core::f32_to_fp16(b == 0 ? 1.0f : -0.25f);
                std::memcpy(blk, &d, 2);
            }
            if (type == DType::kE4m3B32) {
                const float d = b == 0 ? 1.0f : 3.0f;
                std::memcpy(blk, &d, 4);
            }
        }
        std::vector<float> want(64);
        ASSERT_TRUE(ref::dequantize_row(type, w.data(), want.data(), 64).is_ok());
        DeviceBuffer dw = upload(w), dd = upload(std::vector<float>(64, 7.0f));
        ASSERT_TRUE(dequantize_blocks(type, dw.data(), 64, dd.as<float>()).is_ok());
        const std::vector<float> got = download<float>(dd, 64);
        for (size_t i = 0; i < 64; ++i) {
            if (std::isnan(want[i])) {
                EXPECT_TRUE(std::isnan(got[i])) << core::dtype_name(type) << " " << i;
                continue;
            }
            uint32_t a, b;
            std::memcpy(&a, &got[i], 4);
            std::memcpy(&b, &want[i], 4);
            EXPECT_EQ(a, b) << core::dtype_name(type) << " " << i << ": " << got[i] << " vs " << want[i];
        }
    }
}

TEST(CudaGemmBlocks, ArgumentChecks) {
    const __half* x = reinterpret_cast<const __half*>(16);  // never dereferenced
    float* y = reinterpret_cast<float*>(16);
    const auto bad = core::StatusCode::kInvalidArgument;
    EXPECT_EQ(gemm_blocks(DType::kQ4_0, x, 8, 48, x, 4, y).code(), bad);  // k % 32
    EXPECT_EQ(gemm_blocks(DType::kQ4_K, x, 8, 96, x, 4, y).code(), bad);  // k % 256
    EXPECT_EQ(gemm_blocks(DType::kQ4_0, nullptr, 8, 64, x, 4, y).code(), bad);
    EXPECT_EQ(gemm_blocks(DType::kQ4_0, x, 8, 64, x + 1, 4, y).code(), bad);  // x not 16-byte aligned
    EXPECT_EQ(gemm_blocks(DType::kQ4_0, x, 0, 64, x, 4, y).code(), bad);
    EXPECT_EQ(gemm_blocks(DType::kF32, x, 8, 256, x, 4, y).code(), core::StatusCode::kUnsupported);
    EXPECT_TRUE(gemm_blocks(DType::kQ4_0, x, 8, 64, x, 0, y).is_ok());
}

// The tensor-core GEMM against a double-precision product of the same f16 operands (x as given,
// each weight the reference's decoded value rounded to f16): only the f32 accumulation differs.
// Shapes straddle the 64 x 128 tiles; the row past m stays untouched.
TEST(CudaGemmBlocks, MatchesF16Reference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(8);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    struct Shape {
        int64_t n, k;
    };
    for (DType type : kTypes) {
        const int64_t block_elems = int64_t(core::dtype_info(type).block_size);
        for (const Shape s : {Shape{1, 32}, Shape{100, 64}, Shape{128, 256}, Shape{300, 512}, Shape{129, 2048}}) {
            if (s.k % block_elems != 0) continue;
            const std::vector<uint8_t> w = random_blocks(type, s.n, s.k, rng);
            std::vector<float> wf(size_t(s.n * s.k));
            ASSERT_TRUE(ref::dequantize_row(type, w.data(), wf.data(), s.n * s.k).is_ok());
            for (float& v : wf) v = core::fp16_to_f32(core::f32_to_fp16(v));
            DeviceBuffer dw = upload(w);
            for (int64_t m : {1, 17, 64, 65, 130}) {
                std::vector<uint16_t> xh(size_t(m * s.k));
                for (uint16_t& v : xh) v = core::f32_to_fp16(dist(rng));
                DeviceBuffer dx = upload(xh), dy = upload(std::vector<float>(size_t((m + 1) * s.n), NAN));
                const core::Status st = gemm_blocks(type, dw.data(), s.n, s.k, dx.as<__half>(), m, dy.as<float>());
                ASSERT_TRUE(st.is_ok()) << st.to_string();
                const std::vector<float> got = download<float>(dy, size_t((m + 1) * s.n));
                for (int64_t t = 0; t <= m; ++t) {
                    for (int64_t r = 0; r < s.n; ++r) {
                        const float g = got[size_t(t * s.n + r)];
                        if (t == m) {
                            ASSERT_TRUE(std::isnan(g)) << "row " << t << " past the batch was written";
                            continue;
                        }
                        double want = 0, mag = 0;
                        for (int64_t i = 0; i < s.k; ++i) {
                            const double p =
                                double(core::fp16_to_f32(xh[size_t(t * s.k + i)])) * wf[size_t(r * s.k + i)];
                            want += p;
                            mag += std::fabs(p);
                        }
                        ASSERT_NEAR(g, want, 2e-5 * mag + 1e-6) << core::dtype_name(type) << " n " << s.n << " k "
                                                                << s.k << " m " << m << " at " << t << "," << r;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cuda
