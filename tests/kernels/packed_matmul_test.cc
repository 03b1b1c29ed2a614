// Packed legacy weights (kernels/cpu PackedMatmulKernel: 8-row groups, scales side by side; 16-row
// groups of 512-bit lanes at avx512-vnni, also MXFP4 / NVFP4) against the same kernels on the ggml
// row layout: the arithmetic is the same lane for lane, so every output must be bit-identical, for
// Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 on every SIMD ISA the CPU runs; rows not a multiple of the group
// (the last group padded), row ranges starting at multiples of the group, decode and prefill. Then
// ops::linear with and without packing over thread counts 1 and 2 (the row slices start at
// multiples of 16), also bit-identical, and packing over 2 or 3 threads gives the same bytes, and packed_bytes equal to the ggml bytes of the row count
// rounded up to the group. F32 / F16 / E4M3_B32 / MXFP8 at the AVX-512 levels and BF16 at
// avx512-vnni (16-row panels, an outer-product GEMM with its own summation order): within the 1e-5 bound of sum |w x| of the ref kernel, batch
// invariant, and bit-identical across row ranges and thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <iterator>
#include <vector>

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/dequant.h"
#include "ops/linear.h"

namespace kiln::kernels::cpu {
namespace {

using core::DType;

const DType kLegacy[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0};
// Packed only at avx512-vnni (its own layout, kernels/cpu/simd_vnni_kernels.h).
const DType kFp4[] = {DType::kMxfp4, DType::kNvfp4};

// Random block bytes with finite fp16 scales (and mins) of a realistic size.
std::vector<uint8_t> legacy_weights(DType t, int64_t rows, int64_t k, uint32_t seed) {
    const auto& info = core::dtype_info(t);
    std::vector<uint8_t> buf(size_t(*core::dtype_bytes(t, uint64_t(rows * k))));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(0.002f, 0.02f);
    for (uint8_t& b : buf) b = uint8_t(rng());
    const bool has_min = t == DType::kQ4_1 || t == DType::kQ5_1 || t == DType::kQ4_K || t == DType::kQ5_K;  // K: d, dmin
    if (t == DType::kMxfp4) {  // E8M0 scales 2^-8 .. 2^1
        for (size_t off = 0; off < buf.size(); off += info.block_bytes) buf[off] = uint8_t(119 + rng() % 10);
        return buf;
    }
    for (size_t off = 0; off < buf.size(); off += info.block_bytes) {  // fp16 d (and m) first, NVFP4 too
        const uint16_t d = core::f32_to_fp16(uni(rng)), m = core::f32_to_fp16(-8.0f * uni(rng));
        std::memcpy(&buf[off], &d, 2);
        if (has_min) std::memcpy(&buf[off + 2], &m, 2);
    }
    return buf;
}

std::vector<float> random_x(int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n * k));
    for (float& v : x) v = nd(rng);
    return x;
}

// w [rows, k] (row stride wrb) packed by pk into a buffer pre-filled with 0xee.
std::vector<uint8_t> pack_weights(const PackedMatmulKernel* pk, const std::vector<uint8_t>& w, size_t wrb,
                                  int64_t rows, int64_t k) {
    std::vector<uint8_t> packed(pk->packed_bytes(rows, k), 0xee);
    pk->pack(w.data(), wrb, rows, k, packed.data());
    return packed;
}

// x [n, k] quantized by kern's activation format, kern->act_row_bytes(k) per token.
std::vector<uint8_t> quantize_tokens(const MatmulKernel* kern, const std::vector<float>& x, int64_t n, int64_t k) {
    const size_t arb = kern->act_row_bytes(k);
    std::vector<uint8_t> act(arb * size_t(n));
    for (int64_t t = 0; t < n; ++t) kern->quantize_row(&x[size_t(t * k)], &act[size_t(t) * arb], k);
    return act;
}

TEST(PackedMatmul, BitIdenticalToRowLayoutOnEveryIsa) {
    int isas = 0;
    uint32_t seed = 900;
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
        if (!isa_supported(isa) || !find_matmul_kernel(DType::kQ8_0, isa)) continue;
        ++isas;
        EXPECT_EQ(find_packed_matmul_kernel(DType::kQ4_K, isa) != nullptr, isa == Isa::kAvx512Vnni || isa == Isa::kAvxVnni);
        EXPECT_EQ(find_packed_matmul_kernel(DType::kQ5_K, isa) != nullptr, isa == Isa::kAvx512Vnni || isa == Isa::kAvxVnni);
        EXPECT_EQ(find_packed_matmul_kernel(DType::kQ6_K, isa) != nullptr, isa == Isa::kAvx512Vnni || isa == Isa::kAvxVnni);
        std::vector<DType> types(std::begin(kLegacy), std::end(kLegacy));
        for (DType t : kFp4) {
            EXPECT_EQ(find_packed_matmul_kernel(t, isa) != nullptr, isa == Isa::kAvx512Vnni) << core::dtype_name(t);
            if (isa == Isa::kAvx512Vnni) types.push_back(t);
        }
        for (DType t : types) {
            const MatmulKernel* kern = find_matmul_kernel(t, isa);
            const PackedMatmulKernel* pk = find_packed_matmul_kernel(t, isa);
            ASSERT_NE(pk, nullptr) << core::dtype_name(t) << " " << isa_name(isa);
            // groups of 16 rows at avx512-vnni (its own 512-bit layout; Q4_0 and Q4_1 32 rows, the
            // 5-bit formats keep the 8-row one), Q4_0 and Q4_1 16 at avx-vnni, 8 elsewhere
            const bool five = t == DType::kQ5_0 || t == DType::kQ5_1;
            const bool q4 = t == DType::kQ4_0 || t == DType::kQ4_1;
            const int64_t group = isa == Isa::kAvxVnni ? (q4 ? 16 : 8) : isa != Isa::kAvx512Vnni || five ? 8 : q4 ? 32 : 16;
            for (int64_t rows : {8, 13, 37, 64, 83}) {
                for (int64_t k : {32, 224, 4128}) {
                    const std::vector<uint8_t> w = legacy_weights(t, rows, k, ++seed);
                    const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k)));
                    ASSERT_EQ(pk->packed_bytes(rows, k), size_t((rows + group - 1) / group * group) * wrb);
                    const std::vector<uint8_t> packed = pack_weights(pk, w, wrb, rows, k);
                    for (int64_t n : {1, 3, 17}) {
                        const std::vector<float> x = random_x(n, k, seed * 7 + uint32_t(n));
                        const size_t arb = kern->act_row_bytes(k);
                        const std::vector<uint8_t> act = quantize_tokens(kern, x, n, k);
                        const int64_t ldy = rows + 3;
                        const int64_t ranges[][2] = {{0, rows}, {8, rows}, {0, 8}, {16, rows}, {0, 16}, {32, rows}, {0, 20}, {32, 57}};
                        for (const auto& rr : ranges) {
                            if (rr[0] >= rr[1] || rr[1] > rows || rr[0] % group != 0) continue;
                            std::vector<float> want(size_t(n * ldy), NAN), got(want);
                            kern->gemm(w.data(), wrb, act.data(), arb, n, k, want.data(), ldy, rr[0], rr[1]);
                            pk->gemm(packed.data(), act.data(), arb, n, k, got.data(), ldy, rr[0], rr[1]);
                            const std::string at = std::string(core::dtype_name(t)) + " " + isa_name(isa) +
                                                   " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                                                   " n=" + std::to_string(n) + " r0=" + std::to_string(rr[0]);
                            for (size_t i = 0; i < got.size(); ++i) {
                                const int64_t r = int64_t(i) % ldy;
                                if (r < rr[0] || r >= rr[1]) {
                                    ASSERT_TRUE(std::isnan(got[i])) << at << " wrote outside its rows: " << r;
                                } else {
                                    ASSERT_FALSE(std::isnan(got[i])) << at << " index " << i;
                                    ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
                                        << at << " index " << i << ": " << got[i] << " vs " << want[i];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if (isas == 0) GTEST_SKIP() << "no SIMD ISA supported by this CPU";
}

// Long rows: the AVX-512 VNNI layout keeps each call's per-(token, block) activation sums in a
// fixed stack buffer of 8192 and takes fewer tokens per pass when they do not fit (k = 96000:
// 3000 blocks, 2 tokens per pass), or a heap buffer when one token's do not (k = 262176: 8193
// blocks). Bit-identical to the row layout as above.
TEST(PackedMatmul, LongRowsBitIdenticalToRowLayout) {
    int isas = 0;
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
        if (!isa_supported(isa) || !find_matmul_kernel(DType::kQ8_0, isa)) continue;
        ++isas;
        for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kNvfp4}) {
            const MatmulKernel* kern = find_matmul_kernel(t, isa);
            const PackedMatmulKernel* pk = find_packed_matmul_kernel(t, isa);
            if (t == DType::kNvfp4 && isa != Isa::kAvx512Vnni) continue;  // packed at avx512-vnni only
            ASSERT_NE(pk, nullptr);
            const int64_t rows = 11;
            for (int64_t k : {96000, 262176}) {
                const std::vector<uint8_t> w = legacy_weights(t, rows, k, uint32_t(k) + uint32_t(int(t)));
                const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k)));
                const std::vector<uint8_t> packed = pack_weights(pk, w, wrb, rows, k);
                const int64_t n = 5;
                const std::vector<float> x = random_x(n, k, uint32_t(k));
                const size_t arb = kern->act_row_bytes(k);
                const std::vector<uint8_t> act = quantize_tokens(kern, x, n, k);
                for (int64_t nn : {int64_t(1), n}) {
                    std::vector<float> want(size_t(nn * rows), NAN), got(want);
                    kern->gemm(w.data(), wrb, act.data(), arb, nn, k, want.data(), rows, 0, rows);
                    pk->gemm(packed.data(), act.data(), arb, nn, k, got.data(), rows, 0, rows);
                    for (size_t i = 0; i < got.size(); ++i) {
                        ASSERT_FALSE(std::isnan(got[i])) << i;
                        ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
                            << core::dtype_name(t) << " " << isa_name(isa) << " k=" << k << " n=" << nn << " index "
                            << i << ": " << got[i] << " vs " << want[i];
                    }
                }
            }
        }
    }
    if (isas == 0) GTEST_SKIP() << "no SIMD ISA supported by this CPU";
}

TEST(PackedMatmul, LinearWithAndWithoutPackingAgreeAcrossThreadCounts) {
    if (best_isa() == Isa::kRef) GTEST_SKIP() << "no SIMD ISA";
    core::ThreadPool pool1(1), pool2(2);
    const int64_t rows = 203, k = 256;  // 25 groups + 3 rows
    std::vector<DType> types(std::begin(kLegacy), std::end(kLegacy));
    if (best_isa() == Isa::kAvx512Vnni || best_isa() == Isa::kAmx) types.insert(types.end(), std::begin(kFp4), std::end(kFp4));
    for (DType t : types) {
        const std::vector<uint8_t> w = legacy_weights(t, rows, k, uint32_t(int(t)) + 50);
        const ref::WeightView wv = ref::make_weight_view(w.data(), t, rows, k);
        ops::LinearOptions on, off;
        off.pack = false;
        auto lp = ops::make_linear(wv, on);
        auto lu = ops::make_linear(wv, off);
        ASSERT_TRUE(lp.is_ok() && lu.is_ok());
        ASSERT_TRUE(lp->packed != nullptr) << core::dtype_name(t);
        ASSERT_TRUE(lu->packed == nullptr);
        // Packed over threads in 32-row slices (LinearOptions::pool): the same bytes.
        for (int threads : {2, 3}) {
            core::ThreadPool pack_pool(threads);
            ops::LinearOptions sliced;
            sliced.pool = &pack_pool;
            auto ls = ops::make_linear(wv, sliced);
            ASSERT_TRUE(ls.is_ok() && ls->packed != nullptr);
            ASSERT_EQ(0, std::memcmp(ls->packed.get(), lp->packed.get(), lp->packed_kernel->packed_bytes(rows, k)))
                << core::dtype_name(t) << " packed over " << threads << " threads";
        }
        for (int64_t m : {1, 5, 40}) {
            const std::vector<float> x = random_x(m, k, uint32_t(m) + 3);
            std::vector<float> bias(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) bias[size_t(r)] = 0.01f * float(r % 7);
            std::vector<float> want(size_t(m * rows)), got(want.size());
            std::vector<uint8_t> scratch;
            ASSERT_TRUE(ops::linear(pool1, x.data(), m, *lu, bias.data(), want.data(), scratch).is_ok());
            for (core::ThreadPool* pool : {&pool1, &pool2}) {
                std::fill(got.begin(), got.end(), NAN);
                ASSERT_TRUE(ops::linear(*pool, x.data(), m, *lp, bias.data(), got.data(), scratch).is_ok());
                ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
                    << core::dtype_name(t) << " m=" << m << " threads=" << pool->num_threads();
            }
        }
    }
}

// Random F32, F16 or BF16 weights ~N(0, 0.05) as stored, and their f32 values.
std::vector<uint8_t> float_weights(DType t, int64_t rows, int64_t k, uint32_t seed, std::vector<float>* values) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    values->resize(size_t(rows * k));
    std::vector<uint8_t> buf(size_t(rows * k) * (t == DType::kF32 ? 4 : 2));
    for (size_t i = 0; i < values->size(); ++i) {
        float v = nd(rng);
        if (t == DType::kBF16) {
            const uint16_t h = core::f32_to_bf16(v);
            std::memcpy(&buf[2 * i], &h, 2);
            v = core::bf16_to_f32(h);
        } else if (t == DType::kF16) {
            const uint16_t h = core::f32_to_fp16(v);
            std::memcpy(&buf[2 * i], &h, 2);
            v = core::fp16_to_f32(h);
        } else {
            std::memcpy(&buf[4 * i], &v, 4);
        }
        (*values)[i] = v;
    }
    return buf;
}

// Random FP8 blocks (E4M3_B32: fp32 scales ~0.01-0.02; MXFP8: E8M0 2^-8 .. 2^-5; codes without the
// NaN codes 0x7F / 0xFF) and their f32 values.
std::vector<uint8_t> fp8_weights(DType t, int64_t rows, int64_t k, uint32_t seed, std::vector<float>* values) {
    std::mt19937 rng(seed);
    const size_t bb = t == DType::kMxfp8 ? 33 : 36, qs = t == DType::kMxfp8 ? 1 : 4;
    std::vector<uint8_t> buf(size_t(rows * k / 32) * bb);
    for (size_t off = 0; off < buf.size(); off += bb) {
        if (t == DType::kMxfp8) {
            buf[off] = uint8_t(119 + rng() % 4);
        } else {
            const float d = 0.01f + 0.01f * float(rng() % 1000) / 1000.0f;
            std::memcpy(&buf[off], &d, 4);
        }
        for (size_t j = 0; j < 32; ++j) {
            uint8_t c = uint8_t(rng());
            if ((c & 0x7f) == 0x7f) c ^= 1;
            buf[off + qs + j] = c;
        }
    }
    values->resize(size_t(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
        const auto st = ref::dequantize_row(t, &buf[size_t(r * k / 32) * bb], &(*values)[size_t(r * k)], k);
        EXPECT_TRUE(st.is_ok());
    }
    return buf;
}

// The checks the non-bit-identical packed kernels share: pk over all n tokens against the ref kernel
// within 1e-5 of sum |w x| (wf: the weights as f32, x: the activations before quantization), each
// token alone and every 16-row range bit-identical to the full call, nothing written past `rows`.
void expect_packed_matches(const PackedMatmulKernel* pk, const MatmulKernel* ref, const std::vector<uint8_t>& w,
                           size_t wrb, const std::vector<uint8_t>& packed, const std::vector<uint8_t>& act, size_t arb,
                           int64_t rows, int64_t k, int64_t n, const std::vector<float>& wf, const std::vector<float>& x,
                           const std::string& at) {
    const int64_t ldy = rows + 3;
    std::vector<float> want(size_t(n * ldy), NAN), got(want), alone(want), split(want);
    ref->gemm(w.data(), wrb, act.data(), arb, n, k, want.data(), ldy, 0, rows);
    pk->gemm(packed.data(), act.data(), arb, n, k, got.data(), ldy, 0, rows);
    for (int64_t ti = 0; ti < n; ++ti)
        pk->gemm(packed.data(), &act[size_t(ti) * arb], arb, 1, k, &alone[size_t(ti * ldy)], ldy, 0, rows);
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        pk->gemm(packed.data(), act.data(), arb, n, k, split.data(), ldy, r0, std::min(rows, r0 + 16));
    for (int64_t ti = 0; ti < n; ++ti) {
        for (int64_t r = 0; r < ldy; ++r) {
            const size_t i = size_t(ti * ldy + r);
            if (r >= rows) {
                ASSERT_TRUE(std::isnan(got[i])) << at << " wrote outside its rows: " << r;
                continue;
            }
            double mag = 0;
            for (int64_t c = 0; c < k; ++c) mag += std::fabs(double(wf[size_t(r * k + c)]) * double(x[size_t(ti * k + c)]));
            ASSERT_NEAR(got[i], want[i], 1e-5 * mag + 1e-30) << at << " token " << ti << " row " << r;
            ASSERT_EQ(0, std::memcmp(&got[i], &alone[i], 4)) << at << " token " << ti << " row " << r;
            ASSERT_EQ(0, std::memcmp(&got[i], &split[i], 4)) << at << " token " << ti << " row " << r;
        }
    }
}

TEST(PackedMatmul, FloatPanelsMatchReferenceAndAreBatchInvariant) {
    int isas = 0;
    uint32_t seed = 4000;
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
        if (!isa_supported(isa) || !find_matmul_kernel(DType::kQ8_0, isa)) continue;
        for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kE4m3B32, DType::kMxfp8}) {
            const PackedMatmulKernel* pk = find_packed_matmul_kernel(t, isa);
            const bool fp8 = t == DType::kE4m3B32 || t == DType::kMxfp8;
            const bool avx512 = isa == Isa::kAvx512 || isa == Isa::kAvx512Vnni;  // the float panels' levels
            const bool expect = t == DType::kBF16 ? isa == Isa::kAvx512Vnni : avx512;
            ASSERT_EQ(pk != nullptr, expect) << core::dtype_name(t) << " " << isa_name(isa);
            if (!pk) continue;
            ++isas;
            const MatmulKernel* ref = find_matmul_kernel(t, Isa::kRef);
            const MatmulKernel* kern = find_matmul_kernel(t, isa);  // its activation format (f32 or bf16 rows)
            for (int64_t rows : {16, 37, 64}) {
                for (int64_t k : {1, 7, 32, 256, 300, 1100, 1120}) {
                    if (fp8 != (k % 32 == 0)) continue;  // FP8 rows are whole 32-blocks; the others take the rest
                    std::vector<float> wf;
                    const std::vector<uint8_t> w =
                        fp8 ? fp8_weights(t, rows, k, ++seed, &wf) : float_weights(t, rows, k, ++seed, &wf);
                    const size_t wrb = w.size() / size_t(rows);
                    const size_t panels = size_t((rows + 15) / 16);
                    if (fp8) {  // per 32 columns and panel: 16 scales (fp32, or E8M0 bytes) + 16 x 32 codes
                        ASSERT_EQ(pk->packed_bytes(rows, k), panels * size_t(k / 32) * (t == DType::kMxfp8 ? 528 : 576));
                    } else {
                        const int64_t kp = t == DType::kBF16 ? (k + 1) / 2 * 2 : k;  // BF16: whole column pairs
                        ASSERT_EQ(pk->packed_bytes(rows, k), panels * 16 * (wrb / size_t(k)) * size_t(kp));
                    }
                    const std::vector<uint8_t> packed = pack_weights(pk, w, wrb, rows, k);
                    for (int64_t n : {1, 5, 13, 50}) {  // 50: two passes of 48 tokens
                        const std::vector<float> x = random_x(n, k, seed * 7 + uint32_t(n));
                        const size_t arb = kern->act_row_bytes(k);
                        const std::vector<uint8_t> act = quantize_tokens(kern, x, n, k);
                        const std::string at = std::string(core::dtype_name(t)) + " " + isa_name(isa) +
                                               " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                                               " n=" + std::to_string(n);
                        expect_packed_matches(pk, ref, w, wrb, packed, act, arb, rows, k, n, wf, x, at);
                        if (HasFatalFailure()) return;
                    }
                }
            }
        }
    }
    if (isas == 0) GTEST_SKIP() << "no AVX-512 level on this CPU";
}

// Q4_K, Q5_K and Q6_K at avx512-vnni (16-row groups, lanes = rows; kernels/cpu/simd_vnni_kquant.h): against the ref
// kernel within 1e-5 of sum |w x| (the same exact integers per super-block, another fp32 order),
// batch invariant, bit-identical over row ranges, nothing written outside them; then ops::linear
// packed on 1 and 2 threads bit-identical and against the unpacked kernel within the same bound.
// ops::linear with a packed kernel whose bits differ from the row kernel's: packed on 1 and 2
// threads bit-identical, and against --no-pack within 2e-5 of sum |w x| (wf: the weights as f32),
// for 1, 5 and 40 tokens (activations seeded m + x_seed).
void expect_linear_packed_matches(DType t, const std::vector<uint8_t>& w, const std::vector<float>& wf, int64_t rows,
                                  int64_t k, uint32_t x_seed) {
    core::ThreadPool pool1(1), pool2(2);
    const ref::WeightView wv = ref::make_weight_view(w.data(), t, rows, k);
    ops::LinearOptions off;
    off.pack = false;
    auto lp = ops::make_linear(wv, ops::LinearOptions{});
    auto lu = ops::make_linear(wv, off);
    ASSERT_TRUE(lp.is_ok() && lu.is_ok());
    ASSERT_TRUE(lp->packed != nullptr) << core::dtype_name(t);
    for (int64_t m : {1, 5, 40}) {
        const std::vector<float> x = random_x(m, k, uint32_t(m) + x_seed);
        std::vector<float> unpacked(size_t(m * rows)), one(unpacked.size()), two(unpacked.size());
        std::vector<uint8_t> scratch;
        ASSERT_TRUE(ops::linear(pool1, x.data(), m, *lu, nullptr, unpacked.data(), scratch).is_ok());
        ASSERT_TRUE(ops::linear(pool1, x.data(), m, *lp, nullptr, one.data(), scratch).is_ok());
        ASSERT_TRUE(ops::linear(pool2, x.data(), m, *lp, nullptr, two.data(), scratch).is_ok());
        ASSERT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4)) << core::dtype_name(t) << " m=" << m;
        for (int64_t ti = 0; ti < m; ++ti) {
            for (int64_t r = 0; r < rows; ++r) {
                double mag = 0;
                for (int64_t c = 0; c < k; ++c)
                    mag += std::fabs(double(wf[size_t(r * k + c)]) * double(x[size_t(ti * k + c)]));
                const size_t i = size_t(ti * rows + r);
                ASSERT_NEAR(one[i], unpacked[i], 2e-5 * mag)
                    << core::dtype_name(t) << " m=" << m << " token " << ti << " row " << r;
            }
        }
    }
}

// Random K-quant blocks with sane fp16 scales: Q4_K's / Q5_K's d, dmin first (legacy_weights), Q6_K's d
// at 208.
std::vector<uint8_t> kquant_weights(DType t, int64_t rows, int64_t k, uint32_t seed) {
    std::vector<uint8_t> w = legacy_weights(t, rows, k, seed);
    if (t == DType::kQ6_K) {
        std::mt19937 rng(seed + 1);
        for (size_t off = 0; off < w.size(); off += 210) {
            const uint16_t d = core::f32_to_fp16(0.0005f + 0.001f * float(rng() % 1000) / 1000.0f);
            std::memcpy(&w[off + 208], &d, 2);
        }
    }
    return w;
}

void check_kquant_groups(DType t, size_t sb_bytes, Isa isa = Isa::kAvx512Vnni, int64_t group = 16) {
    const PackedMatmulKernel* pk = find_packed_matmul_kernel(t, isa);
    ASSERT_NE(pk, nullptr);
    const MatmulKernel* ref = find_matmul_kernel(t, Isa::kRef);
    const MatmulKernel* kern = find_matmul_kernel(t, isa);
    uint32_t seed = 7000;
    for (int64_t rows : {16, 37, 64}) {
        for (int64_t k : {256, 768, 2304}) {
            const std::vector<uint8_t> w = kquant_weights(t, rows, k, ++seed);
            const size_t wrb = size_t(*core::dtype_bytes(t, uint64_t(k)));
            std::vector<float> wf(size_t(rows * k));
            for (int64_t r = 0; r < rows; ++r)
                ASSERT_TRUE(ref::dequantize_row(t, &w[size_t(r) * wrb], &wf[size_t(r * k)], k).is_ok());
            ASSERT_EQ(pk->packed_bytes(rows, k), size_t((rows + group - 1) / group) * size_t(k / 256) * sb_bytes);
            const std::vector<uint8_t> packed = pack_weights(pk, w, wrb, rows, k);
            for (int64_t n : {1, 5, 13}) {
                const std::vector<float> x = random_x(n, k, seed * 3 + uint32_t(n));
                const size_t arb = kern->act_row_bytes(k);
                const std::vector<uint8_t> act = quantize_tokens(kern, x, n, k);
                const std::string at = std::string(core::dtype_name(t)) + " " + isa_name(isa) + " rows=" + std::to_string(rows) +
                                       " k=" + std::to_string(k) + " n=" + std::to_string(n);
                expect_packed_matches(pk, ref, w, wrb, packed, act, arb, rows, k, n, wf, x, at);
                if (::testing::Test::HasFatalFailure()) return;
            }
        }
    }
    if (isa != best_isa()) return;  // ops::linear packs with the best level
    const int64_t rows = 203, k = 512;
    const std::vector<uint8_t> w = kquant_weights(t, rows, k, 77);
    std::vector<float> wf(size_t(rows * k));
    ASSERT_TRUE(ref::dequantize_row(t, w.data(), wf.data(), rows * k).is_ok());
    expect_linear_packed_matches(t, w, wf, rows, k, 21);
}

// Q4_K, Q5_K and Q6_K at avx-vnni (8-row groups, lanes = rows; kernels/cpu/simd_avxvnni_packed.h,
// simd_avxvnni_q6k.h), as above.
TEST(PackedMatmul, AvxVnniQ4KGroupsMatchReferenceAndAreBatchInvariant) {
    if (!isa_supported(Isa::kAvxVnni)) GTEST_SKIP() << "no AVX-VNNI";
    check_kquant_groups(DType::kQ4_K, 1184, Isa::kAvxVnni, 8);  // 8 rows' d, dmin, scales / mins, nibbles
    if (HasFatalFailure()) return;
    check_kquant_groups(DType::kQ5_K, 1440, Isa::kAvxVnni, 8);  // as Q4_K, then the 8 rows' qh
    if (HasFatalFailure()) return;
    check_kquant_groups(DType::kQ6_K, 1680, Isa::kAvxVnni, 8);  // exactly the 8 rows' ggml bytes
}

TEST(PackedMatmul, KQuantGroupsMatchReferenceAndAreBatchInvariant) {
    if (!isa_supported(Isa::kAvx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI";
    check_kquant_groups(DType::kQ4_K, 2368);  // 16 rows' d, dmin, unpacked scales / mins, nibbles
    if (HasFatalFailure()) return;
    check_kquant_groups(DType::kQ5_K, 2880);  // as Q4_K, then the 16 rows' qh
    if (HasFatalFailure()) return;
    check_kquant_groups(DType::kQ6_K, 3360);  // exactly the 16 rows' ggml bytes
}

TEST(PackedMatmul, FloatLinearPackedAcrossThreadCounts) {
    const bool vnni = best_isa() == Isa::kAvx512Vnni || best_isa() == Isa::kAmx;
    if (best_isa() != Isa::kAvx512 && !vnni) GTEST_SKIP() << "no AVX-512 level";
    const int64_t rows = 203;
    std::vector<DType> types = {DType::kF32, DType::kF16, DType::kE4m3B32, DType::kMxfp8};
    if (vnni) types.push_back(DType::kBF16);  // (at amx: the tiles, through ops::linear)
    for (DType t : types) {
        const bool fp8 = t == DType::kE4m3B32 || t == DType::kMxfp8;
        const int64_t k = fp8 ? 320 : 300;
        std::vector<float> wf;
        const std::vector<uint8_t> w = fp8 ? fp8_weights(t, rows, k, uint32_t(int(t)) + 70, &wf)
                                           : float_weights(t, rows, k, uint32_t(int(t)) + 70, &wf);
        expect_linear_packed_matches(t, w, wf, rows, k, 9);
        if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
