// quant::to_q8_0 / to_q4_0 / to_q4_1 against quant::dequantize, decoded by the GGML reference
// dequantizer (kernels::ref::dequantize_row): equal up to the fp16 rounding of the scales.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref/dequant.h"
#include "quant/ggml_blocks.h"

namespace kiln::quant {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> x(size_t(rows * cols));
    for (float& v : x) v = nd(rng);
    return x;
}

std::vector<float> ggml_dequant(core::DType t, const std::vector<uint8_t>& blocks, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    EXPECT_TRUE(kernels::ref::dequantize_row(t, blocks.data(), out.data(), n).is_ok());
    return out;
}

TEST(QuantGgmlBlocks, Int8ToQ8_0) {
    const int64_t rows = 6, cols = 96;
    std::vector<float> x = random_matrix(rows, cols, 1);
    auto m = quantize_int8_rows(x, rows, cols);
    ASSERT_TRUE(m.is_ok());
    auto q = to_q8_0(*m);
    ASSERT_TRUE(q.is_ok());
    const std::vector<float> ref = dequantize(*m), got = ggml_dequant(core::DType::kQ8_0, *q, rows * cols);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], std::fabs(ref[i]) * 1e-3f + 1e-9f) << i;
}

TEST(QuantGgmlBlocks, Int4ToQ4_0AndQ4_1AtEveryGroupSize) {
    const int64_t rows = 5, cols = 256;
    std::vector<float> x = random_matrix(rows, cols, 2);
    for (int64_t g : {32, 64, 128}) {
        auto sym = quantize_int4(x, rows, cols, g, Int4Mode::kSymmetric);
        ASSERT_TRUE(sym.is_ok());
        auto q0 = to_q4_0(*sym);
        ASSERT_TRUE(q0.is_ok());
        std::vector<float> ref = dequantize(*sym), got = ggml_dequant(core::DType::kQ4_0, *q0, rows * cols);
        for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], std::fabs(ref[i]) * 1e-3f + 1e-9f);
        auto asym = quantize_int4(x, rows, cols, g, Int4Mode::kAsymmetric);
        ASSERT_TRUE(asym.is_ok());
        auto q1 = to_q4_1(*asym);
        ASSERT_TRUE(q1.is_ok());
        ref = dequantize(*asym);
        got = ggml_dequant(core::DType::kQ4_1, *q1, rows * cols);
        for (size_t i = 0; i < ref.size(); ++i) {
            const int64_t r = int64_t(i) / cols, grp = (int64_t(i) % cols) / g;
            const float s = asym->scales[size_t(r * asym->groups_per_row() + grp)];
            // d * q and m = -zero * d each carry one fp16 rounding: at most 2^-11 of 15 * d each.
            EXPECT_NEAR(got[i], ref[i], 2 * 15 * s * 4.9e-4f) << "group " << g << " i " << i;
        }
        EXPECT_FALSE(to_q4_1(*sym).is_ok());  // wrong mode
        EXPECT_FALSE(to_q4_0(*asym).is_ok());
    }
}

TEST(QuantGgmlBlocks, RowsThatAreNotWholeBlocksAreErrors) {
    std::vector<float> x = random_matrix(2, 172, 3);
    auto m = quantize_int4(x, 2, 172, 32, Int4Mode::kSymmetric);
    ASSERT_TRUE(m.is_ok());
    EXPECT_EQ(to_q4_0(*m).status().code(), core::StatusCode::kInvalidArgument);
    auto i8 = quantize_int8_rows(x, 2, 172);
    ASSERT_TRUE(i8.is_ok());
    EXPECT_FALSE(to_q8_0(*i8).is_ok());
}

}  // namespace
}  // namespace kiln::quant
