// ops::make_linear / ops::linear with FP4 weights: a row length that is whole weight blocks but not
// whole 32-element activation blocks (NVFP4 with in = 16 * odd) must take the f32 reference path,
// never a Q8 kernel that would drop the tail; whole rows run the FP4 kernel. Both match the f32
// reference matmul over the dequantized weights (the kernel within activation rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/ref/transformer.h"
#include "ops/linear.h"

namespace kiln::ops {
namespace {

using core::DType;

std::vector<uint8_t> nvfp4_weights(int64_t rows, int64_t cols, uint32_t seed) {
    std::vector<uint8_t> buf(size_t(*core::dtype_bytes(DType::kNvfp4, uint64_t(rows * cols))));
    std::mt19937 rng(seed);
    for (uint8_t& b : buf) b = uint8_t(rng());
    for (size_t off = 0; off < buf.size(); off += 10) {
        const uint16_t h = core::f32_to_fp16(0.01f);
        std::memcpy(&buf[off], &h, 2);
    }
    return buf;
}

TEST(Fp4Linear, RowsOfSixteenTimesOddTakeTheReferencePath) {
    core::ThreadPool pool(2);
    const int64_t rows = 11, m = 3;
    for (int64_t cols : {48, 64}) {
        const std::vector<uint8_t> w = nvfp4_weights(rows, cols, uint32_t(cols));
        const kernels::ref::WeightView wv = kernels::ref::make_weight_view(w.data(), DType::kNvfp4, rows, cols);
        auto l = make_linear(wv, LinearOptions{});
        ASSERT_TRUE(l.is_ok()) << l.status().to_string();
        EXPECT_EQ(l->kernel == nullptr, cols % 32 != 0) << "cols " << cols;
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(size_t(m * cols));  // [m, cols]
        for (float& v : x) v = nd(rng);
        std::vector<float> y(size_t(m * rows), NAN), want(size_t(m * rows));  // [m, rows]
        std::vector<uint8_t> scratch;
        ASSERT_TRUE(linear(pool, x.data(), m, *l, nullptr, y.data(), scratch).is_ok());
        kernels::ref::matmul(x.data(), wv, nullptr, want.data(), m);
        for (size_t i = 0; i < y.size(); ++i) {
            // activation rounding: |x| <= ~4, d_x <= 4/127, |w| <= 0.06: 32 * 0.06 * d_x / 2 per block
            EXPECT_NEAR(y[i], want[i], cols % 32 != 0 ? 1e-5 : 0.06 * double(cols) * 0.5 * 4.0 / 127.0)
                << "cols " << cols << " index " << i;
        }
    }
}

}  // namespace
}  // namespace kiln::ops
