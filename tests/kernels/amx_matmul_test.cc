// The amx level's packed kernels (kernels/cpu/simd_amx_kernels.h): I8 by tdpbsud, BF16 by tdpbf16ps.
// Each runs twice where it can: with the tile instructions emulated in scalar C++
// (amx_emulated_packed_kernel: every AVX-512 VNNI CPU, so the layouts, blocking, token tails and
// epilogues are checked here), and with the instructions themselves (find_packed_matmul_kernel at
// Isa::kAmx, where isa_supported(kAmx): Sapphire Rapids and later; skipped elsewhere).
//  (a) I8: the ref kernel's bits for every token count (16-token blocks on the tiles, the rest on
//      VnniI8), row ranges from multiples of 16, k a multiple of 64 or not (VnniI8 alone), nothing
//      written outside the rows asked for;
//  (b) BF16: within 1e-5 of sum |w x| of the ref kernel, every token's outputs the same bits alone as
//      in a batch of 40 (batch invariant) and over a split row range; k % 32 != 0 runs the panels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_info.h"
#include "core/numeric.h"
#include "kernels/cpu/matmul.h"

namespace kiln::kernels::cpu {
namespace {

using core::DType;

// The kernels to check for `t`: the emulated one where avx512-vnni runs, and the hardware one.
std::vector<std::pair<std::string, const PackedMatmulKernel*>> amx_kernels(DType t) {
    std::vector<std::pair<std::string, const PackedMatmulKernel*>> out;
    if (isa_supported(Isa::kAvx512Vnni) && amx_emulated_packed_kernel(t))
        out.emplace_back("emulated", amx_emulated_packed_kernel(t));
    if (isa_supported(Isa::kAmx)) out.emplace_back("amx", find_packed_matmul_kernel(t, Isa::kAmx));
    return out;
}

std::vector<float> random_x(int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n * k));
    for (float& v : x) v = nd(rng);
    return x;
}

std::vector<uint8_t> quantize(const MatmulKernel* kern, const std::vector<float>& x, int64_t n, int64_t k) {
    const size_t arb = kern->act_row_bytes(k);
    std::vector<uint8_t> act(arb * size_t(n));
    for (int64_t t = 0; t < n; ++t) kern->quantize_row(&x[size_t(t * k)], &act[size_t(t) * arb], k);
    return act;
}

std::vector<uint8_t> pack(const PackedMatmulKernel* pk, const std::vector<uint8_t>& w, size_t wrb, int64_t rows,
                          int64_t k) {
    std::vector<uint8_t> packed(pk->packed_bytes(rows, k), 0xee);
    pk->pack(w.data(), wrb, rows, k, packed.data());
    return packed;
}

// rows x k BF16 weights (normal, sd 0.5, seeded), and *wf their values as f32.
std::vector<uint8_t> bf16_weights(int64_t rows, int64_t k, uint32_t seed, std::vector<float>* wf) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    wf->assign(size_t(rows * k), 0.0f);
    std::vector<uint8_t> w(size_t(rows * k) * 2);
    for (size_t i = 0; i < wf->size(); ++i) {
        const uint16_t h = core::f32_to_bf16(nd(rng));
        (*wf)[i] = core::bf16_to_f32(h);
        std::memcpy(&w[2 * i], &h, 2);
    }
    return w;
}

// sum |w x| of weight row r and token t (the scale of the 1e-5 bound).
double abs_dot(const std::vector<float>& wf, const std::vector<float>& x, int64_t r, int64_t t, int64_t k) {
    double mag = 0;
    for (int64_t j = 0; j < k; ++j) mag += std::fabs(double(wf[size_t(r * k + j)]) * x[size_t(t * k + j)]);
    return mag;
}

TEST(AmxMatmul, KernelsAtTheAmxLevel) {
    if (!isa_supported(Isa::kAvx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI (the packers below use it)";
    for (DType t : {DType::kI8, DType::kBF16}) {
        const PackedMatmulKernel* pk = find_packed_matmul_kernel(t, Isa::kAmx);
        ASSERT_NE(pk, nullptr);
        EXPECT_NE(std::string(pk->layout).find("AMX"), std::string::npos) << pk->layout;
        ASSERT_NE(amx_emulated_packed_kernel(t), nullptr);
        // avx512-vnni's packing: the same bytes.
        const PackedMatmulKernel* vnni = find_packed_matmul_kernel(t, Isa::kAvx512Vnni);
        const int64_t rows = 21, k = 128;
        std::vector<uint8_t> w(size_t(rows * k) * (t == DType::kI8 ? 1 : 2));
        for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t(i * 37 + 11);
        ASSERT_EQ(pk->packed_bytes(rows, k), vnni->packed_bytes(rows, k));
        EXPECT_EQ(pack(pk, w, w.size() / size_t(rows), rows, k), pack(vnni, w, w.size() / size_t(rows), rows, k));
    }
    EXPECT_EQ(find_packed_matmul_kernel(DType::kQ4_0, Isa::kAmx), find_packed_matmul_kernel(DType::kQ4_0, Isa::kAvx512Vnni));
    EXPECT_EQ(find_matmul_kernel(DType::kQ8_0, Isa::kAmx), find_matmul_kernel(DType::kQ8_0, Isa::kAvx512Vnni));
    EXPECT_EQ(amx_emulated_packed_kernel(DType::kQ8_0), nullptr);
    EXPECT_STREQ(isa_name(Isa::kAmx), "amx");
    EXPECT_EQ(parse_isa("amx"), Isa::kAmx);
}

// The check isa_supported(kAmx) makes once on AMX hardware passes through the emulated tiles (so
// a disagreement there means the hardware, not the layouts, differs from this emulation); and on a
// CPU with AMX (unless KILN_NO_AMX turns it off) it passes on the hardware too: a failed self-check
// would otherwise only turn the level off, and the tests below would skip it.
TEST(AmxMatmul, SelfCheckPasses) {
    if (!isa_supported(Isa::kAvx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI";
    EXPECT_TRUE(amx_emulation_self_check());
    const core::CpuFeatures& f = core::cpu_features();
    const char* off = std::getenv("KILN_NO_AMX");
    if (f.amx_tile && f.amx_int8 && f.amx_bf16 && !(off && *off && std::string(off) != "0")) {
        EXPECT_TRUE(isa_supported(Isa::kAmx)) << "the AMX tile kernels disagree with avx512-vnni on this CPU";
    }
}

TEST(AmxMatmul, I8EqualsTheReferenceBitForBit) {
    const auto kernels = amx_kernels(DType::kI8);
    if (kernels.empty()) GTEST_SKIP() << "no AVX-512 VNNI";
    const MatmulKernel* ref = find_matmul_kernel(DType::kI8, Isa::kRef);
    uint32_t seed = 100;
    for (int64_t k : {64, 576, 1024, 100}) {
        for (int64_t rows : {16, 37, 64, 77}) {
            std::mt19937 rng(++seed);
            std::vector<uint8_t> w(size_t(rows * k));
            for (uint8_t& b : w) b = uint8_t(int8_t(int(rng() % 255) - 127));
            for (int64_t n : {1, 15, 16, 17, 33, 48, 70}) {
                const std::vector<uint8_t> act = quantize(ref, random_x(n, k, ++seed), n, k);
                const size_t arb = ref->act_row_bytes(k);
                for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {16, rows}, {0, 16}}) {
                    if (r1 <= r0) continue;
                    std::vector<float> want(size_t(n * rows), NAN);
                    ref->gemm(w.data(), size_t(k), act.data(), arb, n, k, want.data(), rows, r0, r1);
                    for (const auto& [name, pk] : kernels) {
                        const std::vector<uint8_t> packed = pack(pk, w, size_t(k), rows, k);
                        std::vector<float> got(size_t(n * rows), NAN);
                        pk->gemm(packed.data(), act.data(), arb, n, k, got.data(), rows, r0, r1);
                        for (size_t i = 0; i < got.size(); ++i) {
                            ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
                                << name << " k " << k << " rows " << rows << " n " << n << " [" << r0 << ", " << r1
                                << ") token " << i / size_t(rows) << " row " << i % size_t(rows);
                        }
                    }
                }
            }
        }
    }
}

TEST(AmxMatmul, Bf16MatchesTheReferenceAndIsBatchInvariant) {
    const auto kernels = amx_kernels(DType::kBF16);
    if (kernels.empty()) GTEST_SKIP() << "no AVX-512 VNNI";
    const MatmulKernel* ref = find_matmul_kernel(DType::kBF16, Isa::kRef);
    const MatmulKernel* kern = find_matmul_kernel(DType::kBF16, Isa::kAvx512Vnni);  // bf16 activation rows
    uint32_t seed = 900;
    for (int64_t k : {32, 64, 1120, 300}) {
        for (int64_t rows : {16, 37, 64}) {
            std::vector<float> wf;
            const std::vector<uint8_t> w = bf16_weights(rows, k, ++seed, &wf);
            const int64_t n = 40;  // blocks 0-1 from the rows in place, then the padded tail alone
            const std::vector<float> x = random_x(n, k, ++seed);
            const std::vector<uint8_t> act = quantize(kern, x, n, k);
            const size_t arb = kern->act_row_bytes(k);
            std::vector<float> want(size_t(n * rows), NAN);
            ref->gemm(w.data(), size_t(2 * k), act.data(), arb, n, k, want.data(), rows, 0, rows);
            for (const auto& [name, pk] : kernels) {
                const std::vector<uint8_t> packed = pack(pk, w, size_t(2 * k), rows, k);
                std::vector<float> got(size_t(n * rows), NAN), split(size_t(n * rows), NAN);
                pk->gemm(packed.data(), act.data(), arb, n, k, got.data(), rows, 0, rows);
                pk->gemm(packed.data(), act.data(), arb, n, k, split.data(), rows, 0, 16);
                if (rows > 16) pk->gemm(packed.data(), act.data(), arb, n, k, split.data(), rows, 16, rows);
                for (int64_t t = 0; t < n; ++t) {
                    std::vector<float> alone(size_t(rows), NAN);
                    if (t % 7 == 0 || t == n - 1)  // a token alone: the same bits as in the batch
                        pk->gemm(packed.data(), act.data() + size_t(t) * arb, arb, 1, k, alone.data(), rows, 0, rows);
                    for (int64_t r = 0; r < rows; ++r) {
                        const double mag = abs_dot(wf, x, r, t, k);
                        const size_t i = size_t(t * rows + r);
                        const std::string at = name + " k " + std::to_string(k) + " rows " + std::to_string(rows) +
                                               " token " + std::to_string(t) + " row " + std::to_string(r);
                        ASSERT_NEAR(got[i], want[i], 1e-5 * mag + 1e-30) << at;
                        ASSERT_EQ(std::memcmp(&got[i], &split[i], 4), 0) << at;
                        if (t % 7 == 0 || t == n - 1) {
                            ASSERT_EQ(std::memcmp(&got[i], &alone[size_t(r)], 4), 0) << at;
                        }
                    }
                }
            }
        }
    }
}

// BF16 token counts whose tiles take other paths: 20 (one tile of two blocks, the second the padded
// buffer: another stride, 4 real tokens) and, at k = 8192, 64 tokens (~256 KiB chunks of 2 blocks:
// the outer chunk loop runs twice). Each against the ref bound and, token by token, a run alone.
TEST(AmxMatmul, Bf16PaddedPairsAndChunks) {
    const auto kernels = amx_kernels(DType::kBF16);
    if (kernels.empty()) GTEST_SKIP() << "no AVX-512 VNNI";
    const MatmulKernel* ref = find_matmul_kernel(DType::kBF16, Isa::kRef);
    const MatmulKernel* kern = find_matmul_kernel(DType::kBF16, Isa::kAvx512Vnni);
    for (auto [n, k] : {std::pair<int64_t, int64_t>{20, 256}, {64, 8192}}) {
        const int64_t rows = 16;
        std::vector<float> wf;
        const std::vector<uint8_t> w = bf16_weights(rows, k, uint32_t(n + k), &wf);
        const std::vector<float> x = random_x(n, k, uint32_t(3 * n + k));
        const std::vector<uint8_t> act = quantize(kern, x, n, k);
        const size_t arb = kern->act_row_bytes(k);
        std::vector<float> want(size_t(n * rows), NAN);
        ref->gemm(w.data(), size_t(2 * k), act.data(), arb, n, k, want.data(), rows, 0, rows);
        for (const auto& [name, pk] : kernels) {
            const std::vector<uint8_t> packed = pack(pk, w, size_t(2 * k), rows, k);
            std::vector<float> got(size_t(n * rows), NAN);
            pk->gemm(packed.data(), act.data(), arb, n, k, got.data(), rows, 0, rows);
            for (int64_t t = 0; t < n; ++t) {
                std::vector<float> alone(size_t(rows), NAN);
                pk->gemm(packed.data(), act.data() + size_t(t) * arb, arb, 1, k, alone.data(), rows, 0, rows);
                for (int64_t r = 0; r < rows; ++r) {
                    const double mag = abs_dot(wf, x, r, t, k);
                    const size_t i = size_t(t * rows + r);
                    const std::string at = name + " n " + std::to_string(n) + " k " + std::to_string(k) + " token " +
                                           std::to_string(t) + " row " + std::to_string(r);
                    ASSERT_NEAR(got[i], want[i], 1e-5 * mag + 1e-30) << at;
                    ASSERT_EQ(std::memcmp(&got[i], &alone[size_t(r)], 4), 0) << at;
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
