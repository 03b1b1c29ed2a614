// FP4 kernel blocks (quant/fp4_blocks.h) decoded by the scalar reference (kernels/ref/dequant.h)
// against quant::dequantize of the same matrix: MXFP4 bit for bit (including the NaN scale), NVFP4
// within the fp16 rounding of its folded block scale (|d16 - d| <= 2^-11 |d| + 2^-25, times |e2m1|),
// and that bound is also shown to be reached (the deviation is real, not zero). Also the hand-made
// block layouts (nibble order) and the size/shape errors.
#include "quant/fp4_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
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

std::vector<float> decode_rows(DType t, const std::vector<uint8_t>& blocks, int64_t rows, int64_t cols) {
    std::vector<float> out(size_t(rows * cols));
    const size_t row_bytes = size_t(*core::dtype_bytes(t, uint64_t(cols)));
    EXPECT_EQ(blocks.size(), row_bytes * size_t(rows));
    for (int64_t r = 0; r < rows; ++r)
        EXPECT_TRUE(
            kernels::ref::dequantize_row(t, &blocks[size_t(r) * row_bytes], &out[size_t(r * cols)], cols).is_ok());
    return out;
}

TEST(Fp4Blocks, Mxfp4DecodesExactlyAsQuantDequantize) {
    const int64_t rows = 7, cols = 96;
    std::vector<float> x = gaussian(rows * cols, 1, 0.02f);
    for (int64_t i = 0; i < 32; ++i) x[size_t(32 + i)] = 0.0f;           // all-zero block: scale code 0
    for (int64_t i = 0; i < 32; ++i) x[size_t(cols + i)] *= 1e6f;        // a large block
    for (int64_t i = 0; i < 32; ++i) x[size_t(2 * cols + i)] *= 1e-30f;  // tiny: clamped scale 2^-127
    x[size_t(3 * cols + 5)] = NAN;                                       // NaN block (scale 0xFF)
    auto m = quantize_mxfp4(x, rows, cols);
    ASSERT_TRUE(m.is_ok());
    auto b = to_mxfp4_blocks(*m);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    const std::vector<float> got = decode_rows(DType::kMxfp4, *b, rows, cols), want = dequantize(*m);
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
            EXPECT_TRUE(std::isnan(got[i])) << i;
        } else {
            EXPECT_EQ(0, std::memcmp(&got[i], &want[i], 4)) << i << ": " << got[i] << " vs " << want[i];
        }
    }
}

TEST(Fp4Blocks, Mxfp4LayoutIsGgmlBlockMxfp4) {
    MxMatrix m;
    m.element = kE2M1;
    m.rows = 1;
    m.cols = 32;
    m.row_bytes = 16;
    m.scales = {130};  // 2^3
    m.data.assign(16, 0);
    m.data[0] = 0x21;  // element 0 code 1 (0.5), element 1 code 2 (1.0)
    m.data[8] = 0xF0;  // element 16 code 0, element 17 code 0xF (-6)
    auto b = to_mxfp4_blocks(m);
    ASSERT_TRUE(b.is_ok());
    ASSERT_EQ(b->size(), 17u);
    EXPECT_EQ((*b)[0], 130);
    EXPECT_EQ((*b)[1], 0x01);  // qs[0]: element 0 low, element 16 high
    EXPECT_EQ((*b)[2], 0xF2);  // qs[1]: element 1 low, element 17 high
    float y[32];
    ASSERT_TRUE(kernels::ref::dequantize_row(DType::kMxfp4, b->data(), y, 32).is_ok());
    EXPECT_EQ(y[0], 4.0f);
    EXPECT_EQ(y[1], 8.0f);
    EXPECT_EQ(y[16], 0.0f);
    EXPECT_EQ(y[17], -48.0f);
}

TEST(Fp4Blocks, Nvfp4WithinFp16ScaleRounding) {
    const int64_t rows = 9, cols = 160;
    std::vector<float> x = gaussian(rows * cols, 2, 0.03f);
    for (int64_t i = 0; i < 16; ++i) x[size_t(cols + i)] *= 1e-4f;  // a block with a subnormal fp16 scale
    auto m = quantize_nvfp4(x, rows, cols);
    ASSERT_TRUE(m.is_ok());
    auto b = to_nvfp4_blocks(*m);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    const std::vector<float> got = decode_rows(DType::kNvfp4, *b, rows, cols), want = dequantize(*m);
    double max_dev = 0;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const size_t i = size_t(r * cols + c);
            const float d = decode(kE4M3, m->block_scales[size_t(r * (cols / 16) + c / 16)]) * m->tensor_scale;
            const double bound = 6.0 * (std::ldexp(std::fabs(d), -11) + std::ldexp(1.0, -25));
            const double dev = std::fabs(double(got[i]) - double(want[i]));
            EXPECT_LE(dev, bound) << "row " << r << " col " << c << ": " << got[i] << " vs " << want[i];
            max_dev = std::max(max_dev, dev);
        }
    }
    EXPECT_GT(max_dev, 0.0) << "fp16 folding of the scales should be visible on random data";
}

TEST(Fp4Blocks, Nvfp4LayoutAndScaleFolding) {
    Nvfp4Matrix m;
    m.rows = 1;
    m.cols = 16;
    m.row_bytes = 8;
    m.block_scales = {0x38};  // E4M3 1.0
    m.tensor_scale = 0.25f;
    m.data.assign(8, 0);
    m.data[0] = 0x73;  // element 0 code 3 (1.5), element 1 code 7 (6)
    m.data[4] = 0x09;  // element 8 code 9 (-0.5)
    auto b = to_nvfp4_blocks(m);
    ASSERT_TRUE(b.is_ok());
    ASSERT_EQ(b->size(), 10u);
    uint16_t h;
    std::memcpy(&h, b->data(), 2);
    EXPECT_EQ(core::fp16_to_f32(h), 0.25f);
    EXPECT_EQ((*b)[2], 0x93);  // qs[0]: element 0 low, element 8 high
    EXPECT_EQ((*b)[3], 0x07);  // qs[1]: element 1 low, element 9 high
    float y[16];
    ASSERT_TRUE(kernels::ref::dequantize_row(DType::kNvfp4, b->data(), y, 16).is_ok());
    EXPECT_EQ(y[0], 0.375f);
    EXPECT_EQ(y[1], 1.5f);
    EXPECT_EQ(y[8], -0.125f);
}

TEST(Fp4Blocks, BadShapesAreInvalid) {
    auto mx = quantize_mxfp4(gaussian(48, 3, 1.0f), 1, 48);
    ASSERT_TRUE(mx.is_ok());
    EXPECT_EQ(to_mxfp4_blocks(*mx).status().code(), core::StatusCode::kInvalidArgument);
    auto nv = quantize_nvfp4(gaussian(40, 4, 1.0f), 1, 40);
    ASSERT_TRUE(nv.is_ok());
    EXPECT_EQ(to_nvfp4_blocks(*nv).status().code(), core::StatusCode::kInvalidArgument);
    // a block scale product beyond fp16
    nv = quantize_nvfp4(gaussian(32, 5, 1.0f), 1, 32);
    ASSERT_TRUE(nv.is_ok());
    nv->tensor_scale = 1e6f;
    EXPECT_EQ(to_nvfp4_blocks(*nv).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_TRUE(kernels::ref::dequant_supported(DType::kMxfp4));
    EXPECT_TRUE(kernels::ref::dequant_supported(DType::kNvfp4));
}

}  // namespace
}  // namespace kiln::quant
