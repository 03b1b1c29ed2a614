// Checks the scalar number-format conversions against exhaustive or hand-computed references.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/numeric.h"

namespace kiln::core {
namespace {

// Reference fp32 -> fp16 by exhaustive nearest search over all fp16 values (ties to even).
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
