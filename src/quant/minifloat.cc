// Generic encode/decode for the MiniFloatFormat descriptions (see minifloat.h for the rules).
// Encoding works on exact values: a float scaled by a power of two into a double is exact, so the
// rounding decision (floor, fraction, ties to even code) sees the true value, never a pre-rounded one.
#include "quant/minifloat.h"

#include <cmath>
#include <limits>

#include "core/check.h"

namespace kiln::quant {
namespace {

int magnitude_bits(const MiniFloatFormat& fmt) {
    return fmt.exp_bits + fmt.man_bits;
}
uint32_t magnitude_mask(const MiniFloatFormat& fmt) {
    return (1u << magnitude_bits(fmt)) - 1;
}
uint32_t top_exponent(const MiniFloatFormat& fmt) {
    return (1u << fmt.exp_bits) - 1;
}

}  // namespace

bool is_nan_code(const MiniFloatFormat& fmt, uint8_t code) {
    const uint32_t mag = code & magnitude_mask(fmt);
    switch (fmt.nan) {
        case NanEncoding::kNone:
            return false;
        case NanEncoding::kAllOnes:
            return mag == magnitude_mask(fmt);
        case NanEncoding::kIeee:
            return (mag >> fmt.man_bits) == top_exponent(fmt) && (mag & ((1u << fmt.man_bits) - 1)) != 0;
    }
    return false;
}

int nan_code(const MiniFloatFormat& fmt) {
    return fmt.nan == NanEncoding::kNone ? -1 : int(magnitude_mask(fmt));  // all ones is NaN in both kinds
}

uint8_t max_finite_code(const MiniFloatFormat& fmt) {
    if (fmt.has_inf || fmt.nan == NanEncoding::kIeee) {
        return uint8_t(((top_exponent(fmt) - 1) << fmt.man_bits) | ((1u << fmt.man_bits) - 1));
    }
    if (fmt.nan == NanEncoding::kAllOnes) return uint8_t(magnitude_mask(fmt) - 1);
    return uint8_t(magnitude_mask(fmt));
}

float max_finite(const MiniFloatFormat& fmt) {
    return decode(fmt, max_finite_code(fmt));
}

int emax(const MiniFloatFormat& fmt) {
    return std::ilogb(max_finite(fmt));
}

float decode(const MiniFloatFormat& fmt, uint8_t code) {
    KILN_CHECK(code < fmt.num_codes()) << fmt.name << ": code " << int(code) << " out of range";
    const int mbits = magnitude_bits(fmt);
    const uint32_t mag = code & magnitude_mask(fmt);
    const bool negative = fmt.has_sign && ((code >> mbits) & 1u);
    const uint32_t exp_field = mag >> fmt.man_bits;
    const uint32_t man_field = mag & ((1u << fmt.man_bits) - 1);
    float value;
    if (is_nan_code(fmt, code)) {
        value = std::numeric_limits<float>::quiet_NaN();
    } else if (fmt.has_inf && exp_field == top_exponent(fmt) && man_field == 0) {
        value = std::numeric_limits<float>::infinity();
    } else if (fmt.has_subnormals && exp_field == 0) {
        value = std::ldexp(float(man_field), 1 - fmt.bias - fmt.man_bits);
    } else {
        value = std::ldexp(float((1u << fmt.man_bits) + man_field), int(exp_field) - fmt.bias - fmt.man_bits);
    }
    return negative ? -value : value;
}

uint8_t encode(const MiniFloatFormat& fmt, float value, Saturation sat) {
    const int mbits = magnitude_bits(fmt);
    const uint32_t sign = (fmt.has_sign && std::signbit(value)) ? (1u << mbits) : 0u;
    if (std::isnan(value)) return fmt.nan == NanEncoding::kNone ? 0 : uint8_t(sign | uint32_t(nan_code(fmt)));
    if (!fmt.has_sign && value < 0) return fmt.nan == NanEncoding::kNone ? 0 : uint8_t(nan_code(fmt));

    const uint32_t max_code = max_finite_code(fmt);
    auto overflow = [&]() -> uint8_t {
        const bool clamp = sat == Saturation::kSaturate || (!fmt.has_inf && fmt.nan == NanEncoding::kNone);
        if (clamp) return uint8_t(sign | max_code);
        if (fmt.has_inf) return uint8_t(sign | (top_exponent(fmt) << fmt.man_bits));
        return uint8_t(sign | uint32_t(nan_code(fmt)));
    };

    const float a = std::fabs(value);
    if (std::isinf(a)) return overflow();
    if (a == 0) return uint8_t(sign);  // E8M0 has no zero: code 0 (2^-127) is the nearest value
    const int emin = fmt.has_subnormals ? 1 - fmt.bias : -fmt.bias;
    int e = std::ilogb(a);
    if (e < emin) {
        if (!fmt.has_subnormals) return uint8_t(sign);  // nothing smaller than code 0
        e = emin;                                       // subnormal range: fixed quantum 2^(emin-M)
    }
    // a = x * 2^(e-M); x < 2^(M+1) and the code of floor(x) quanta in binade e is (e+bias-1)*2^M + floor(x)
    // (x >= 2^M carries the implicit bit into the exponent field; subnormals have e+bias-1 == 0).
    const double x = std::ldexp(double(a), fmt.man_bits - e);
    const double whole = std::floor(x);
    const double frac = x - whole;
    int64_t code = int64_t(e + fmt.bias - 1) * (int64_t(1) << fmt.man_bits) + int64_t(whole);
    if (frac > 0.5 || (frac == 0.5 && (code & 1))) ++code;
    if (code > int64_t(max_code)) return overflow();
    return uint8_t(sign | uint32_t(code));
}

}  // namespace kiln::quant
