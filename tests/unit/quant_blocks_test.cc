// Checks the scalar block quantizers (MX, NVFP4, FP8 scaled, INT8, INT4): hand-computed MX shared
// exponents and packed bytes, per-element round-trip bounds (half an element ulp at the block scale,
// or the clamp distance), padding of short last groups, zero blocks, outliers, NaN/inf handling, and
// RMS error on Gaussian data (NVFP4 must beat MXFP4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quant/common.h"
#include "quant/fp8.h"
#include "quant/int_quant.h"
#include "quant/minifloat.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"

namespace kiln::quant {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    return x;
}

double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * double(a[i] - b[i]);
    return std::sqrt(s / double(a.size()));
}

// Half the element ulp at |y| (y in element units), from the format's own exponent/mantissa counts.
double half_ulp(const MiniFloatFormat& fmt, double y) {
    const int emin = 1 - fmt.bias;
    const int e = y == 0 ? emin : std::max(int(std::floor(std::log2(y))), emin);
    return std::ldexp(1.0, e - fmt.man_bits - 1);
}

// |deq - v| for an element quantized as encode(fmt, v / scale) * scale: within half an ulp, or the
// clamp distance when |v / scale| is beyond max. rel_slack covers fp32 rounding of v / scale.
void expect_element_bound(const MiniFloatFormat& fmt, float v, float deq, double scale, double rel_slack,
                          const char* what, size_t idx) {
    const double y = std::fabs(double(v)) / scale;
    const double max = max_finite(fmt);
    const double bound = y > max ? (y - max) * scale : half_ulp(fmt, y) * scale;
    const double err = std::fabs(double(deq) - double(v));
    EXPECT_LE(err, bound * (1 + rel_slack) + std::fabs(double(v)) * rel_slack)
        << what << " idx " << idx << " v=" << v << " deq=" << deq << " scale=" << scale;
}

TEST(QuantMx, SharedExponentHandExamples) {
    // MX v1.0 section 6.3: shared_exp = floor(log2(amax)) - emax_elem, stored as shared_exp + 127.
    EXPECT_EQ(mx_scale_code(kE2M1, 1.0f), 125);                  // 0 - 2 -> 2^-2
    EXPECT_EQ(mx_scale_code(kE2M1, 7.99f), 127);                 // 2 - 2 -> 2^0 (7.99 then saturates to 6)
    EXPECT_EQ(mx_scale_code(kE2M1, 0.75f), 124);                 // -1 - 2
    EXPECT_EQ(mx_scale_code(kE4M3, 448.0f), 127);                // 8 - 8
    EXPECT_EQ(mx_scale_code(kE4M3, 1.0f), 119);                  // 0 - 8
    EXPECT_EQ(mx_scale_code(kE4M3, 0.001f), 109);                // -10 - 8
    EXPECT_EQ(mx_scale_code(kE5M2, 1.0f), 112);                  // 0 - 15
    EXPECT_EQ(mx_scale_code(kE4M3, std::ldexp(1.0f, -130)), 0);  // -138 clamps to -127
    EXPECT_EQ(mx_scale_code(kE2M1, 0.0f), 0);
    EXPECT_EQ(mx_scale_code(kE2M1, std::numeric_limits<float>::max()), 252);  // 127 - 2
    EXPECT_EQ(mx_scale_code(kE2M1, std::numeric_limits<float>::infinity()), 0xFF);
    EXPECT_EQ(mx_scale_code(kE2M1, std::numeric_limits<float>::quiet_NaN()), 0xFF);
}

TEST(QuantMx, Mxfp4PackedBytesHandExample) {
    // amax 3 -> shared_exp 1 - 2 = -1, X = 0.5 (E8M0 126). 3/X = 6 -> 0x7; -1.1/X = -2.2 -> -2 -> 0xC;
    // 0.26/X = 0.52 -> 0.5 -> 0x1; 0.74/X = 1.48 -> 1.5 -> 0x3; the rest 0.
    std::vector<float> x(32, 0.0f);
    x[0] = 3.0f;
    x[1] = -1.1f;
    x[2] = 0.26f;
    x[3] = 0.74f;
    auto q = quantize_mxfp4(x, 1, 32);
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    ASSERT_EQ(q->scales.size(), 1u);
    EXPECT_EQ(q->scales[0], 126);
    ASSERT_EQ(q->data.size(), 16u);
    EXPECT_EQ(q->data[0], 0xC7);  // element 0 in the low nibble
    EXPECT_EQ(q->data[1], 0x31);
    for (size_t i = 2; i < 16; ++i) EXPECT_EQ(q->data[i], 0) << i;
    const std::vector<float> y = dequantize(*q);
    EXPECT_EQ(y[0], 3.0f);
    EXPECT_EQ(y[1], -1.0f);
    EXPECT_EQ(y[2], 0.25f);
    EXPECT_EQ(y[3], 0.75f);
}

TEST(QuantMx, Mxfp8SaturatesAndRoundTrips) {
    std::vector<float> x(32, 0.0f);
    x[0] = 500.0f;  // floor(log2 500) = 8 -> X = 1; 500 saturates to 448
    x[1] = -3.3f;
    auto q = quantize_mxfp8(x, 1, 32);
    ASSERT_TRUE(q.is_ok());
    EXPECT_EQ(q->scales[0], 127);
    EXPECT_EQ(q->data[0], 0x7E);
    EXPECT_EQ(q->data[1], encode(kE4M3, -3.3f));
    EXPECT_EQ(dequantize(*q)[0], 448.0f);
}

TEST(QuantMx, RoundTripWithinHalfUlpAtBlockScale) {
    const int64_t rows = 8, cols = 1000;
    std::vector<float> x = gaussian(rows * cols, 7);
    for (size_t i = 0; i < x.size(); i += 97) x[i] *= 50.0f;  // spread magnitudes across blocks
    for (const MiniFloatFormat* fmt : {&kE4M3, &kE5M2, &kE2M1}) {
        auto q = quantize_mx(*fmt, x, rows, cols);
        ASSERT_TRUE(q.is_ok());
        const std::vector<float> y = dequantize(*q);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                const uint8_t scale = q->scales[size_t(r * q->blocks_per_row() + c / kMxBlockSize)];
                const size_t i = size_t(r * cols + c);
                expect_element_bound(*fmt, x[i], y[i], std::ldexp(1.0, int(scale) - 127), 0, fmt->name, i);
            }
        }
    }
}

TEST(QuantMx, NanAndInfPoisonOnlyTheirBlock) {
    std::vector<float> x = gaussian(96, 3);
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[40] = -std::numeric_limits<float>::infinity();
    for (const MiniFloatFormat* fmt : {&kE4M3, &kE2M1}) {
        auto q = quantize_mx(*fmt, x, 1, 96);
        ASSERT_TRUE(q.is_ok());
        EXPECT_EQ(q->scales[0], 0xFF);
        EXPECT_EQ(q->scales[1], 0xFF);
        EXPECT_NE(q->scales[2], 0xFF);
        const std::vector<float> y = dequantize(*q);
        for (int c = 0; c < 64; ++c) EXPECT_TRUE(std::isnan(y[size_t(c)])) << c;
        for (int c = 64; c < 96; ++c) EXPECT_FALSE(std::isnan(y[size_t(c)])) << c;
    }
}

TEST(QuantMx, OutlierBlock) {
    std::vector<float> x = gaussian(64, 11, 0.01f);
    x[7] = 1000.0f;
    auto q = quantize_mxfp4(x, 1, 64);
    ASSERT_TRUE(q.is_ok());
    EXPECT_EQ(q->scales[0], 127 + 9 - 2);  // floor(log2 1000) = 9, X = 2^7
    const std::vector<float> y = dequantize(*q);
    EXPECT_EQ(y[7], 768.0f);  // 1000 / 128 = 7.8 is beyond E2M1's 6: clamped (section 6.3)
    for (int c = 0; c < 32; ++c) {
        if (c != 7) {
            EXPECT_EQ(y[size_t(c)], 0.0f) << c;  // 0.01 / 128 is far below E2M1's 0.5 / 2
        }
    }
    // The next block has its own scale and is unaffected.
    const double scale1 = std::ldexp(1.0, int(q->scales[1]) - 127);
    for (size_t c = 32; c < 64; ++c) expect_element_bound(kE2M1, x[c], y[c], scale1, 0, "block1", c);
}

TEST(QuantNvfp4, HandExample) {
    // amax(tensor) = 2688 = 6 * 448 -> tensor_scale 1. Block 0 has amax 2688 -> block scale 448;
    // block 1 has amax 6 -> block scale 1 (E4M3 0x38), so its elements are plain E2M1 encodes.
    std::vector<float> x(32, 0.0f);
    x[0] = 2688.0f;
    x[16] = 6.0f;
    x[17] = -2.5f;  // tie -> -2
    x[18] = 0.7f;   // -> 0.5
    auto q = quantize_nvfp4(x, 1, 32);
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    EXPECT_EQ(q->tensor_scale, 1.0f);
    ASSERT_EQ(q->block_scales.size(), 2u);
    EXPECT_EQ(q->block_scales[0], 0x7E);
    EXPECT_EQ(q->block_scales[1], 0x38);
    EXPECT_EQ(q->data[0], 0x07);
    EXPECT_EQ(q->data[8], 0xC7);  // elements 16 (6 -> 0x7, low) and 17 (-2 -> 0xC, high)
    EXPECT_EQ(q->data[9], 0x01);
    const std::vector<float> y = dequantize(*q);
    EXPECT_EQ(y[0], 2688.0f);
    EXPECT_EQ(y[17], -2.0f);
}

TEST(QuantNvfp4, RoundTripWithinHalfUlpAtBlockScale) {
    const int64_t rows = 16, cols = 512;
    std::vector<float> x = gaussian(rows * cols, 21);
    for (size_t i = 0; i < x.size(); i += 131) x[i] *= 20.0f;
    auto q = quantize_nvfp4(x, rows, cols);
    ASSERT_TRUE(q.is_ok());
    const std::vector<float> y = dequantize(*q);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const uint8_t bs = q->block_scales[size_t(r * q->blocks_per_row() + c / kNvfp4BlockSize)];
            const double scale = double(decode(kE4M3, bs)) * q->tensor_scale;
            const size_t i = size_t(r * cols + c);
            expect_element_bound(kE2M1, x[i], y[i], scale, 1e-6, "nvfp4", i);
        }
    }
}

TEST(QuantNvfp4, ZeroAndNonFinite) {
    std::vector<float> zeros(40, 0.0f);
    auto q = quantize_nvfp4(zeros, 2, 20);
    ASSERT_TRUE(q.is_ok());
    EXPECT_EQ(q->tensor_scale, 1.0f);
    for (uint8_t s : q->block_scales) EXPECT_EQ(s, 0x38);  // zero block scale -> 1.0 (ModelOpt)
    for (uint8_t b : q->data) EXPECT_EQ(b, 0);
    for (float v : dequantize(*q)) EXPECT_EQ(v, 0.0f);

    std::vector<float> x = gaussian(40, 5);
    x[23] = std::numeric_limits<float>::infinity();
    auto bad = quantize_nvfp4(x, 2, 20);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("row 1, column 3"), std::string::npos) << bad.status().message();
    EXPECT_FALSE(quantize_nvfp4(gaussian(40, 5), 2, 20, 0.0f).is_ok());
}

TEST(QuantNvfp4, BeatsMxfp4OnGaussian) {
    const int64_t rows = 64, cols = 4096;
    const std::vector<float> x = gaussian(rows * cols, 42);
    auto nv = quantize_nvfp4(x, rows, cols);
    auto mx = quantize_mxfp4(x, rows, cols);
    auto mx8 = quantize_mxfp8(x, rows, cols);
    auto f8 = quantize_fp8(x, rows, cols, Fp8Granularity::kPerChannel);
    auto i8 = quantize_int8_rows(x, rows, cols);
    auto i4s = quantize_int4(x, rows, cols, 32, Int4Mode::kSymmetric);
    auto i4a = quantize_int4(x, rows, cols, 32, Int4Mode::kAsymmetric);
    ASSERT_TRUE(nv.is_ok() && mx.is_ok() && mx8.is_ok() && f8.is_ok() && i8.is_ok() && i4s.is_ok() && i4a.is_ok());
    const double e_nv = rms_error(x, dequantize(*nv)), e_mx = rms_error(x, dequantize(*mx));
    std::printf(
        "RMS error on N(0,1) [%lld, %lld]: nvfp4 %.5f  mxfp4 %.5f  mxfp8 %.5f  fp8/channel %.5f  "
        "int8/row %.5f  int4 g32 sym %.5f  int4 g32 asym %.5f\n",
        (long long)rows, (long long)cols, e_nv, e_mx, rms_error(x, dequantize(*mx8)), rms_error(x, dequantize(*f8)),
        rms_error(x, dequantize(*i8)), rms_error(x, dequantize(*i4s)), rms_error(x, dequantize(*i4a)));
    EXPECT_LT(e_nv, e_mx);
}

TEST(QuantFp8, GranularitiesRoundTrip) {
    const int64_t rows = 200, cols = 300;  // partial 128x128 tiles on both edges
    std::vector<float> x = gaussian(rows * cols, 9);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] *= float(1 + r % 7) * (c < 128 ? 0.1f : 3.0f);
    }
    for (Fp8Granularity g : {Fp8Granularity::kPerTensor, Fp8Granularity::kPerChannel, Fp8Granularity::kBlock128}) {
        auto q = quantize_fp8(x, rows, cols, g);
        ASSERT_TRUE(q.is_ok());
        const size_t want_scales = g == Fp8Granularity::kPerTensor ? 1 : g == Fp8Granularity::kPerChannel ? 200 : 6;
        ASSERT_EQ(q->scales.size(), want_scales);
        const std::vector<float> y = dequantize(*q);
        std::vector<float> amax(q->scales.size(), 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                const size_t i = size_t(r * cols + c);
                const size_t s = size_t(q->scale_index(r, c));
                amax[s] = std::max(amax[s], std::fabs(x[i]));
                expect_element_bound(kE4M3, x[i], y[i], q->scales[s], 1e-6, "fp8", i);
            }
        }
        for (size_t s = 0; s < amax.size(); ++s) EXPECT_EQ(q->scales[s], amax[s] / 448.0f) << s;
    }
}

TEST(QuantFp8, ZeroAndNonFinite) {
    auto q = quantize_fp8(std::vector<float>(12, 0.0f), 3, 4, Fp8Granularity::kPerChannel);
    ASSERT_TRUE(q.is_ok());
    for (float s : q->scales) EXPECT_EQ(s, 1.0f);
    for (float v : dequantize(*q)) EXPECT_EQ(v, 0.0f);
    std::vector<float> x(12, 1.0f);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(quantize_fp8(x, 3, 4, Fp8Granularity::kPerTensor).status().code(), core::StatusCode::kInvalidArgument);
}

TEST(QuantInt, Int8RowsRoundTrip) {
    const int64_t rows = 5, cols = 77;
    std::vector<float> x = gaussian(rows * cols, 13);
    std::fill(x.begin() + 2 * cols, x.begin() + 3 * cols, 0.0f);  // an all-zero row
    auto q = quantize_int8_rows(x, rows, cols);
    ASSERT_TRUE(q.is_ok());
    EXPECT_EQ(q->scales[2], 1.0f);
    const std::vector<float> y = dequantize(*q);
    for (int64_t r = 0; r < rows; ++r) {
        float amax = 0;
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
        if (amax > 0) {
            EXPECT_EQ(q->scales[size_t(r)], amax / 127.0f);
        }
        for (int64_t c = 0; c < cols; ++c) {
            const size_t i = size_t(r * cols + c);
            EXPECT_LE(std::fabs(y[i] - x[i]), q->scales[size_t(r)] * 0.5f * (1 + 1e-5f)) << i;
            EXPECT_GE(q->data[i], -127);
        }
    }
    // Round half to even: 0.5 and 1.5 (in units of scale) -> 0 and 2.
    const std::vector<float> ties = {127.0f, 0.5f, 1.5f, -2.5f};
    auto t = quantize_int8_rows(ties, 1, 4);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->data[1], 0);
    EXPECT_EQ(t->data[2], 2);
    EXPECT_EQ(t->data[3], -2);
}

TEST(QuantInt, Int4RoundTripAndExactPoints) {
    const int64_t rows = 4, cols = 256;
    std::vector<float> x = gaussian(rows * cols, 17);
    for (int64_t g : {32, 64, 128}) {
        for (Int4Mode mode : {Int4Mode::kSymmetric, Int4Mode::kAsymmetric}) {
            auto q = quantize_int4(x, rows, cols, g, mode);
            ASSERT_TRUE(q.is_ok());
            const std::vector<float> y = dequantize(*q);
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                    const size_t i = size_t(r * cols + c);
                    const float scale = q->scales[size_t(r * q->groups_per_row() + c / g)];
                    EXPECT_LE(std::fabs(y[i] - x[i]), scale * 0.5f * (1 + 1e-5f)) << g << " " << i;
                }
            }
        }
    }
    // Symmetric: +amax and -amax are exact (codes 7 and -7 = 0x9). Asymmetric: 0 is exact.
    std::vector<float> s(32, 0.1f);
    s[0] = 2.0f;
    s[1] = -2.0f;
    auto qs = quantize_int4(s, 1, 32, 32, Int4Mode::kSymmetric);
    ASSERT_TRUE(qs.is_ok());
    EXPECT_EQ(qs->data[0], 0x97);
    EXPECT_EQ(dequantize(*qs)[1], -2.0f);
    std::vector<float> a(32, 0.0f);
    a[0] = 3.0f;
    a[1] = 1.0f;
    auto qa = quantize_int4(a, 1, 32, 32, Int4Mode::kAsymmetric);
    ASSERT_TRUE(qa.is_ok());
    EXPECT_EQ(qa->scales[0], 0.2f);  // range [0, 3]
    EXPECT_EQ(qa->zeros[0], 0);
    EXPECT_EQ(dequantize(*qa)[5], 0.0f);
    a[2] = -1.5f;  // range [-1.5, 3]: scale 0.3, zero round(5) = 5
    qa = quantize_int4(a, 1, 32, 32, Int4Mode::kAsymmetric);
    ASSERT_TRUE(qa.is_ok());
    EXPECT_EQ(qa->zeros[0], 5);
    EXPECT_EQ(dequantize(*qa)[5], 0.0f);
    EXPECT_EQ(quantize_int4(a, 1, 32, 48, Int4Mode::kSymmetric).status().code(), core::StatusCode::kInvalidArgument);
}

// A row whose length is not a multiple of the block quantizes exactly like the same row padded with
// zeros to the next multiple, and stores neither pad codes nor extra scales.
TEST(QuantPadding, ShortLastGroupEqualsZeroPadded) {
    for (int64_t cols : {172, 576, 171, 1}) {
        const int64_t rows = 3, padded = ((cols + 127) / 128) * 128;
        const std::vector<float> x = gaussian(rows * cols, uint32_t(cols));
        std::vector<float> xp(size_t(rows * padded), 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
            std::copy_n(x.begin() + r * cols, cols, xp.begin() + r * padded);
        }
        auto same_prefix = [&](const std::vector<float>& y, const std::vector<float>& yp) {
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                    ASSERT_EQ(y[size_t(r * cols + c)], yp[size_t(r * padded + c)]) << cols << " " << r << " " << c;
                }
            }
        };
        for (const MiniFloatFormat* fmt : {&kE4M3, &kE2M1}) {
            auto q = quantize_mx(*fmt, x, rows, cols);
            auto qp = quantize_mx(*fmt, xp, rows, padded);
            ASSERT_TRUE(q.is_ok() && qp.is_ok());
            EXPECT_EQ(int64_t(q->scales.size()), rows * ceil_div(cols, 32));
            EXPECT_EQ(q->row_bytes, fmt->bits() == 4 ? ceil_div(cols, 2) : cols);
            same_prefix(dequantize(*q), dequantize(*qp));
            if (fmt->bits() == 4 && cols % 2 == 1) {
                for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(q->data[size_t((r + 1) * q->row_bytes - 1)] >> 4, 0);
            }
        }
        auto nv = quantize_nvfp4(x, rows, cols);
        auto nvp = quantize_nvfp4(xp, rows, padded);
        ASSERT_TRUE(nv.is_ok() && nvp.is_ok());
        EXPECT_EQ(int64_t(nv->block_scales.size()), rows * ceil_div(cols, 16));
        same_prefix(dequantize(*nv), dequantize(*nvp));
        for (int64_t g : {32, 64, 128}) {
            for (Int4Mode mode : {Int4Mode::kSymmetric, Int4Mode::kAsymmetric}) {
                auto q = quantize_int4(x, rows, cols, g, mode);
                auto qp = quantize_int4(xp, rows, padded, g, mode);
                ASSERT_TRUE(q.is_ok() && qp.is_ok());
                EXPECT_EQ(int64_t(q->scales.size()), rows * ceil_div(cols, g));
                same_prefix(dequantize(*q), dequantize(*qp));
            }
        }
        auto f8 = quantize_fp8(x, rows, cols, Fp8Granularity::kBlock128);
        auto f8p = quantize_fp8(xp, rows, padded, Fp8Granularity::kBlock128);
        ASSERT_TRUE(f8.is_ok() && f8p.is_ok());
        EXPECT_EQ(int64_t(f8->scales.size()), ceil_div(cols, 128));
        same_prefix(dequantize(*f8), dequantize(*f8p));
    }
}

TEST(QuantBlocks, ZeroBlocksAndBadShapes) {
    const std::vector<float> zeros(64, 0.0f);
    for (const MiniFloatFormat* fmt : {&kE4M3, &kE2M1}) {
        auto q = quantize_mx(*fmt, zeros, 2, 32);
        ASSERT_TRUE(q.is_ok());
        for (uint8_t s : q->scales) EXPECT_EQ(s, 0);  // shared_exp clamped to -127
        for (uint8_t b : q->data) EXPECT_EQ(b, 0);
        for (float v : dequantize(*q)) EXPECT_EQ(v, 0.0f);
    }
    auto q4 = quantize_int4(zeros, 2, 32, 32, Int4Mode::kAsymmetric);
    ASSERT_TRUE(q4.is_ok());
    for (float v : dequantize(*q4)) EXPECT_EQ(v, 0.0f);
    EXPECT_EQ(quantize_mxfp4(zeros, 3, 32).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(quantize_mx(kE3M2, zeros, 2, 32).status().code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(quantize_int8_rows(zeros, -1, -64).status().code(), core::StatusCode::kInvalidArgument);
    auto empty = quantize_nvfp4({}, 0, 16);
    ASSERT_TRUE(empty.is_ok());
    EXPECT_TRUE(dequantize(*empty).empty());
}

}  // namespace
}  // namespace kiln::quant
