// kernels/cuda Gemm (cuBLASLt) against a double-precision reference on the same bf16 / fp16 inputs:
// y [m, n] = x [m, k] @ w [n, k]^T for decode (m = 1) and prefill shapes, odd sizes included; f32
// output within fp32 accumulation error (1e-4 of sum |x w|), bf16 output within a bf16 rounding.
// Without a device only the host-side checks run.
#include "kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/device.h"

namespace kiln::kernels::cuda {
namespace {

using test::upload;

TEST(CudaGemm, CreateWithoutADeviceSaysSo) {
    if (device_count() > 0) GTEST_SKIP() << "a device is present";
    auto g = Gemm::create();
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), core::StatusCode::kUnsupported);
    EXPECT_TRUE(cublas_status(CUBLAS_STATUS_SUCCESS, "x").is_ok());
    const core::Status bad = cublas_status(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul(...)");
    EXPECT_EQ(bad.code(), core::StatusCode::kUnsupported);
    EXPECT_NE(bad.message().find("cublasLtMatmul(...)"), std::string::npos) << bad.message();
    EXPECT_EQ(cublas_status(CUBLAS_STATUS_ALLOC_FAILED, "x").code(), core::StatusCode::kOutOfMemory);
}

TEST(CudaGemm, MatchesDoubleReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto g = Gemm::create();
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    struct Shape {
        int64_t m, n, k;
    };
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const Shape s :
         {Shape{1, 64, 64}, Shape{1, 4096, 4096}, Shape{7, 130, 96}, Shape{64, 576, 576}, Shape{129, 1000, 2048}}) {
        for (bool half : {false, true}) {
            std::vector<uint16_t> x(size_t(s.m * s.k)), w(size_t(s.n * s.k));
            std::vector<float> xf(x.size()), wf(w.size());
            for (size_t i = 0; i < x.size(); ++i) {
                x[i] = half ? core::f32_to_fp16(dist(rng)) : core::f32_to_bf16(dist(rng));
                xf[i] = half ? core::fp16_to_f32(x[i]) : core::bf16_to_f32(x[i]);
            }
            for (size_t i = 0; i < w.size(); ++i) {
                w[i] = half ? core::f32_to_fp16(0.05f * dist(rng)) : core::f32_to_bf16(0.05f * dist(rng));
                wf[i] = half ? core::fp16_to_f32(w[i]) : core::bf16_to_f32(w[i]);
            }
            DeviceBuffer dx = upload(x), dw = upload(w), dy = upload(std::vector<float>(size_t(s.m * s.n)));
            DeviceBuffer dyb = upload(std::vector<uint16_t>(size_t(s.m * s.n)));
            core::Status st =
                half ? (*g)->run(dx.as<__half>(), dw.as<__half>(), dy.as<float>(), s.m, s.n, s.k)
                     : (*g)->run(dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.as<float>(), s.m, s.n, s.k);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            if (!half) {
                st = (*g)->run(dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dyb.as<__nv_bfloat16>(), s.m, s.n, s.k);
                ASSERT_TRUE(st.is_ok()) << st.to_string();
            }
            std::vector<float> y(size_t(s.m * s.n));
            std::vector<uint16_t> yb(y.size());
            ASSERT_TRUE(dy.copy_to_host(y.data(), y.size() * 4).is_ok());
            ASSERT_TRUE(dyb.copy_to_host(yb.data(), yb.size() * 2).is_ok());
            for (int64_t i = 0; i < s.m; ++i) {
                for (int64_t j = 0; j < s.n; ++j) {
                    double want = 0, mag = 0;
                    for (int64_t p = 0; p < s.k; ++p) {
                        const double prod = double(xf[size_t(i * s.k + p)]) * wf[size_t(j * s.k + p)];
                        want += prod;
                        mag += std::fabs(prod);
                    }
                    const size_t o = size_t(i * s.n + j);
                    ASSERT_NEAR(y[o], want, 1e-4 * mag + 1e-6) << (half ? "fp16" : "bf16") << " m " << s.m << " n "
                                                               << s.n << " k " << s.k << " at " << i << "," << j;
                    if (!half) {
                        ASSERT_NEAR(core::bf16_to_f32(yb[o]), want, 1e-4 * mag + 8e-3 * std::fabs(want) + 1e-6);
                    }
                }
            }
        }
    }
    EXPECT_TRUE((*g)->run(static_cast<const __nv_bfloat16*>(nullptr), nullptr, static_cast<float*>(nullptr), 0, 8, 8)
                    .is_ok());  // m = 0: nothing to do
    EXPECT_EQ(
        (*g)->run(static_cast<const __nv_bfloat16*>(nullptr), nullptr, static_cast<float*>(nullptr), 1, 8, 8).code(),
        core::StatusCode::kInvalidArgument);
}

// The f32 path (weights the GPU model keeps in f32): FP32 arithmetic, no TF32, so within fp32
// rounding of the double reference.
TEST(CudaGemm, F32MatchesDoubleReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto g = Gemm::create();
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    std::mt19937 rng(4);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 64}, {5, 172, 64}, {33, 576, 1536}}) {
        std::vector<float> x(size_t(m * k)), w(size_t(n * k));
        for (float& v : x) v = dist(rng);
        for (float& v : w) v = 0.05f * dist(rng);
        DeviceBuffer dx = upload(x), dw = upload(w), dy = upload(std::vector<float>(size_t(m * n)));
        const core::Status st = (*g)->run(dx.as<float>(), dw.as<float>(), dy.as<float>(), m, n, k);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        std::vector<float> y(size_t(m * n));
        ASSERT_TRUE(dy.copy_to_host(y.data(), y.size() * 4).is_ok());
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double want = 0, mag = 0;
                for (int64_t p = 0; p < k; ++p) {
                    const double prod = double(x[size_t(i * k + p)]) * w[size_t(j * k + p)];
                    want += prod;
                    mag += std::fabs(prod);
                }
                // TF32 (10-bit mantissa) would miss this by ~1e-3 * mag.
                ASSERT_NEAR(y[size_t(i * n + j)], want, 2e-6 * mag + 1e-7) << m << "x" << n << "x" << k;
            }
    }
}

}  // namespace
}  // namespace kiln::kernels::cuda
