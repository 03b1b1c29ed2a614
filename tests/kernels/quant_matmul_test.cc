// CPU matmul kernels (kernels/cpu/matmul.h) over a grid of weight types x ISAs x shapes:
//  (a) every SIMD ISA against the scalar ref kernel on identical activation bytes: integer parts are
//      exact, so only fp32 accumulation order differs: |err| <= 1e-5 * sum_i |w_i x_i|;
//      and the SIMD quantize_row must produce the ref's bytes exactly;
//  (b) the ref quantized path against kernels::ref::matmul on the dequantized weights: the only
//      difference is activation rounding, |err| <= sum_blocks (d_x / 2) sum_i |w_i| (+ fp32 slack);
//  (c) quantize_row on hand-made rows (values, round-half-to-even, zero blocks).
// Shapes: odd block counts, k not a multiple of 8 for float weights, n in {1..5, 9, 70} (70 crosses
// the prefill activation chunking), row ranges [3, 12) of 13 with a padded output stride, and some
// cases with padded (unaligned) weight and activation row strides.
// ISAs the CPU lacks, or this build has no kernels for, are skipped.
#include "kernels/ref/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/numeric.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/block_layouts.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cpu {
namespace {

using core::DType;

const DType kTypes[] = {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kF32,  DType::kF16,
                        DType::kBF16, DType::kQ6_K, DType::kQ4_K, DType::kQ5_K, DType::kQ5_0,
                        DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kIq4Nl, DType::kIq4Xs,
                        DType::kTq1_0, DType::kTq2_0};

void put_f16(uint8_t* p, float v) {
    const uint16_t h = core::f32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

// Random valid weight bytes [rows, k]: random quant bits, finite fp16 scales of realistic size.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t k, uint32_t seed) {
    const auto& info = core::dtype_info(t);
    std::vector<uint8_t> buf(size_t(*core::dtype_bytes(t, uint64_t(rows * k))));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::uniform_real_distribution<float> uni(0.5f, 2.0f);
    if (!info.is_quantized) {
        for (int64_t i = 0; i < rows * k; ++i) {
            const float v = normal(rng);
            if (t == DType::kF32) std::memcpy(&buf[size_t(i) * 4], &v, 4);
            if (t == DType::kF16) put_f16(&buf[size_t(i) * 2], v);
            if (t == DType::kBF16) {
                const uint16_t h = core::f32_to_bf16(v);
                std::memcpy(&buf[size_t(i) * 2], &h, 2);
            }
        }
        return buf;
    }
    for (uint8_t& b : buf) b = uint8_t(rng());
    for (size_t off = 0; off < buf.size(); off += info.block_bytes) {
        uint8_t* blk = &buf[off];
        const float sign = (rng() & 1) ? 1.0f : -1.0f;
        switch (t) {
            case DType::kQ4_0:
            case DType::kQ5_0:
            case DType::kQ8_0:
            case DType::kIq4Nl:
                put_f16(blk, sign * 0.01f * uni(rng));
                break;
            case DType::kIq4Xs:  // scales_h / scales_l random: every sub-block scale d * (ls - 32)
                put_f16(blk, 0.0005f * uni(rng));
                break;
            case DType::kTq1_0:  // every byte decodes to valid trits
                put_f16(blk + blocks::kTq1_0D, sign * 0.01f * uni(rng));
                break;
            case DType::kTq2_0:  // code 3 (t = 2) does not occur in real files; kept: the arithmetic is the same
                put_f16(blk + blocks::kTq2_0D, sign * 0.01f * uni(rng));
                break;
            case DType::kQ4_1:
            case DType::kQ5_1:
                put_f16(blk, 0.01f * uni(rng));
                put_f16(blk + 2, -0.08f * sign * uni(rng));
                break;
            case DType::kQ4_K:
            case DType::kQ5_K:
                put_f16(blk, 0.002f * uni(rng));
                put_f16(blk + 2, 0.001f * uni(rng));
                break;
            case DType::kQ6_K:
                put_f16(blk + blocks::kQ6_KD, 0.001f * uni(rng));
                break;
            case DType::kQ2_K:
                put_f16(blk + blocks::kQ2_KD, 0.004f * uni(rng));
                put_f16(blk + blocks::kQ2_KDmin, 0.002f * uni(rng));
                break;
            case DType::kQ3_K:
                put_f16(blk + blocks::kQ3_KD, 0.002f * uni(rng));
                break;
            default:
                ADD_FAILURE() << "no generator for " << core::dtype_name(t);
        }
    }
    return buf;
}

std::vector<float> random_x(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    // a zero block (d = 0 path) and a large-magnitude block when there is room
    const int64_t blk = 256;
    if (n >= 3 * blk) {
        for (int64_t i = 0; i < blk; ++i) x[size_t(blk + i)] = 0.0f;
        for (int64_t i = 0; i < blk; ++i) x[size_t(2 * blk + i)] *= 1000.0f;
    }
    return x;
}

struct Problem {
    DType type;
    int64_t rows, k, n, r0, r1;
    uint32_t seed;
    std::vector<uint8_t> w;    // [rows, k] in `type`
    std::vector<float> wf;     // [rows, k] dequantized
    std::vector<float> x;      // [n, k]
    std::vector<uint8_t> act;  // [n, act_row_bytes] quantized by the ref kernel
    size_t w_row_bytes = 0, act_row_bytes = 0;
};

// pad > 0: weight and activation rows get `pad` garbage bytes of stride padding (odd pads also make
// every row but the first unaligned).
Problem make_problem(DType t, int64_t k, int64_t n, uint32_t seed, size_t pad = 0) {
    Problem p{t, 13, k, n, 3, 12, seed, {}, {}, {}, {}};
    const std::vector<uint8_t> dense = random_weights(t, p.rows, k, seed);
    const size_t dense_row = size_t(*core::dtype_bytes(t, uint64_t(k)));
    p.w_row_bytes = dense_row + pad;
    p.w.assign(p.w_row_bytes * size_t(p.rows), 0xff);
    p.wf.resize(size_t(p.rows * k));
    for (int64_t r = 0; r < p.rows; ++r) {
        std::memcpy(&p.w[size_t(r) * p.w_row_bytes], &dense[size_t(r) * dense_row], dense_row);
        EXPECT_TRUE(ref::dequantize_row(t, &dense[size_t(r) * dense_row], &p.wf[size_t(r * k)], k).is_ok());
    }
    for (int64_t t_idx = 0; t_idx < n; ++t_idx) {
        std::vector<float> row = random_x(k, seed * 31 + uint32_t(t_idx));
        p.x.insert(p.x.end(), row.begin(), row.end());
    }
    const MatmulKernel* ref_kernel = find_matmul_kernel(t, Isa::kRef);
    p.act_row_bytes = ref_kernel->act_row_bytes(k) + pad;
    p.act.assign(p.act_row_bytes * size_t(n), 0xff);
    for (int64_t t_idx = 0; t_idx < n; ++t_idx) {
        ref_kernel->quantize_row(&p.x[size_t(t_idx * k)], &p.act[size_t(t_idx) * p.act_row_bytes], k);
    }
    return p;
}

// y [n, ldy] with NaN sentinels outside [r0, r1) so stray writes show up.
std::vector<float> run_gemm(const MatmulKernel* kern, const Problem& p, int64_t ldy) {
    std::vector<float> y(size_t(p.n * ldy), NAN);
    kern->gemm(p.w.data(), p.w_row_bytes, p.act.data(), p.act_row_bytes, p.n, p.k, y.data(), ldy, p.r0, p.r1);
    return y;
}

double abs_dot(const Problem& p, int64_t t, int64_t r) {
    double s = 0;
    for (int64_t i = 0; i < p.k; ++i) s += std::fabs(double(p.wf[size_t(r * p.k + i)]) * p.x[size_t(t * p.k + i)]);
    return s;
}

std::string where(const Problem& p, const char* isa) {
    return std::string(core::dtype_name(p.type)) + " isa=" + isa + " k=" + std::to_string(p.k) +
           " n=" + std::to_string(p.n) + " seed=" + std::to_string(p.seed);
}

std::vector<int64_t> ks_for(DType t) {
    const int64_t block = core::dtype_info(t).block_size;
    if (block == 1) return {7, 224, 4099};
    if (block == 32) return {32, 7 * 32, 129 * 32};
    return {256, 7 * 256, 17 * 256};
}

void check_isa(Isa isa) {
    if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
    if (find_matmul_kernel(DType::kQ8_0, isa) == nullptr) GTEST_FAIL() << "this CPU runs " << isa_name(isa) << " but its kernels were not built";
    uint32_t seed = 100;
    for (DType t : kTypes) {
        const MatmulKernel* kern = find_matmul_kernel(t, isa);
        const MatmulKernel* ref_kernel = find_matmul_kernel(t, Isa::kRef);
        ASSERT_NE(kern, nullptr) << core::dtype_name(t);
        ASSERT_EQ(kern->act, ref_kernel->act);
        for (int64_t k : ks_for(t)) {
            for (int64_t n : {1, 2, 3, 4, 5, 9, 70}) {
                if (n == 70 && k < 4000) continue;  // crosses the activation chunking of prefill
                const size_t pad = (n == 3 || n == 5) ? 7 : 0;
                const Problem p = make_problem(t, k, n, ++seed, pad);
                ASSERT_EQ(kern->act_row_bytes(k) + pad, p.act_row_bytes);
                // Quantization is bit-identical across ISAs.
                std::vector<uint8_t> act(p.act.size(), 0xff);  // padding as in p.act
                for (int64_t ti = 0; ti < n; ++ti) {
                    kern->quantize_row(&p.x[size_t(ti * k)], &act[size_t(ti) * p.act_row_bytes], k);
                }
                ASSERT_EQ(0, std::memcmp(act.data(), p.act.data(), act.size())) << where(p, isa_name(isa));
                const int64_t ldy = p.rows + 2;
                const std::vector<float> want = run_gemm(ref_kernel, p, ldy);
                const std::vector<float> got = run_gemm(kern, p, ldy);
                double max_err = 0, max_ratio = 0;
                int64_t max_idx = -1;
                for (int64_t ti = 0; ti < n; ++ti) {
                    for (int64_t r = 0; r < ldy; ++r) {
                        const size_t i = size_t(ti * ldy + r);
                        if (r < p.r0 || r >= p.r1) {
                            ASSERT_TRUE(std::isnan(got[i])) << where(p, isa_name(isa)) << " wrote row " << r;
                            continue;
                        }
                        const double err = std::fabs(double(got[i]) - double(want[i]));
                        const double tol = 1e-5 * abs_dot(p, ti, r) + 1e-30;
                        if (err / tol > max_ratio) {
                            max_ratio = err / tol;
                            max_err = err;
                            max_idx = int64_t(i);
                        }
                    }
                }
                EXPECT_LE(max_ratio, 1.0) << where(p, isa_name(isa)) << " max err " << max_err << " at index "
                                          << max_idx << " (token " << max_idx / ldy << ", row " << max_idx % ldy
                                          << ") got " << got[size_t(max_idx)] << " want " << want[size_t(max_idx)];
            }
        }
    }
}

// A CPU that runs an ISA gets that ISA's kernels: a build that left them out would otherwise show up
// only as the per-ISA loops of the kernel tests silently running fewer ISAs.
TEST(QuantMatmul, EveryIsaThisCpuRunsHasItsKernels) {
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
        if (!isa_supported(isa)) continue;
        EXPECT_NE(find_matmul_kernel(DType::kQ8_0, isa), nullptr) << isa_name(isa);
        EXPECT_NE(find_matmul_kernel(DType::kF32, isa), nullptr) << isa_name(isa);
        EXPECT_NE(find_attention_kernel(isa), nullptr) << isa_name(isa);
        EXPECT_NE(find_silu_mul_kernel(isa), nullptr) << isa_name(isa);
    }
}

TEST(QuantMatmul, Avx2MatchesRef) {
    check_isa(Isa::kAvx2);
}
// The avx-vnni level is the AVX2 kernel bodies with each u8 x s8 block dot as one vpdpbusd: the
// same integers, so every output has the avx2 level's bits (matmul_avxvnni.cc).
TEST(QuantMatmul, AvxVnniGivesAvx2sBits) {
    if (!isa_supported(Isa::kAvxVnni)) GTEST_SKIP() << "no AVX-VNNI";
    uint32_t seed = 700;
    for (DType t : kTypes) {
        const MatmulKernel* avx2 = find_matmul_kernel(t, Isa::kAvx2);
        const MatmulKernel* vnni = find_matmul_kernel(t, Isa::kAvxVnni);
        ASSERT_NE(vnni, nullptr) << core::dtype_name(t);
        for (int64_t k : ks_for(t)) {
            for (int64_t n : {1, 3, 4, 9}) {
                const Problem p = make_problem(t, k, n, ++seed, 0);
                const std::vector<float> a = run_gemm(avx2, p, p.rows), b = run_gemm(vnni, p, p.rows);
                ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << where(p, "avx-vnni");
            }
        }
    }
}

TEST(QuantMatmul, AvxVnniMatchesRef) {
    check_isa(Isa::kAvxVnni);
}
TEST(QuantMatmul, Avx512MatchesRef) {
    check_isa(Isa::kAvx512);
}
TEST(QuantMatmul, Avx512VnniMatchesRef) {
    check_isa(Isa::kAvx512Vnni);
}

// Batch invariance of the legacy SIMD kernels (the serving engine compares logits bit for bit
// across batch compositions): y[t, r] must not depend on how many tokens share the gemm call, on
// the tile a row or token lands in, or on the row range. 37 rows (not a multiple of the 8-row
// lanes = rows tiles), n = 1..19 tokens: one call over all tokens and rows [0, 37) against (a) each
// token alone and (b) uneven row ranges [0, 5), [5, 21), [21, 37) called separately. The float
// weights run at k = 172 (stories260K's FFN width: 21 8-wide steps and a 4-element scalar tail,
// whose arithmetic once differed between tile shapes in the AVX-512 builds).
TEST(QuantMatmul, GemmIsBatchInvariant) {
    const std::pair<DType, int64_t> cases[] = {{DType::kQ4_0, 256}, {DType::kQ4_1, 256}, {DType::kQ5_0, 256},
                                               {DType::kQ5_1, 256}, {DType::kQ8_0, 256}, {DType::kF32, 172},
                                               {DType::kF16, 172},  {DType::kBF16, 172}};
    const int64_t rows = 37;
    const int64_t ranges[][2] = {{0, 5}, {5, 21}, {21, 37}};
    int isas_run = 0;
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
        if (!isa_supported(isa) || find_matmul_kernel(DType::kQ8_0, isa) == nullptr) continue;
        ++isas_run;
        uint32_t seed = 9000;
        for (const auto& [t, k] : cases) {
            const MatmulKernel* kern = find_matmul_kernel(t, isa);
            ASSERT_NE(kern, nullptr);
            const std::vector<uint8_t> w = random_weights(t, rows, k, ++seed);
            const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k)));
            const size_t arb = kern->act_row_bytes(k);
            for (int64_t n = 1; n <= 19; ++n) {
                const std::string at = std::string(core::dtype_name(t)) + " isa=" + isa_name(isa) +
                                       " n=" + std::to_string(n) + " seed=" + std::to_string(seed);
                std::vector<uint8_t> act(arb * size_t(n));
                for (int64_t ti = 0; ti < n; ++ti) {
                    const std::vector<float> x = random_x(k, seed * 131 + uint32_t(n * 19 + ti));
                    kern->quantize_row(x.data(), &act[size_t(ti) * arb], k);
                }
                std::vector<float> all(size_t(n * rows), NAN);  // [n, rows]
                kern->gemm(w.data(), wrb, act.data(), arb, n, k, all.data(), rows, 0, rows);
                // (a) each token alone
                std::vector<float> alone(size_t(n * rows), NAN);
                for (int64_t ti = 0; ti < n; ++ti) {
                    kern->gemm(w.data(), wrb, &act[size_t(ti) * arb], arb, 1, k, &alone[size_t(ti * rows)], rows, 0,
                               rows);
                }
                // (b) uneven row ranges, all tokens at once
                std::vector<float> split(size_t(n * rows), NAN);
                for (const auto& rr : ranges) {
                    kern->gemm(w.data(), wrb, act.data(), arb, n, k, split.data(), rows, rr[0], rr[1]);
                }
                for (int64_t ti = 0; ti < n; ++ti) {
                    for (int64_t r = 0; r < rows; ++r) {
                        const size_t i = size_t(ti * rows + r);
                        ASSERT_FALSE(std::isnan(all[i])) << at << " token " << ti << " row " << r;
                        // bit for bit (memcmp, so -0 vs +0 would count as a difference too)
                        EXPECT_EQ(0, std::memcmp(&all[i], &alone[i], 4))
                            << at << " token " << ti << " row " << r << ": n tokens " << all[i] << " vs alone "
                            << alone[i];
                        EXPECT_EQ(0, std::memcmp(&all[i], &split[i], 4))
                            << at << " token " << ti << " row " << r << ": rows [0, 37) " << all[i]
                            << " vs split ranges " << split[i];
                    }
                }
                if (HasFailure()) return;  // one case's report is enough
            }
        }
    }
    if (isas_run == 0) GTEST_SKIP() << "no SIMD ISA supported by this CPU";
}

// (b): the ref kernel against the fp32 reference matmul over dequantized weights.
TEST(QuantMatmul, RefMatchesFloatMatmulWithinActivationRounding) {
    uint32_t seed = 5000;
    for (DType t : kTypes) {
        const MatmulKernel* kern = find_matmul_kernel(t, Isa::kRef);
        ASSERT_NE(kern, nullptr);
        for (int64_t k : ks_for(t)) {
            const int64_t n = 3;
            const Problem p = make_problem(t, k, n, ++seed);
            const int64_t ldy = p.rows;
            const std::vector<float> got = run_gemm(kern, p, ldy);
            std::vector<float> want(size_t(n * p.rows));  // [n, rows]
            ref::WeightView wv = ref::make_weight_view(p.w.data(), t, p.rows, k);
            ref::matmul(p.x.data(), wv, nullptr, want.data(), n);
            const int64_t qblock = kern->act == ActFormat::kQ8 ? 32 : kern->act == ActFormat::kQ8K ? 256 : 0;
            for (int64_t ti = 0; ti < n; ++ti) {
                for (int64_t r = p.r0; r < p.r1; ++r) {
                    double bound = 2e-5 * abs_dot(p, ti, r) + 1e-30;
                    // bf16 activations: each x rounded to nearest even, relative error <= 2^-9
                    if (kern->act == ActFormat::kBF16) bound += std::ldexp(1.0, -9) * abs_dot(p, ti, r);
                    for (int64_t b = 0; qblock > 0 && b < k / qblock; ++b) {
                        float dx;  // the block's d is the first float of both activation formats
                        std::memcpy(&dx, &p.act[size_t(ti) * p.act_row_bytes + size_t(b) * (qblock == 32 ? 40 : 292)],
                                    4);
                        double wsum = 0;
                        for (int64_t i = b * qblock; i < (b + 1) * qblock; ++i)
                            wsum += std::fabs(p.wf[size_t(r * k + i)]);
                        bound += 0.5 * double(dx) * wsum;
                    }
                    const size_t i = size_t(ti * ldy + r);
                    EXPECT_LE(std::fabs(double(got[i]) - double(want[i])), bound)
                        << where(p, "ref") << " token " << ti << " row " << r << " got " << got[i] << " want "
                        << want[i];
                }
            }
        }
    }
}

// (b'): activations that quantize losslessly (x = 2^-e q, every 32-group holding a +-127, so d = 2^-e
// exactly): the quantized path must then equal the fp32 matmul up to fp32 rounding.
TEST(QuantMatmul, RefMatchesFloatMatmulOnExactActivations) {
    uint32_t seed = 7000;
    for (DType t : kTypes) {
        const MatmulKernel* kern = find_matmul_kernel(t, Isa::kRef);
        for (int64_t k : ks_for(t)) {
            const int64_t n = 2;
            Problem p = make_problem(t, k, n, ++seed);
            std::mt19937 rng(seed);
            for (int64_t i = 0; i < n * k; ++i) {
                const float scale = std::ldexp(1.0f, -int((i / 256) % 5));
                const int q = (i % 32 == 5) ? ((rng() & 1) ? 127 : -127) : int(rng() % 255) - 127;
                p.x[size_t(i)] = scale * float(q);
            }
            for (int64_t ti = 0; ti < n; ++ti) {
                kern->quantize_row(&p.x[size_t(ti * k)], &p.act[size_t(ti) * p.act_row_bytes], k);
            }
            const std::vector<float> got = run_gemm(kern, p, p.rows);
            std::vector<float> want(size_t(n * p.rows));
            ref::matmul(p.x.data(), ref::make_weight_view(p.w.data(), t, p.rows, k), nullptr, want.data(), n);
            for (int64_t ti = 0; ti < n; ++ti) {
                for (int64_t r = p.r0; r < p.r1; ++r) {
                    const size_t i = size_t(ti * p.rows + r);
                    EXPECT_LE(std::fabs(double(got[i]) - double(want[i])), 2e-5 * abs_dot(p, ti, r) + 1e-30)
                        << where(p, "ref") << " token " << ti << " row " << r << " got " << got[i] << " want "
                        << want[i];
                }
            }
        }
    }
}

// (c): hand-made rows.
TEST(QuantMatmul, QuantizeRowQ8KnownValues) {
    float x[64];
    for (int j = 0; j < 32; ++j) x[j] = float(j - 16);  // amax 16: d = 16/127
    // second block: amax 127 -> d = 1, id = 1: exact halves test round-half-to-even
    const float tail[8] = {127.0f, 2.5f, 3.5f, -2.5f, 0.5f, 1.5f, -0.5f, -127.0f};
    for (int j = 0; j < 32; ++j) x[32 + j] = j < 8 ? tail[j] : 0.0f;
    const int8_t want0[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48, -40, -32, -24, -16, -8,
                              0,    8,    16,   24,   32,  40,  48,  56,  64,  71,  79,  87,  95,  103, 111, 119};
    const int8_t want1[8] = {127, 2, 4, -2, 0, 2, 0, -127};
    for (Isa isa : kAllIsas) {
        const MatmulKernel* kern = find_matmul_kernel(DType::kQ8_0, isa);
        if (!isa_supported(isa) || kern == nullptr) continue;
        ActQ8 q[2];
        kern->quantize_row(x, q, 64);
        EXPECT_EQ(q[0].d, 16.0f / 127.0f) << isa_name(isa);
        for (int j = 0; j < 32; ++j) EXPECT_EQ(q[0].q[j], want0[j]) << isa_name(isa) << " j=" << j;
        EXPECT_EQ(q[0].s, q[0].d * -127.0f) << isa_name(isa);
        EXPECT_EQ(q[1].d, 1.0f) << isa_name(isa);
        for (int j = 0; j < 32; ++j) EXPECT_EQ(q[1].q[j], j < 8 ? want1[j] : 0) << isa_name(isa) << " j=" << j;
        EXPECT_EQ(q[1].s, 2.0f + 4.0f - 2.0f + 2.0f) << isa_name(isa);
        // all-zero row: d = 0, q = 0, s = 0
        const float zeros[32] = {};
        kern->quantize_row(zeros, q, 32);
        EXPECT_EQ(q[0].d, 0.0f);
        EXPECT_EQ(q[0].s, 0.0f);
        for (int j = 0; j < 32; ++j) EXPECT_EQ(q[0].q[j], 0);
    }
}

TEST(QuantMatmul, QuantizeRowQ8KBsums) {
    std::vector<float> x(256);
    for (int j = 0; j < 256; ++j) x[size_t(j)] = float((j * 37) % 255 - 127);  // amax 127 -> d = 1
    for (Isa isa : kAllIsas) {
        const MatmulKernel* kern = find_matmul_kernel(DType::kQ4_K, isa);
        if (!isa_supported(isa) || kern == nullptr) continue;
        ActQ8K q;
        kern->quantize_row(x.data(), &q, 256);
        EXPECT_EQ(q.d, 1.0f) << isa_name(isa);
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) {
                EXPECT_EQ(q.q[16 * g + j], int(x[size_t(16 * g + j)])) << isa_name(isa);
                sum += int(x[size_t(16 * g + j)]);
            }
            EXPECT_EQ(q.bsums[g], sum) << isa_name(isa) << " g=" << g;
        }
    }
}

TEST(QuantMatmul, IsaNamesAndLookup) {
    for (Isa isa : kAllIsas) {
        EXPECT_EQ(parse_isa(isa_name(isa)), isa);
    }
    EXPECT_FALSE(parse_isa("sse9").has_value());
    EXPECT_TRUE(isa_supported(Isa::kRef));
    EXPECT_TRUE(isa_supported(best_isa()));
    EXPECT_EQ(find_matmul_kernel(DType::kI16, Isa::kRef), nullptr);
    EXPECT_EQ(find_matmul_kernel(DType::kQ8_1, Isa::kAvx2), nullptr);
    for (DType t : kTypes) {
        EXPECT_NE(find_matmul_kernel(t, Isa::kRef), nullptr) << core::dtype_name(t);
        EXPECT_NE(best_matmul_kernel(t), nullptr) << core::dtype_name(t);
    }
    std::printf("best isa: %s\n", isa_name(best_isa()));
}

}  // namespace
}  // namespace kiln::kernels::cpu
