// Scalar conversions for the storage number formats: IEEE fp16, bfloat16, OCP fp8 (E4M3FN, E5M2).
// Bit-exact: fp32 -> fp16/bf16 rounds to nearest even and keeps NaN a NaN; decoding is exact.
// Spec: IEEE 754-2008 binary16; OCP 8-bit Floating Point Specification (OFP8) rev 1.0.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::core {

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);

// fp8 E4M3FN: no infinities, 0x7f/0xff are NaN, max 448. E5M2: IEEE-like with inf/NaN.
float fp8_e4m3_to_f32(uint8_t v);
// f32 -> E4M3FN, round to nearest even, saturating: |f| >= 448 (inf included) gives +-448 (0x7e /
// 0xfe), NaN gives 0x7f (OFP8's saturation mode; CUDA's __nv_cvt_float_to_fp8 with __NV_SATFINITE).
uint8_t f32_to_fp8_e4m3(float f);
float fp8_e5m2_to_f32(uint8_t v);

}  // namespace kiln::core
