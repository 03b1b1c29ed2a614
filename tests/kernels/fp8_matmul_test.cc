// FP8 matmul kernels (E4M3_B32, MXFP8; kernels/cpu/simd_fp8_kernels.h), f32 activations:
//  (a) every code point: a 256-element row holding all 254 non-NaN E4M3 codes (and two zeros where
//      the NaN codes would be) times one-hot activations gives each code's value times the block scale
//      exactly, on every ISA (power-of-two scales, incl. the MXFP8 subnormal scale 2^-127);
//  (b) every SIMD ISA the CPU runs against the scalar ref kernel: only fp32 rounding and summation
//      order differ, |err| <= 1e-5 * sum_i |w_i x_i|;
//  (c) the ref kernel against the fp32 reference matmul over kernels::ref::dequantize_row's weights;
//  (d) batch invariance: one call over n tokens equals each token alone and split row ranges, bit for
//      bit.
// Shapes: 13 and 37 rows (not multiples of the 4-row decode tile) with row ranges starting and ending
// inside a tile, k in {32, 224, 4128}, n in {1, 3, 17, 64}, padded (unaligned) strides for n = 3.
// AVX-512 variants are built but skip on CPUs without AVX-512.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/quant_matmul.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cpu {
namespace {

using core::DType;

const DType kFp8Types[] = {DType::kE4m3B32, DType::kMxfp8};
const Isa kSimdIsas[] = {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni};

bool runnable(Isa isa) {
    return isa == Isa::kRef || (isa_supported(isa) && find_matmul_kernel(DType::kQ8_0, isa) != nullptr);
}

size_t qs_offset(DType t) {
    return t == DType::kMxfp8 ? 1 : 4;
}

// Writes the block scale: E4M3_B32 an fp32 d, MXFP8 an E8M0 exponent.
void set_scale(DType t, uint8_t* blk, float d, uint8_t e) {
    if (t == DType::kMxfp8) {
        blk[0] = e;
    } else {
        std::memcpy(blk, &d, 4);
    }
}

uint8_t random_code(std::mt19937& rng) {
    uint8_t c = uint8_t(rng());
    if ((c & 0x7f) == 0x7f) c = uint8_t(c & 0x80);  // no NaN codes: the loaders reject them
    return c;
}

std::vector<uint8_t> random_fp8_weights(DType t, int64_t rows, int64_t k, uint32_t seed) {
    const auto& info = core::dtype_info(t);
    std::vector<uint8_t> buf(size_t(*core::dtype_bytes(t, uint64_t(rows * k))));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(0.5f, 2.0f);
    int64_t idx = 0;
    for (size_t off = 0; off < buf.size(); off += info.block_bytes, ++idx) {
        uint8_t* blk = &buf[off];
        for (int j = 0; j < 32; ++j) blk[qs_offset(t) + size_t(j)] = random_code(rng);
        float d = 0.01f * uni(rng) / 448.0f;  // amax / 448 style, not a power of two
        uint8_t e = uint8_t(127 - 14 + int(rng() % 5));
        if (idx % 97 == 5) d = 1e-30f, e = 0;  // tiny scale / the E8M0 subnormal 2^-127
        if (idx % 89 == 7) d = 3.0e4f, e = 150;
        set_scale(t, blk, d, e);
    }
    return buf;
}

std::vector<float> random_x(int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(k));
    for (float& v : x) v = normal(rng);
    if (k >= 96) {  // a zero block and a large one
        for (int i = 32; i < 64; ++i) x[size_t(i)] = 0.0f;
        for (int i = 64; i < 96; ++i) x[size_t(i)] *= 1000.0f;
    }
    return x;
}

std::vector<float> gemm(const MatmulKernel* kern, const uint8_t* w, size_t wrb, const std::vector<float>& x,
                        size_t arb_pad, int64_t n, int64_t k, int64_t ldy, int64_t r0, int64_t r1) {
    const size_t arb = kern->act_row_bytes(k) + arb_pad;
    std::vector<uint8_t> act(arb * size_t(n), 0xff);
    for (int64_t t = 0; t < n; ++t) kern->quantize_row(&x[size_t(t * k)], &act[size_t(t) * arb], k);
    std::vector<float> y(size_t(n * ldy), NAN);  // NaN outside [r0, r1) shows stray writes
    kern->gemm(w, wrb, act.data(), arb, n, k, y.data(), ldy, r0, r1);
    return y;
}

// (a) all code points, exact.
TEST(Fp8Matmul, EveryCodeDecodesExactlyOnEveryIsa) {
    constexpr int64_t k = 256, n = 256;
    struct Scale {
        float d;
        uint8_t e;
    };
    const Scale scales[] = {{1.0f, 127}, {0x1p-20f, 107}, {0x1p+10f, 137}, {0x1p-120f, 0}};
    std::vector<float> x(size_t(n * k), 0.0f);  // token t = one-hot at element t
    for (int64_t t = 0; t < n; ++t) x[size_t(t * k + t)] = 1.0f;
    int isas = 0;
    for (Isa isa : kAllIsas) {
        if (!runnable(isa)) continue;
        ++isas;
        for (DType t : kFp8Types) {
            const MatmulKernel* kern = find_matmul_kernel(t, isa);
            ASSERT_NE(kern, nullptr) << core::dtype_name(t) << " " << isa_name(isa);
            ASSERT_EQ(kern->act, ActFormat::kF32);
            for (const Scale& s : scales) {
                const size_t wrb = size_t(*core::dtype_bytes(t, k));
                std::vector<uint8_t> w(wrb);
                for (int64_t b = 0; b < k / 32; ++b) {
                    uint8_t* blk = &w[size_t(b) * core::dtype_info(t).block_bytes];
                    set_scale(t, blk, s.d, s.e);
                    for (int j = 0; j < 32; ++j) {
                        const int code = int(b * 32 + j);
                        blk[qs_offset(t) + size_t(j)] = (code & 0x7f) == 0x7f ? 0 : uint8_t(code);
                    }
                }
                const float scale = t == DType::kMxfp8 ? std::ldexp(1.0f, int(s.e) - 127) : s.d;
                const std::vector<float> y = gemm(kern, w.data(), wrb, x, 0, n, k, 1, 0, 1);
                for (int code = 0; code < 256; ++code) {
                    const float want = (code & 0x7f) == 0x7f ? 0.0f : core::fp8_e4m3_to_f32(uint8_t(code)) * scale;
                    EXPECT_EQ(y[size_t(code)], want) << core::dtype_name(t) << " isa=" << isa_name(isa) << " code 0x"
                                                     << std::hex << code << std::dec << " scale " << scale;
                }
            }
        }
    }
    EXPECT_GE(isas, 1);
}

// (b) SIMD against ref.
void check_isa(Isa isa) {
    if (!runnable(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU or not built";
    uint32_t seed = 800;
    for (DType t : kFp8Types) {
        const MatmulKernel* kern = find_matmul_kernel(t, isa);
        const MatmulKernel* ref_kern = find_matmul_kernel(t, Isa::kRef);
        ASSERT_NE(kern, nullptr) << core::dtype_name(t);
        for (int64_t rows : {13, 37}) {
            for (int64_t k : {32, 224, 4128}) {
                for (int64_t n : {1, 3, 17, 64}) {
                    ++seed;
                    const size_t pad = n == 3 ? 7 : 0;
                    const size_t dense = size_t(*core::dtype_bytes(t, uint64_t(k))), wrb = dense + pad;
                    const std::vector<uint8_t> packed = random_fp8_weights(t, rows, k, seed);
                    std::vector<uint8_t> w(wrb * size_t(rows), 0xff);
                    std::vector<float> wf(size_t(rows * k));
                    for (int64_t r = 0; r < rows; ++r) {
                        std::memcpy(&w[size_t(r) * wrb], &packed[size_t(r) * dense], dense);
                        ASSERT_TRUE(ref::dequantize_row(t, &packed[size_t(r) * dense], &wf[size_t(r * k)], k).is_ok());
                    }
                    std::vector<float> x;
                    for (int64_t ti = 0; ti < n; ++ti) {
                        const std::vector<float> row = random_x(k, seed * 31 + uint32_t(ti));
                        x.insert(x.end(), row.begin(), row.end());
                    }
                    const int64_t ldy = rows + 2, r0 = 3, r1 = rows - 2;
                    const std::vector<float> want = gemm(ref_kern, w.data(), wrb, x, pad, n, k, ldy, r0, r1);
                    const std::vector<float> got = gemm(kern, w.data(), wrb, x, pad, n, k, ldy, r0, r1);
                    const std::string at = std::string(core::dtype_name(t)) + " isa=" + isa_name(isa) +
                                           " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                                           " n=" + std::to_string(n);
                    for (int64_t ti = 0; ti < n; ++ti) {
                        for (int64_t r = 0; r < ldy; ++r) {
                            const size_t i = size_t(ti * ldy + r);
                            if (r < r0 || r >= r1) {
                                ASSERT_TRUE(std::isnan(got[i])) << at << " wrote row " << r;
                                continue;
                            }
                            double abs_dot = 0;
                            for (int64_t j = 0; j < k; ++j)
                                abs_dot += std::fabs(double(wf[size_t(r * k + j)]) * x[size_t(ti * k + j)]);
                            ASSERT_TRUE(std::isfinite(got[i])) << at << " token " << ti << " row " << r;
                            ASSERT_LE(std::fabs(double(got[i]) - double(want[i])), 1e-5 * abs_dot + 1e-30)
                                << at << " token " << ti << " row " << r << " got " << got[i] << " want " << want[i];
                        }
                    }
                }
            }
        }
    }
}

TEST(Fp8Matmul, Avx2MatchesRef) {
    check_isa(Isa::kAvx2);
}
TEST(Fp8Matmul, AvxVnniMatchesRef) {
    check_isa(Isa::kAvxVnni);
}
TEST(Fp8Matmul, Avx512MatchesRef) {
    check_isa(Isa::kAvx512);
}
TEST(Fp8Matmul, Avx512VnniMatchesRef) {
    check_isa(Isa::kAvx512Vnni);
}

// (c) ref kernel against the fp32 reference matmul over the dequantized weights.
TEST(Fp8Matmul, RefMatchesFloatMatmulOfDequantizedWeights) {
    uint32_t seed = 8100;
    for (DType t : kFp8Types) {
        const MatmulKernel* kern = find_matmul_kernel(t, Isa::kRef);
        ASSERT_NE(kern, nullptr);
        const int64_t rows = 13;
        for (int64_t k : {32, 224, 4128}) {
            for (int64_t n : {1, 3}) {
                const std::vector<uint8_t> w = random_fp8_weights(t, rows, k, ++seed);
                std::vector<float> wf(size_t(rows * k)), x;
                for (int64_t ti = 0; ti < n; ++ti) {
                    const std::vector<float> row = random_x(k, seed * 7 + uint32_t(ti));
                    x.insert(x.end(), row.begin(), row.end());
                }
                const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k)));
                for (int64_t r = 0; r < rows; ++r)
                    ASSERT_TRUE(ref::dequantize_row(t, &w[size_t(r) * wrb], &wf[size_t(r * k)], k).is_ok());
                const std::vector<float> got = gemm(kern, w.data(), wrb, x, 0, n, k, rows, 0, rows);
                std::vector<float> want(size_t(n * rows));
                ref::matmul(x.data(), ref::make_weight_view(w.data(), t, rows, k), nullptr, want.data(), n);
                for (int64_t ti = 0; ti < n; ++ti) {
                    for (int64_t r = 0; r < rows; ++r) {
                        double abs_dot = 0;
                        for (int64_t j = 0; j < k; ++j)
                            abs_dot += std::fabs(double(wf[size_t(r * k + j)]) * x[size_t(ti * k + j)]);
                        const size_t i = size_t(ti * rows + r);
                        EXPECT_LE(std::fabs(double(got[i]) - double(want[i])), 1e-5 * abs_dot + 1e-30)
                            << core::dtype_name(t) << " k=" << k << " token " << ti << " row " << r;
                    }
                }
            }
        }
    }
}

// (d) batch invariance of the SIMD kernels, bit for bit.
TEST(Fp8Matmul, GemmIsBatchInvariant) {
    const int64_t rows = 37, k = 224;
    const int64_t ranges[][2] = {{0, 5}, {5, 21}, {21, 37}};
    int isas_run = 0;
    for (Isa isa : kSimdIsas) {
        if (!runnable(isa)) continue;
        ++isas_run;
        uint32_t seed = 8300;
        for (DType t : kFp8Types) {
            const MatmulKernel* kern = find_matmul_kernel(t, isa);
            const std::vector<uint8_t> w = random_fp8_weights(t, rows, k, ++seed);
            const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k)));
            for (int64_t n : {3, 17}) {
                std::vector<float> x;
                for (int64_t ti = 0; ti < n; ++ti) {
                    const std::vector<float> row = random_x(k, seed * 131 + uint32_t(ti));
                    x.insert(x.end(), row.begin(), row.end());
                }
                const std::vector<float> all = gemm(kern, w.data(), wrb, x, 0, n, k, rows, 0, rows);
                std::vector<float> split(all.size(), NAN);
                const size_t arb = kern->act_row_bytes(k);
                for (const auto& rr : ranges)
                    kern->gemm(w.data(), wrb, x.data(), arb, n, k, split.data(), rows, rr[0], rr[1]);
                const std::string at = std::string(core::dtype_name(t)) + " isa=" + isa_name(isa);
                for (int64_t ti = 0; ti < n; ++ti) {
                    const std::vector<float> one(x.begin() + ti * k, x.begin() + (ti + 1) * k);
                    const std::vector<float> alone = gemm(kern, w.data(), wrb, one, 0, 1, k, rows, 0, rows);
                    for (int64_t r = 0; r < rows; ++r) {
                        const size_t i = size_t(ti * rows + r);
                        ASSERT_FALSE(std::isnan(all[i])) << at << " index " << i;
                        ASSERT_EQ(0, std::memcmp(&all[i], &alone[size_t(r)], 4)) << at << " n=" << n << " index " << i;
                        ASSERT_EQ(0, std::memcmp(&all[i], &split[i], 4)) << at << " n=" << n << " index " << i;
                    }
                }
            }
        }
    }
    if (isas_run == 0) GTEST_SKIP() << "no SIMD ISA supported by this CPU";
}

}  // namespace
}  // namespace kiln::kernels::cpu
