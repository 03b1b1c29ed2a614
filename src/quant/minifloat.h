// Narrow floating-point element formats (FP8 E4M3/E5M2, FP6 E3M2/E2M3, FP4 E2M1, E8M0 scales): one
// data-driven description per format and a generic, bit-exact encode/decode. The scalar oracle that
// packed quantizers and later SIMD/CUDA conversions are tested against.
//
// Specs: OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (E4M3 "FN": bias 7, no inf, NaN only
// S.1111.111, max 448; E5M2: IEEE-style bias 15, inf, NaNs, max 57344); OCP Microscaling Formats (MX)
// v1.0 section 5, concrete formats (FP6 E3M2 bias 3 max 28, FP6 E2M3 bias 1 max 7.5, FP4 E2M1 bias 1
// max 6, no inf or NaN; E8M0 scale: 2^(e-127), 0xFF = NaN, no sign, no zero).
//
// Invariants:
// - decode() is exact (every code is a float).
// - encode() rounds to nearest, ties to the even code (= even mantissa for formats with mantissa
//   bits), with subnormals; -0 keeps its sign where the format has one.
// - Saturation::kSaturate: finite values beyond max and +-inf clamp to +-max finite (MX, FP8
//   quantizers). Saturation::kNonSaturate: overflow (IEEE rule: the value rounded with an unbounded
//   exponent exceeds max) gives inf (E5M2) or NaN (E4M3, E8M0); formats with neither inf nor NaN
//   (FP6, FP4) always saturate.
// - NaN in: the NaN code (sign kept) where the format has one; formats without NaN (FP6, FP4) encode
//   NaN as +0 (MX carries NaN in the block scale instead, see mx.h).
// - E8M0 has no zero and no sign: +-0 and everything below 2^-127 encode to 0x00 (2^-127), negative
//   nonzero values encode to NaN (0xFF).
#pragma once

#include <cstdint>

namespace kiln::quant {

enum class NanEncoding {
    kNone,     // no NaN (FP6, FP4)
    kAllOnes,  // only exponent and mantissa all ones (E4M3 FN, E8M0)
    kIeee,     // top exponent with nonzero mantissa (E5M2)
};

// A sign/exponent/mantissa format of at most 8 bits. Codes occupy the low `bits()` bits of a byte:
// [sign][exponent][mantissa], sign absent where has_sign is false.
struct MiniFloatFormat {
    const char* name;
    int exp_bits;
    int man_bits;
    int bias;
    bool has_sign;
    bool has_inf;  // top exponent, zero mantissa is +-inf (IEEE style)
    NanEncoding nan;
    bool has_subnormals;  // exponent field 0 is 0.m * 2^(1-bias); false: it is 1.m * 2^(-bias), no zero

    constexpr int bits() const { return (has_sign ? 1 : 0) + exp_bits + man_bits; }
    constexpr int num_codes() const { return 1 << bits(); }
};

inline constexpr MiniFloatFormat kE4M3{"e4m3", 4, 3, 7, true, false, NanEncoding::kAllOnes, true};
inline constexpr MiniFloatFormat kE5M2{"e5m2", 5, 2, 15, true, true, NanEncoding::kIeee, true};
inline constexpr MiniFloatFormat kE3M2{"e3m2", 3, 2, 3, true, false, NanEncoding::kNone, true};
inline constexpr MiniFloatFormat kE2M3{"e2m3", 2, 3, 1, true, false, NanEncoding::kNone, true};
inline constexpr MiniFloatFormat kE2M1{"e2m1", 2, 1, 1, true, false, NanEncoding::kNone, true};
inline constexpr MiniFloatFormat kE8M0{"e8m0", 8, 0, 127, false, false, NanEncoding::kAllOnes, false};

enum class Saturation { kSaturate, kNonSaturate };

float decode(const MiniFloatFormat& fmt, uint8_t code);
uint8_t encode(const MiniFloatFormat& fmt, float value, Saturation sat = Saturation::kSaturate);

// Magnitude bits of the largest finite code (sign clear), and its value.
uint8_t max_finite_code(const MiniFloatFormat& fmt);
float max_finite(const MiniFloatFormat& fmt);
// Exponent of the largest normal value (MX "emax_elem"): 8 for E4M3, 15 E5M2, 4 E3M2, 2 E2M3/E2M1.
int emax(const MiniFloatFormat& fmt);
// The NaN code (positive), or -1 where the format has none.
int nan_code(const MiniFloatFormat& fmt);
bool is_nan_code(const MiniFloatFormat& fmt, uint8_t code);

}  // namespace kiln::quant
