// Checks quant/minifloat against references written here from the specs (OFP8 rev 1.0 tables, MX
// v1.0 section 5): every code decoded by the textbook formula, and encode against an
// exhaustive nearest-value search with ties to the even code, in both saturation modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "quant/minifloat.h"

namespace kiln::quant {
namespace {

enum class Special { kNone, kE4M3, kIeee, kE8M0 };

// The spec facts, restated independently of MiniFloatFormat's fields.
struct Ref {
    const MiniFloatFormat* fmt;
    int e_bits, m_bits, bias;
    bool has_sign;
    Special special;
    double max;         // largest finite value
    double beyond_max;  // the next value an unbounded exponent would have (for the overflow rule)
};

const Ref kRefs[] = {
    {&kE4M3, 4, 3, 7, true, Special::kE4M3, 448, 480},
    {&kE5M2, 5, 2, 15, true, Special::kIeee, 57344, 65536},
    {&kE3M2, 3, 2, 3, true, Special::kNone, 28, 32},
    {&kE2M3, 2, 3, 1, true, Special::kNone, 7.5, 8},
    {&kE2M1, 2, 1, 1, true, Special::kNone, 6, 8},
    {&kE8M0, 8, 0, 127, false, Special::kE8M0, std::ldexp(1.0, 127), std::ldexp(1.0, 128)},
};

int mag_bits(const Ref& f) {
    return f.e_bits + f.m_bits;
}
int num_codes(const Ref& f) {
    return 1 << (mag_bits(f) + (f.has_sign ? 1 : 0));
}

// sign * 2^(e-bias) * (1 + m/2^M); subnormal sign * 2^(1-bias) * m/2^M; specials per the spec tables.
double ref_decode(const Ref& f, int code) {
    const int mag = code & ((1 << mag_bits(f)) - 1);
    const bool neg = f.has_sign && ((code >> mag_bits(f)) & 1);
    const int e = mag >> f.m_bits;
    const int m = mag & ((1 << f.m_bits) - 1);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    double v;
    if (f.special == Special::kE8M0) {
        v = code == 0xFF ? nan : std::pow(2.0, code - 127);
    } else if (f.special == Special::kE4M3 && mag == 0x7F) {
        v = nan;
    } else if (f.special == Special::kIeee && e == (1 << f.e_bits) - 1) {
        v = m == 0 ? std::numeric_limits<double>::infinity() : nan;
    } else if (e == 0) {
        v = std::pow(2.0, 1 - f.bias) * (m / std::pow(2.0, f.m_bits));
    } else {
        v = std::pow(2.0, e - f.bias) * (1.0 + m / std::pow(2.0, f.m_bits));
    }
    return neg ? -v : v;
}

bool ref_has_nan(const Ref& f) {
    return f.special != Special::kNone;
}

// Nearest finite non-negative code to a by exhaustive search; ties to the even code. Values at or
// beyond max are max (double distances to a huge a would all round to the same number).
int nearest_code(const Ref& f, double a) {
    static std::vector<double> tables[std::size(kRefs)];
    std::vector<double>& values = tables[&f - kRefs];
    if (values.empty()) {
        values.resize(size_t(1) << mag_bits(f));
        for (size_t c = 0; c < values.size(); ++c) values[c] = ref_decode(f, int(c));
    }
    int best = -1;
    double best_d = 0;
    for (int c = 0; c < int(values.size()); ++c) {
        const double v = values[size_t(c)];
        if (!std::isfinite(v)) continue;
        if (a >= f.max && v != f.max) continue;
        const double d = std::fabs(v - a);
        if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
            best = c;
            best_d = d;
        }
    }
    return best;
}

int ref_encode(const Ref& f, float value, Saturation sat) {
    const int sign = (f.has_sign && std::signbit(value)) ? 1 << mag_bits(f) : 0;
    if (std::isnan(value)) return ref_has_nan(f) ? (sign | ((1 << mag_bits(f)) - 1)) : 0;
    if (!f.has_sign && value < 0) return 0xFF;
    const double a = std::fabs(double(value));
    const int max_code = nearest_code(f, f.max);
    const double half = (f.beyond_max - f.max) / 2;
    // IEEE overflow: the value rounded with an unbounded exponent lies beyond max (ties to even).
    const bool overflow = a > f.max + half || (a == f.max + half && (max_code & 1));
    if (overflow && sat == Saturation::kNonSaturate) {
        if (f.special == Special::kIeee) return sign | (((1 << f.e_bits) - 1) << f.m_bits);
        if (f.special == Special::kE4M3) return sign | 0x7F;
        if (f.special == Special::kE8M0) return 0xFF;
        // FP6/FP4 have neither inf nor NaN: they saturate.
    }
    if (std::isinf(a)) return sign | max_code;
    return sign | nearest_code(f, a);
}

TEST(QuantMinifloat, DecodeEveryCodeMatchesFormula) {
    for (const Ref& f : kRefs) {
        ASSERT_EQ(f.fmt->num_codes(), num_codes(f)) << f.fmt->name;
        for (int c = 0; c < num_codes(f); ++c) {
            const double want = ref_decode(f, c);
            const float got = decode(*f.fmt, uint8_t(c));
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got)) << f.fmt->name << " code " << c;
                EXPECT_TRUE(is_nan_code(*f.fmt, uint8_t(c))) << f.fmt->name << " code " << c;
            } else {
                EXPECT_EQ(double(got), want) << f.fmt->name << " code " << c;
                EXPECT_EQ(std::signbit(got), std::signbit(want)) << f.fmt->name << " code " << c;
                EXPECT_FALSE(is_nan_code(*f.fmt, uint8_t(c))) << f.fmt->name << " code " << c;
            }
        }
        EXPECT_EQ(double(max_finite(*f.fmt)), f.max) << f.fmt->name;
    }
}

TEST(QuantMinifloat, SpecConstants) {
    EXPECT_EQ(emax(kE4M3), 8);
    EXPECT_EQ(emax(kE5M2), 15);
    EXPECT_EQ(emax(kE3M2), 4);
    EXPECT_EQ(emax(kE2M3), 2);
    EXPECT_EQ(emax(kE2M1), 2);
    EXPECT_EQ(decode(kE4M3, 0x01), std::ldexp(1.0f, -9));  // smallest subnormal
    EXPECT_EQ(decode(kE5M2, 0x01), std::ldexp(1.0f, -16));
    EXPECT_EQ(decode(kE2M1, 0x01), 0.5f);
    EXPECT_EQ(decode(kE8M0, 0x00), std::ldexp(1.0f, -127));
    EXPECT_EQ(decode(kE8M0, 0x7F), 1.0f);
    const float e2m1_values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int c = 0; c < 8; ++c) {
        EXPECT_EQ(decode(kE2M1, uint8_t(c)), e2m1_values[c]);
        EXPECT_EQ(decode(kE2M1, uint8_t(c | 8)), -e2m1_values[c]);
    }
    EXPECT_EQ(nan_code(kE2M1), -1);
    EXPECT_EQ(nan_code(kE4M3), 0x7F);
    EXPECT_EQ(nan_code(kE8M0), 0xFF);
}

TEST(QuantMinifloat, Fp8DecodeAgreesWithCore) {
    for (int c = 0; c < 256; ++c) {
        const float a = decode(kE4M3, uint8_t(c)), b = core::fp8_e4m3_to_f32(uint8_t(c));
        const float d = decode(kE5M2, uint8_t(c)), e = core::fp8_e5m2_to_f32(uint8_t(c));
        EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << c;
        EXPECT_TRUE(d == e || (std::isnan(d) && std::isnan(e))) << c;
    }
}

TEST(QuantMinifloat, EncodeDecodeRoundTripsEveryCode) {
    for (const Ref& f : kRefs) {
        for (int c = 0; c < num_codes(f); ++c) {
            const float v = decode(*f.fmt, uint8_t(c));
            if (std::isnan(v)) continue;
            for (Saturation sat : {Saturation::kSaturate, Saturation::kNonSaturate}) {
                if (std::isinf(v) && sat == Saturation::kSaturate) continue;  // inf saturates to max
                EXPECT_EQ(int(encode(*f.fmt, v, sat)), c) << f.fmt->name << " code " << c;
            }
        }
    }
}

// Midpoints between neighbours, their float neighbours, random values over the range and beyond,
// values below the smallest subnormal, huge values, inf and NaN; both signs.
std::vector<float> probe_values(const Ref& f, uint32_t seed) {
    std::vector<double> mags;
    for (int c = 0; c < (1 << mag_bits(f)); ++c) {
        const double v = ref_decode(f, c);
        if (std::isfinite(v)) mags.push_back(v);
    }
    std::sort(mags.begin(), mags.end());
    std::vector<float> out;
    auto add = [&](double v) {
        const float x = float(v);
        for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, std::numeric_limits<float>::infinity())}) {
            out.push_back(y);
            out.push_back(-y);
        }
    };
    for (size_t i = 0; i < mags.size(); ++i) {
        add(mags[i]);
        if (i + 1 < mags.size()) add((mags[i] + mags[i + 1]) / 2);
    }
    const double min_pos = mags[0] > 0 ? mags[0] : mags[1];
    for (double t : {0.5, 0.49, 0.25, 1e-3}) add(min_pos * t);
    add(std::numeric_limits<float>::denorm_min());
    add(f.max + (f.beyond_max - f.max) / 2);
    for (double t : {1.01, 1.5, 2.0, 1e3}) add(std::min(f.max * t, double(std::numeric_limits<float>::max())));
    add(std::numeric_limits<float>::max());
    out.push_back(std::numeric_limits<float>::infinity());
    out.push_back(-std::numeric_limits<float>::infinity());
    out.push_back(std::numeric_limits<float>::quiet_NaN());
    out.push_back(-std::numeric_limits<float>::quiet_NaN());
    std::mt19937 rng(seed);
    const double lo = std::log2(min_pos / 4), hi = std::log2(std::min(f.max * 4, 1e38));
    std::uniform_real_distribution<double> exp_dist(lo, hi);
    for (int i = 0; i < 20000; ++i) {
        const float v = float(std::exp2(exp_dist(rng)));
        out.push_back((rng() & 1) ? -v : v);
    }
    // A coarse sweep over every float exponent and sign.
    for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 65537)
        out.push_back(core::f32_from_bits(uint32_t(bits)));
    return out;
}

TEST(QuantMinifloat, EncodeMatchesExhaustiveNearest) {
    for (const Ref& f : kRefs) {
        int failures = 0;
        for (float v : probe_values(f, 1234)) {
            for (Saturation sat : {Saturation::kSaturate, Saturation::kNonSaturate}) {
                const int want = ref_encode(f, v, sat);
                const int got = encode(*f.fmt, v, sat);
                if (got != want && ++failures <= 10) {
                    ADD_FAILURE() << f.fmt->name << " v=" << v << " (" << std::hexfloat << v << std::defaultfloat
                                  << ") sat=" << (sat == Saturation::kSaturate) << " got " << got << " want " << want;
                }
            }
        }
        EXPECT_EQ(failures, 0) << f.fmt->name;
    }
}

TEST(QuantMinifloat, RoundingAndSaturationExamples) {
    // E4M3: 464 is the tie between 448 (mantissa 110, even) and the missing 480: stays 448.
    EXPECT_EQ(encode(kE4M3, 464.0f, Saturation::kNonSaturate), 0x7E);
    EXPECT_EQ(encode(kE4M3, 464.5f, Saturation::kNonSaturate), 0x7F);  // NaN
    EXPECT_EQ(encode(kE4M3, 1e6f, Saturation::kSaturate), 0x7E);
    EXPECT_EQ(encode(kE4M3, -std::numeric_limits<float>::infinity(), Saturation::kSaturate), 0xFE);
    EXPECT_EQ(encode(kE4M3, -std::numeric_limits<float>::infinity(), Saturation::kNonSaturate), 0xFF);
    // E5M2: 61440 ties 57344 (mantissa 11, odd) with 65536: overflows to inf.
    EXPECT_EQ(encode(kE5M2, 61439.0f, Saturation::kNonSaturate), 0x7B);
    EXPECT_EQ(encode(kE5M2, 61440.0f, Saturation::kNonSaturate), 0x7C);
    EXPECT_EQ(encode(kE5M2, 61440.0f, Saturation::kSaturate), 0x7B);
    EXPECT_EQ(encode(kE5M2, -std::numeric_limits<float>::infinity(), Saturation::kNonSaturate), 0xFC);
    EXPECT_TRUE(is_nan_code(kE5M2, encode(kE5M2, std::numeric_limits<float>::quiet_NaN())));
    // E2M1 ties go to the even code: 2.5 (2 = code 4, 3 = code 5) -> 2; 5 (4 = code 6, 6 = code 7) -> 4;
    // 0.25 (0, 0.5) -> 0; 0.75 (0.5 = code 1, 1 = code 2) -> 1.
    EXPECT_EQ(encode(kE2M1, 2.5f), 0x4);
    EXPECT_EQ(encode(kE2M1, 5.0f), 0x6);
    EXPECT_EQ(encode(kE2M1, 0.25f), 0x0);
    EXPECT_EQ(encode(kE2M1, -0.25f), 0x8);  // -0
    EXPECT_EQ(encode(kE2M1, 0.75f), 0x2);
    EXPECT_EQ(encode(kE2M1, 1e9f, Saturation::kNonSaturate), 0x7);  // no inf/NaN: saturates anyway
    EXPECT_EQ(encode(kE2M1, std::numeric_limits<float>::quiet_NaN()), 0x0);
    // Negative zero keeps its sign.
    EXPECT_EQ(encode(kE4M3, -0.0f), 0x80);
    EXPECT_TRUE(std::signbit(decode(kE4M3, 0x80)));
    EXPECT_EQ(encode(kE3M2, -0.0f), 0x20);
    // E8M0: no zero, no sign.
    EXPECT_EQ(encode(kE8M0, 0.0f), 0x00);
    EXPECT_EQ(encode(kE8M0, -0.0f), 0x00);
    EXPECT_EQ(encode(kE8M0, -1.0f), 0xFF);
    EXPECT_EQ(encode(kE8M0, 1.0f), 0x7F);
    EXPECT_EQ(encode(kE8M0, 1.5f), 0x80);  // tie between 1 (0x7F) and 2 (0x80): even code
    EXPECT_EQ(encode(kE8M0, 3.0f), 0x80);  // tie between 2 (0x80) and 4 (0x81): even code
    EXPECT_EQ(encode(kE8M0, std::numeric_limits<float>::infinity(), Saturation::kSaturate), 0xFE);
    EXPECT_EQ(encode(kE8M0, std::numeric_limits<float>::infinity(), Saturation::kNonSaturate), 0xFF);
}

// core::f32_to_fp8_e4m3 (the KV cache's encoder, bit tricks) against the generic encoder: every code's
// value, the midpoints between neighbours (ties to even), values just either side of them, the
// saturation range, subnormals and random magnitudes across the range.
TEST(QuantMinifloat, CoreE4m3EncoderAgreesWithGeneric) {
    std::vector<float> xs = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 465.0f, 1e9f, std::numeric_limits<float>::infinity(),
                             std::ldexp(1.0f, -10), std::ldexp(1.0f, -9), std::ldexp(3.0f, -10), std::ldexp(1.0f, -12)};
    for (int c = 0; c < 0x7f; ++c) {
        const float v = decode(kE4M3, uint8_t(c));
        xs.push_back(v);
        if (c + 1 < 0x7f) {
            const float next = decode(kE4M3, uint8_t(c + 1)), mid = 0.5f * (v + next);
            xs.push_back(mid);
            xs.push_back(std::nextafter(mid, 0.0f));
            xs.push_back(std::nextafter(mid, 1e9f));
        }
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> e(-14.0f, 9.5f);
    for (int i = 0; i < 20000; ++i) xs.push_back(std::exp2(e(rng)));
    for (float x : xs) {
        for (float s : {1.0f, -1.0f}) {
            const float v = s * x;
            EXPECT_EQ(core::f32_to_fp8_e4m3(v), encode(kE4M3, v, Saturation::kSaturate)) << v;
        }
    }
    EXPECT_EQ(core::f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

}  // namespace
}  // namespace kiln::quant
