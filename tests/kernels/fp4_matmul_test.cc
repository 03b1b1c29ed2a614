// FP4 matmul kernels (MXFP4, NVFP4; kernels/cpu/simd_fp4_kernels.h) over ISAs x shapes, in the style
// of quant_matmul_test.cc:
//  (a) every SIMD ISA the CPU runs against the scalar ref kernel on identical activation bytes: the
//      integer block dots are exact, so only fp32 accumulation order differs:
//      |err| <= 1e-5 * sum_i |w_i x_i|; the SIMD quantize_row must produce the ref's bytes exactly;
//  (b) the ref kernel against the fp32 reference matmul (kernels::ref::matmul) over the weights
//      dequantized by kernels::ref::dequantize_row: only activation rounding differs,
//      |err| <= sum_blocks (d_x / 2) sum_i |w_i| (+ fp32 slack);
//  (c) batch invariance: one call over n tokens and all rows equals each token alone and split row
//      ranges, bit for bit.
// Weights: random codes (all 16 E2M1 codes, so +-0 and the largest magnitude 6 occur), MXFP4 scale
// exponents 2^-9 .. 2^-5 plus the subnormal code 0 (2^-127) and a large block (2^13); NVFP4 fp16
// scales ~0.002 (positive: E4M3 x a positive tensor scale), some of them fp16 subnormals.
// Shapes: 13 and 37 rows (not multiples of the 8-row tiles) with row ranges that start and end
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

std::vector<uint8_t> random_fp4_weights(DType t, int64_t rows, int64_t k, uint32_t seed) {
    const auto& info = core::dtype_info(t);
    std::vector<uint8_t> buf(size_t(*core::dtype_bytes(t, uint64_t(rows * k))));
    std::mt19937 rng(seed);
    for (uint8_t& b : buf) b = uint8_t(rng());
    std::uniform_real_distribution<float> uni(0.5f, 2.0f);
    int64_t idx = 0;
    for (size_t off = 0; off < buf.size(); off += info.block_bytes, ++idx) {
        uint8_t* blk = &buf[off];
        if (t == DType::kMxfp4) {
            blk[0] = uint8_t(127 - 9 + int(rng() % 5));  // 2^-9 .. 2^-5
            if (idx % 97 == 5) blk[0] = 0;               // 2^-127: the subnormal scale
            if (idx % 89 == 7) blk[0] = 140;             // a large block
        } else {
            float d = 0.002f * uni(rng);
            if (idx % 97 == 5) d = 3e-6f;  // fp16 subnormal
            const uint16_t h = core::f32_to_fp16(d);
            std::memcpy(blk, &h, 2);
        }
    }
    return buf;
}

std::vector<float> random_x(int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(k));
    for (float& v : x) v = normal(rng);
    if (k >= 96) {  // a zero activation block and a large one
        for (int i = 32; i < 64; ++i) x[size_t(i)] = 0.0f;
        for (int i = 64; i < 96; ++i) x[size_t(i)] *= 1000.0f;
    }
    return x;
}

struct Problem {
    DType type;
    int64_t rows, k, n, r0, r1;
    uint32_t seed;
    std::vector<uint8_t> w;    // [rows, w_row_bytes]
    std::vector<float> wf;     // [rows, k] dequantized
    std::vector<float> x;      // [n, k]
    std::vector<uint8_t> act;  // [n, act_row_bytes], quantized by the ref kernel
    size_t w_row_bytes = 0, act_row_bytes = 0;

    std::string where(const char* isa) const {
        return std::string(core::dtype_name(type)) + " isa=" + isa + " rows=" + std::to_string(rows) +
               " k=" + std::to_string(k) + " n=" + std::to_string(n) + " seed=" + std::to_string(seed);
    }
    double abs_dot(int64_t t, int64_t r) const {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += std::fabs(double(wf[size_t(r * k + i)]) * x[size_t(t * k + i)]);
        return s;
    }
};

Problem make_problem(DType t, int64_t rows, int64_t k, int64_t n, uint32_t seed, size_t pad) {
    Problem p{t, rows, k, n, 3, rows - 2, seed, {}, {}, {}, {}};
    const std::vector<uint8_t> dense = random_fp4_weights(t, rows, k, seed);
    const size_t dense_row = size_t(*core::dtype_bytes(t, uint64_t(k)));
    p.w_row_bytes = dense_row + pad;
    p.w.assign(p.w_row_bytes * size_t(rows), 0xff);
    p.wf.resize(size_t(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(&p.w[size_t(r) * p.w_row_bytes], &dense[size_t(r) * dense_row], dense_row);
        EXPECT_TRUE(ref::dequantize_row(t, &dense[size_t(r) * dense_row], &p.wf[size_t(r * k)], k).is_ok());
    }
    for (int64_t ti = 0; ti < n; ++ti) {
        const std::vector<float> row = random_x(k, seed * 31 + uint32_t(ti));
        p.x.insert(p.x.end(), row.begin(), row.end());
    }
    const MatmulKernel* ref_kernel = find_matmul_kernel(t, Isa::kRef);
    p.act_row_bytes = ref_kernel->act_row_bytes(k) + pad;
    p.act.assign(p.act_row_bytes * size_t(n), 0xff);
    for (int64_t ti = 0; ti < n; ++ti)
        ref_kernel->quantize_row(&p.x[size_t(ti * k)], &p.act[size_t(ti) * p.act_row_bytes], k);
    return p;
}

std::vector<float> run_gemm(const MatmulKernel* kern, const Problem& p, int64_t ldy) {
    std::vector<float> y(size_t(p.n * ldy), NAN);  // NaN outside [r0, r1) shows stray writes
    kern->gemm(p.w.data(), p.w_row_bytes, p.act.data(), p.act_row_bytes, p.n, p.k, y.data(), ldy, p.r0, p.r1);
    return y;
}

const DType kFp4Types[] = {DType::kMxfp4, DType::kNvfp4};

void check_isa(Isa isa) {
    if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
    if (find_matmul_kernel(DType::kQ8_0, isa) == nullptr) GTEST_FAIL() << "this CPU runs " << isa_name(isa) << " but its kernels were not built";
    uint32_t seed = 700;
    for (DType t : kFp4Types) {
        const MatmulKernel* kern = find_matmul_kernel(t, isa);
        ASSERT_NE(kern, nullptr) << core::dtype_name(t);
        ASSERT_EQ(kern->act, ActFormat::kQ8);
        for (int64_t rows : {13, 37}) {
            for (int64_t k : {32, 224, 4128}) {
                for (int64_t n : {1, 3, 17, 64}) {
                    const size_t pad = n == 3 ? 7 : 0;
                    const Problem p = make_problem(t, rows, k, n, ++seed, pad);
                    ASSERT_EQ(kern->act_row_bytes(k) + pad, p.act_row_bytes);
                    std::vector<uint8_t> act(p.act.size(), 0xff);
                    for (int64_t ti = 0; ti < n; ++ti)
                        kern->quantize_row(&p.x[size_t(ti * k)], &act[size_t(ti) * p.act_row_bytes], k);
                    ASSERT_EQ(0, std::memcmp(act.data(), p.act.data(), act.size())) << p.where(isa_name(isa));
                    const int64_t ldy = rows + 2;
                    const std::vector<float> want = run_gemm(find_matmul_kernel(t, Isa::kRef), p, ldy);
                    const std::vector<float> got = run_gemm(kern, p, ldy);
                    double max_ratio = 0, max_err = 0;
                    int64_t max_idx = 0;
                    for (int64_t ti = 0; ti < n; ++ti) {
                        for (int64_t r = 0; r < ldy; ++r) {
                            const size_t i = size_t(ti * ldy + r);
                            if (r < p.r0 || r >= p.r1) {
                                ASSERT_TRUE(std::isnan(got[i])) << p.where(isa_name(isa)) << " wrote row " << r;
                                continue;
                            }
                            const double err = std::fabs(double(got[i]) - double(want[i]));
                            const double tol = 1e-5 * p.abs_dot(ti, r) + 1e-30;
                            if (err / tol > max_ratio) max_ratio = err / tol, max_err = err, max_idx = int64_t(i);
                        }
                    }
                    EXPECT_LE(max_ratio, 1.0)
                        << p.where(isa_name(isa)) << " max err " << max_err << " at token " << max_idx / ldy << " row "
                        << max_idx % ldy << ": got " << got[size_t(max_idx)] << " want " << want[size_t(max_idx)];
                }
            }
        }
    }
}

TEST(Fp4Matmul, Avx2MatchesRef) {
    check_isa(Isa::kAvx2);
}
TEST(Fp4Matmul, AvxVnniMatchesRef) {
    check_isa(Isa::kAvxVnni);
}
TEST(Fp4Matmul, Avx512MatchesRef) {
    check_isa(Isa::kAvx512);
}
TEST(Fp4Matmul, Avx512VnniMatchesRef) {
    check_isa(Isa::kAvx512Vnni);
}

// (b) the ref kernel against the f32 reference matmul over the dequantized weights.
TEST(Fp4Matmul, RefMatchesFloatMatmulWithinActivationRounding) {
    uint32_t seed = 7100;
    for (DType t : kFp4Types) {
        const MatmulKernel* kern = find_matmul_kernel(t, Isa::kRef);
        ASSERT_NE(kern, nullptr);
        for (int64_t k : {32, 224, 4128}) {
            for (int64_t n : {1, 3, 17}) {
                const Problem p = make_problem(t, 13, k, n, ++seed, 0);
                const std::vector<float> got = run_gemm(kern, p, p.rows);
                std::vector<float> want(size_t(n * p.rows));  // [n, rows]
                const ref::WeightView wv = ref::make_weight_view(p.w.data(), t, p.rows, k);
                ref::matmul(p.x.data(), wv, nullptr, want.data(), n);
                for (int64_t ti = 0; ti < n; ++ti) {
                    for (int64_t r = p.r0; r < p.r1; ++r) {
                        double bound = 2e-5 * p.abs_dot(ti, r) + 1e-30;
                        for (int64_t b = 0; b < k / 32; ++b) {
                            float dx;
                            std::memcpy(&dx, &p.act[size_t(ti) * p.act_row_bytes + size_t(b) * sizeof(ActQ8)], 4);
                            double wsum = 0;
                            for (int64_t i = 32 * b; i < 32 * (b + 1); ++i) wsum += std::fabs(p.wf[size_t(r * k + i)]);
                            bound += 0.5 * double(dx) * wsum;
                        }
                        const size_t i = size_t(ti * p.rows + r);
                        EXPECT_LE(std::fabs(double(got[i]) - double(want[i])), bound)
                            << p.where("ref") << " token " << ti << " row " << r << " got " << got[i] << " want "
                            << want[i];
                    }
                }
            }
        }
    }
}

// (c) batch invariance of the SIMD kernels, bit for bit.
TEST(Fp4Matmul, GemmIsBatchInvariant) {
    const int64_t rows = 37, k = 224;
    const int64_t ranges[][2] = {{0, 5}, {5, 21}, {21, 37}};
    int isas_run = 0;
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
        if (!isa_supported(isa) || find_matmul_kernel(DType::kQ8_0, isa) == nullptr) continue;
        ++isas_run;
        uint32_t seed = 7300;
        for (DType t : kFp4Types) {
            const MatmulKernel* kern = find_matmul_kernel(t, isa);
            const std::vector<uint8_t> w = random_fp4_weights(t, rows, k, ++seed);
            const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k))), arb = kern->act_row_bytes(k);
            for (int64_t n : {3, 17}) {
                std::vector<uint8_t> act(arb * size_t(n));
                for (int64_t ti = 0; ti < n; ++ti)
                    kern->quantize_row(random_x(k, seed * 131 + uint32_t(ti)).data(), &act[size_t(ti) * arb], k);
                std::vector<float> all(size_t(n * rows), NAN), alone(all), split(all);  // [n, rows]
                kern->gemm(w.data(), wrb, act.data(), arb, n, k, all.data(), rows, 0, rows);
                for (int64_t ti = 0; ti < n; ++ti)
                    kern->gemm(w.data(), wrb, &act[size_t(ti) * arb], arb, 1, k, &alone[size_t(ti * rows)], rows, 0,
                               rows);
                for (const auto& rr : ranges)
                    kern->gemm(w.data(), wrb, act.data(), arb, n, k, split.data(), rows, rr[0], rr[1]);
                const std::string at = std::string(core::dtype_name(t)) + " isa=" + isa_name(isa);
                for (size_t i = 0; i < all.size(); ++i) {
                    ASSERT_FALSE(std::isnan(all[i])) << at << " index " << i;
                    ASSERT_EQ(0, std::memcmp(&all[i], &alone[i], 4)) << at << " n=" << n << " index " << i;
                    ASSERT_EQ(0, std::memcmp(&all[i], &split[i], 4)) << at << " n=" << n << " index " << i;
                }
            }
        }
    }
    if (isas_run == 0) GTEST_SKIP() << "no SIMD ISA supported by this CPU";
}

}  // namespace
}  // namespace kiln::kernels::cpu
