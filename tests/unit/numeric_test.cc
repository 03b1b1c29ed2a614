// Checks the scalar number-format conversions against exhaustive or hand-computed references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/numeric.h"

namespace kiln::core {
namespace {

// Every fp16 bit pattern decodes and encodes back to itself (NaNs stay NaN).
TEST(Numeric, Fp16RoundTripAllBitPatterns) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        float f = fp16_to_f32(uint16_t(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f)))) << h;
            continue;
        }
        EXPECT_EQ(f32_to_fp16(f), h) << "h=" << h << " f=" << f;
    }
}

// fp32 -> fp16 against a nearest search over every finite fp16 value (a sorted table of all of them,
// plus 65536 standing for +inf, which IEEE rounding reaches from 65520 up), ties to the even code.
// Inputs: every midpoint between neighbouring fp16 values and the f32 values one ulp either side of
// it, and a sweep over the f32 bit patterns with a stride of 257, both signs.
uint16_t nearest_fp16(float x) {
    static const std::vector<std::pair<double, uint16_t>> table = [] {
        std::vector<std::pair<double, uint16_t>> t;
        for (uint32_t h = 0; h < 0x7c00; ++h) t.push_back({double(fp16_to_f32(uint16_t(h))), uint16_t(h)});
        t.push_back({65536.0, 0x7c00});
        return t;
    }();
    const double a = std::fabs(double(x));
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (a >= 65536.0) return sign | 0x7c00;
    auto hi = std::lower_bound(table.begin(), table.end(), std::make_pair(a, uint16_t(0)));
    if (hi->first == a) return sign | hi->second;
    auto lo = hi - 1;
    const double dl = a - lo->first, dh = hi->first - a;
    if (dl != dh) return sign | (dl < dh ? lo->second : hi->second);
    return sign | ((lo->second & 1) == 0 ? lo->second : hi->second);
}

TEST(Numeric, Fp16MatchesANearestSearchOverAllValues) {
    std::vector<float> xs;
    for (uint32_t h = 0; h < 0x7c00; ++h) {
        const double lo = fp16_to_f32(uint16_t(h));
        const double hi = h + 1 < 0x7c00 ? double(fp16_to_f32(uint16_t(h + 1))) : 65536.0;
        const float mid = float((lo + hi) / 2);  // exact: fp16 midpoints fit in an f32
        xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
    }
    for (uint64_t b = 0; b < 0x7f800000; b += 257) xs.push_back(f32_from_bits(uint32_t(b)));
    xs.push_back(INFINITY);
    size_t n = 0;
    for (float x : xs) {
        for (float v : {x, -x}) {
            ASSERT_EQ(f32_to_fp16(v), nearest_fp16(v)) << "x=" << v << " bits=" << std::hex << f32_bits(v);
            ++n;
        }
    }
    EXPECT_GT(n, 16000000u);
}

TEST(Numeric, Fp16RoundsToNearestEven) {
    // 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1.0).
    EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
    // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even).
    EXPECT_EQ(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
    EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);   // rounds up to inf
    EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
    EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
    EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
    EXPECT_EQ(f32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
}

TEST(Numeric, Bf16) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        float f = bf16_to_f32(uint16_t(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_bf16(f), h);
    }
    EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie -> even
    EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Numeric, Fp8) {
    EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
    EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
    EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
    EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
    EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
    EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7c)));
}

TEST(DType, SizesAndNames) {
    EXPECT_EQ(dtype_bytes(DType::kQ4_K, 512).value(), 288u);
    EXPECT_FALSE(dtype_bytes(DType::kQ4_0, 33).has_value());
    EXPECT_FALSE(dtype_bytes(DType::kF32, UINT64_MAX / 2).has_value());
    EXPECT_EQ(dtype_from_name("Q6_K"), DType::kQ6_K);
    EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
    EXPECT_FALSE(dtype_from_name("q9_9").has_value());
}

}  // namespace
}  // namespace kiln::core
