// FP8 kernel blocks (quant/fp8_blocks.h) decoded by the scalar reference (kernels/ref/dequant.h)
// against quant::dequantize of the same matrix, bit for bit: E4M3 with per-tensor, per-channel and
// 128x128-block scales (edge tiles included) -> kE4m3B32, MXFP8 -> kMxfp8 (zero, tiny and large
// blocks). Also the hand-made block layouts and the errors: row length, NaN codes, NaN scale, a
// non-E4M3 element format.
#include "quant/fp8_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ref/dequant.h"

namespace kiln::quant {
namespace {

using core::DType;

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng);
    return v;
}

void expect_same_as_dequantize(DType t, const std::vector<uint8_t>& blocks, const std::vector<float>& want,
                               int64_t rows, int64_t cols) {
    const size_t row_bytes = size_t(*core::dtype_bytes(t, uint64_t(cols)));
    ASSERT_EQ(blocks.size(), row_bytes * size_t(rows));
    std::vector<float> got(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        ASSERT_TRUE(
            kernels::ref::dequantize_row(t, &blocks[size_t(r) * row_bytes], &got[size_t(r * cols)], cols).is_ok());
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) mismatches += std::memcmp(&got[i], &want[i], 4) != 0;
    EXPECT_EQ(mismatches, 0) << core::dtype_name(t);
}

TEST(Fp8Blocks, E4m3B32DecodesExactlyAsQuantDequantize) {
    const int64_t rows = 130, cols = 288;  // edge 128x128 tiles in both directions
    std::vector<float> x = gaussian(rows * cols, 1, 0.02f);
    for (int64_t c = 0; c < cols; ++c) x[size_t(5 * cols + c)] *= 1e4f;  // one loud row
    for (int64_t c = 0; c < cols; ++c) x[size_t(6 * cols + c)] = 0.0f;   // an all-zero row (scale 1)
    for (Fp8Granularity g : {Fp8Granularity::kPerTensor, Fp8Granularity::kPerChannel, Fp8Granularity::kBlock128}) {
        auto m = quantize_fp8(x, rows, cols, g);
        ASSERT_TRUE(m.is_ok());
        auto b = to_e4m3_b32_blocks(*m);
        ASSERT_TRUE(b.is_ok()) << b.status().message();
        expect_same_as_dequantize(DType::kE4m3B32, *b, dequantize(*m), rows, cols);
    }
}

TEST(Fp8Blocks, Mxfp8DecodesExactlyAsQuantDequantize) {
    const int64_t rows = 7, cols = 96;
    std::vector<float> x = gaussian(rows * cols, 2, 0.02f);
    for (int64_t i = 0; i < 32; ++i) x[size_t(32 + i)] = 0.0f;           // all-zero block
    for (int64_t i = 0; i < 32; ++i) x[size_t(cols + i)] *= 1e6f;        // a large block
    for (int64_t i = 0; i < 32; ++i) x[size_t(2 * cols + i)] *= 1e-30f;  // tiny: scale 2^-127 and below
    auto m = quantize_mxfp8(x, rows, cols);
    ASSERT_TRUE(m.is_ok());
    auto b = to_mxfp8_blocks(*m);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    expect_same_as_dequantize(DType::kMxfp8, *b, dequantize(*m), rows, cols);
}

TEST(Fp8Blocks, Layouts) {
    Fp8Matrix f;
    f.granularity = Fp8Granularity::kPerChannel;
    f.rows = 2;
    f.cols = 32;
    f.data.assign(64, 0);
    f.data[1] = 0x38;       // row 0 element 1: 1.0
    f.data[32 + 31] = 0xC4;  // row 1 element 31: -3.0 (sign, exponent 8, mantissa 4: 1.5 * 2)
    f.scales = {0.5f, 2.0f};
    auto b = to_e4m3_b32_blocks(f);
    ASSERT_TRUE(b.is_ok());
    ASSERT_EQ(b->size(), 72u);
    float d;
    std::memcpy(&d, b->data() + 36, 4);
    EXPECT_EQ(d, 2.0f);
    EXPECT_EQ((*b)[4 + 1], 0x38);
    float y[32];
    ASSERT_TRUE(kernels::ref::dequantize_row(DType::kE4m3B32, b->data(), y, 32).is_ok());
    EXPECT_EQ(y[1], 0.5f);
    ASSERT_TRUE(kernels::ref::dequantize_row(DType::kE4m3B32, b->data() + 36, y, 32).is_ok());
    EXPECT_EQ(y[31], -6.0f);

    MxMatrix m;
    m.element = kE4M3;
    m.rows = 1;
    m.cols = 32;
    m.row_bytes = 32;
    m.scales = {125};  // 2^-2
    m.data.assign(32, 0);
    m.data[2] = 0x01;  // the smallest subnormal, 2^-9
    m.data[3] = 0x7E;  // the largest finite, 448
    auto mb = to_mxfp8_blocks(m);
    ASSERT_TRUE(mb.is_ok());
    ASSERT_EQ(mb->size(), 33u);
    EXPECT_EQ((*mb)[0], 125);
    ASSERT_TRUE(kernels::ref::dequantize_row(DType::kMxfp8, mb->data(), y, 32).is_ok());
    EXPECT_EQ(y[2], std::ldexp(1.0f, -11));
    EXPECT_EQ(y[3], 112.0f);
}

TEST(Fp8Blocks, BadInputsAreInvalid) {
    auto f = quantize_fp8(gaussian(48, 3, 1.0f), 1, 48, Fp8Granularity::kPerChannel);
    ASSERT_TRUE(f.is_ok());
    EXPECT_EQ(to_e4m3_b32_blocks(*f).status().code(), core::StatusCode::kInvalidArgument);  // 48 % 32
    f = quantize_fp8(gaussian(64, 4, 1.0f), 1, 64, Fp8Granularity::kPerChannel);
    ASSERT_TRUE(f.is_ok());
    f->data[40] = 0x7F;  // NaN code
    auto bad = to_e4m3_b32_blocks(*f);
    EXPECT_EQ(bad.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("(0, 40)"), std::string::npos) << bad.status().message();
    f->scales.push_back(1.0f);  // wrong number of scales
    f->data[40] = 0;
    EXPECT_EQ(to_e4m3_b32_blocks(*f).status().code(), core::StatusCode::kInvalidArgument);

    auto m = quantize_mxfp8(gaussian(64, 5, 1.0f), 1, 64);
    ASSERT_TRUE(m.is_ok());
    m->scales[1] = 0xFF;  // NaN scale
    EXPECT_EQ(to_mxfp8_blocks(*m).status().code(), core::StatusCode::kInvalidArgument);
    m->scales[1] = 120;
    m->data[0] = 0xFF;
    EXPECT_EQ(to_mxfp8_blocks(*m).status().code(), core::StatusCode::kInvalidArgument);
    auto e5 = quantize_mx(kE5M2, gaussian(64, 6, 1.0f), 1, 64);
    ASSERT_TRUE(e5.is_ok());
    EXPECT_EQ(to_mxfp8_blocks(*e5).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(find_e4m3_nan(std::vector<uint8_t>{0x00, 0x7E, 0xFE}), -1);
    EXPECT_EQ(find_e4m3_nan(std::vector<uint8_t>{0x00, 0xFF}), 1);
    EXPECT_TRUE(kernels::ref::dequant_supported(DType::kE4m3B32));
    EXPECT_TRUE(kernels::ref::dequant_supported(DType::kMxfp8));
}

}  // namespace
}  // namespace kiln::quant
