// fp16 and fp8 conversions (see numeric.h).
#include "core/numeric.h"

#include <cmath>

namespace kiln::core {

float fp16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf / NaN
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);
        float v = std::ldexp(float(man), -24);  // subnormal: man * 2^-24, exact in fp32
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                        // below fp16 normal range: subnormal or zero
        if (abs < 0x33000000u) return sign;         // < 2^-25 rounds to 0 (2^-25 ties to even 0)
        uint32_t exp = abs >> 23;
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - exp;                 // value = man * 2^(exp-150); unit 2^-24
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) ++q;
        return uint16_t(sign | q);
    }
    uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, nearest even
    return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

float fp8_e4m3_to_f32(uint8_t v) {
    bool neg = v & 0x80;
    uint32_t exp = (v >> 3) & 0xf;
    uint32_t man = v & 0x7;
    float r;
    if (exp == 0xf && man == 0x7) return std::nanf("");
    if (exp == 0) r = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
    else r = std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
    return neg ? -r : r;
}

uint8_t f32_to_fp8_e4m3(float f) {
    const uint32_t u = f32_bits(f), abs = u & 0x7fffffffu;
    const uint8_t sign = uint8_t((u >> 24) & 0x80u);
    if (abs > 0x7f800000u) return 0x7f;               // NaN
    if (abs >= 0x43e00000u) return sign | 0x7e;       // >= 448 (inf too): the largest finite
    if (abs < 0x3c800000u) {                          // below 2^-6: subnormal steps of 2^-9
        const float q = std::nearbyint(f32_from_bits(abs) * 512.0f);  // exact product; ties to even
        return uint8_t(sign | uint8_t(q));            // q = 8 is 2^-6, the first normal: same code
    }
    const uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1u);  // mantissa to 3 bits, nearest even
    if (r >= 0x43e00000u) return sign | 0x7e;         // rounded past 448 (to 480): saturate
    return uint8_t(sign | (((r >> 23) - 120) << 3) | ((r >> 20) & 7u));
}

float fp8_e5m2_to_f32(uint8_t v) { return fp16_to_f32(uint16_t(v) << 8); }

}  // namespace kiln::core
