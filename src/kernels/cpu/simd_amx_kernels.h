// AMX tile kernels for the amx level (matmul_amx.cc; Intel Sapphire Rapids and later): I8 weights
// (W8A8 per output channel) by tdpbsud and BF16 weights by tdpbf16ps, over the avx512-vnni level's
// packed layouts, which are already AMX's B-tile layout. Internal linkage, as simd_avx2.h.
//
// The multiply C[token][row] += A[token][k] . B[k][row], every tile 16 rows x 64 bytes:
//  - A: 16 activation rows (tokens), 64 bytes of each (64 int8 / 32 bf16), row stride = the
//    activation row's bytes (tileloadd takes the stride);
//  - B: 16 consecutive 64-byte vectors of a 16-row group / panel (k / 4 int8 quads, or k / 2 bf16
//    pairs, of 16 rows each: VnniI8's groups and the BF16 pair panels of simd_float_packed.h);
//  - C: 16 tokens x 16 rows of int32 / fp32.
// Tiles 0-3 are accumulators (token block b, row group g at 2 b + g), 4-5 the two token blocks' A,
// 6-7 the two row groups' B: 32 tokens x 32 rows per step, 4 tile products per 2 + 2 tile loads.
//
// Arithmetic:
//  - I8 (AmxI8): tdpbsud (signed activations x the packed weights + 128, unsigned), the int32 sums
//    exact as in VnniI8, then y = d_x * float(C - 128 * sum(q)): VnniI8's bits, hence the ref kernel's.
//    Taken when n >= 16 and k % 64 == 0, for the 16-token blocks; the other tokens (and every call
//    below 16 tokens or with another k) run VnniI8 itself, so mixing them changes no bit.
//  - BF16 (AmxBf16): every token count through the tiles (a lone token is a block of 1 in a 16-row
//    buffer whose other rows are never stored), so the summation order per output is the same in every batch: per 32 columns one
//    tdpbf16ps, which (Intel SDM) sums the even and the odd products of its 16 pairs in two fp32
//    chains from zero (fma, denormals flushed) and adds both to the accumulator; the accumulator
//    starts at zero and runs over the whole row. Batch invariant; not the avx512-vnni panels' bits
//    (another order); within the 1e-5 bound of the ref kernel. k % 32 != 0 runs the panels' kernel.
//
// Tiles: a policy with begin() (ldtilecfg), end() (tilerelease), zero / load / store / dot_i8 /
// dot_bf16 on tile numbers. AmxHardware issues the instructions (inline asm: the assembler knows
// them without -mamx-*); AmxEmulated computes them in scalar C++ per the SDM's pseudocode, so the
// layouts, blockings and epilogues run (and are tested) on CPUs without AMX
// (amx_emulated_packed_kernel, matmul.h).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/simd_float_packed.h"
#include "kernels/cpu/simd_i8_kernels.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512BF16__)
#error "simd_amx_kernels.h needs the avx512-vnni level's flags"
#endif

namespace kiln::kernels::cpu {
namespace {

// The ldtilecfg operand (palette 1): every tile 16 rows x 64 bytes.
struct alignas(64) AmxTileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(AmxTileConfig) == 64);

struct AmxHardware {
    static void begin() {
        static const AmxTileConfig config;
        __asm__ volatile("ldtilecfg %0" ::"m"(config));
    }
    static void end() { __asm__ volatile("tilerelease" ::); }
    template <int T>
    static void zero() {
        __asm__ volatile("tilezero %%tmm%c0" ::"n"(T));
    }
    template <int T>
    static void load(const void* p, int64_t stride) {
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "n"(T) : "memory");
    }
    template <int T>
    static void store(void* p, int64_t stride) {
        __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "n"(T) : "memory");
    }
    template <int C, int A, int B>  // C += A (s8) . B (u8)
    static void dot_i8() {
        __asm__ volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"n"(C), "n"(A), "n"(B));
    }
    template <int C, int A, int B>  // C += A (bf16 pairs) . B (bf16 pairs)
    static void dot_bf16() {
        __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"n"(C), "n"(A), "n"(B));
    }
};

// The same operations in scalar C++ on a thread's 8 emulated tiles (16 x 64 bytes each).
struct AmxEmulated {
    static uint8_t (&tile(int t))[16][64] {
        alignas(64) static thread_local uint8_t tiles[8][16][64];
        return tiles[t];
    }
    static void begin() {}
    static void end() {}
    template <int T>
    static void zero() {
        std::memset(tile(T), 0, sizeof(tile(T)));
    }
    template <int T>
    static void load(const void* p, int64_t stride) {
        for (int r = 0; r < 16; ++r) std::memcpy(tile(T)[r], static_cast<const uint8_t*>(p) + r * stride, 64);
    }
    template <int T>
    static void store(void* p, int64_t stride) {
        for (int r = 0; r < 16; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, tile(T)[r], 64);
    }
    template <int C, int A, int B>
    static void dot_i8() {
        for (int m = 0; m < 16; ++m) {
            for (int n = 0; n < 16; ++n) {
                uint32_t acc;  // wraps as the hardware's int32 (never here: the sums are bounded)
                std::memcpy(&acc, &tile(C)[m][4 * n], 4);
                for (int k = 0; k < 16; ++k) {
                    for (int j = 0; j < 4; ++j)
                        acc += uint32_t(int32_t(int8_t(tile(A)[m][4 * k + j])) * int32_t(tile(B)[k][4 * n + j]));
                }
                std::memcpy(&tile(C)[m][4 * n], &acc, 4);
            }
        }
    }
    static float bf16_at(const uint8_t* p) {  // denormals read as zero
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t bits = (h & 0x7f80) == 0 ? uint32_t(h & 0x8000) << 16 : uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
    }
    static float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
    template <int C, int A, int B>
    static void dot_bf16() {
        for (int m = 0; m < 16; ++m) {
            for (int n = 0; n < 16; ++n) {
                float even = 0.0f, odd = 0.0f;
                for (int k = 0; k < 16; ++k) {
                    even = ftz(std::fma(bf16_at(&tile(A)[m][4 * k]), bf16_at(&tile(B)[k][4 * n]), even));
                    odd = ftz(std::fma(bf16_at(&tile(A)[m][4 * k + 2]), bf16_at(&tile(B)[k][4 * n + 2]), odd));
                }
                float c;
                std::memcpy(&c, &tile(C)[m][4 * n], 4);
                c = ftz(ftz(c) + ftz(even + odd));
                std::memcpy(&tile(C)[m][4 * n], &c, 4);
            }
        }
    }
};

// Element policies: kColBytes per tile row step (64 bytes of A per token), the per-16-row weight
// bytes, the tile product, and the epilogue of one C tile (16 tokens x 16 rows at `c`, 64-byte rows).
struct AmxElemI8 {
    static constexpr int64_t kActOffset = sizeof(ActI8Row);  // the row header before the codes
    static int64_t group_bytes(int64_t k) { return VnniI8::group_bytes(k); }
    template <class Tiles, int C, int A, int B>
    static void dot() {
        Tiles::template dot_i8<C, A, B>();
    }
    // tokens rows of y from C (int32): d * float(C - 128 * sum); act: the block's first activation row.
    static void finish(const uint8_t* c, const uint8_t* act, size_t arb, int tokens, float* y, int64_t ldy,
                       int valid) {
        for (int m = 0; m < tokens; ++m) {
            ActI8Row h;
            std::memcpy(&h, act + m * int64_t(arb), sizeof(h));
            const __m512i dot = _mm512_sub_epi32(_mm512_loadu_si512(c + 64 * m), _mm512_set1_epi32(128 * h.sum));
            // (maskz: GCC 12 warns of _mm512_cvtepi32_ps's undefined source)
            const __m512 v = _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), dot);
            store_rows16(y + m * ldy, _mm512_mul_ps(_mm512_set1_ps(h.d), v), valid);
        }
    }
};

struct AmxElemBf16 {
    static constexpr int64_t kActOffset = 0;
    static int64_t group_bytes(int64_t k) { return PackedElemBF16::panel_bytes(k); }
    template <class Tiles, int C, int A, int B>
    static void dot() {
        Tiles::template dot_bf16<C, A, B>();
    }
    static void finish(const uint8_t* c, const uint8_t*, size_t, int tokens, float* y, int64_t ldy, int valid) {
        for (int m = 0; m < tokens; ++m) store_rows16(y + m * ldy, _mm512_loadu_ps(c + 64 * m), valid);
    }
};

template <class Tiles, class Elem>
struct AmxGemm {
    // One A operand: 16 token rows from a (codes at a + kActOffset), stride as; `tokens` of them real.
    struct Block {
        const uint8_t* a;
        size_t as;
        int tokens;
    };

    // TB token blocks x RG row groups (16 rows each, from w, group stride wb) over `steps` 64-byte
    // column steps; y at (the first block's first token, the first group's first row). The second
    // block's y rows start 16 tokens below; `valid` rows of the last group are stored.
    template <int TB, int RG>
    static void tile(const Block* blocks, const uint8_t* w, int64_t wb, int64_t steps, float* y, int64_t ldy,
                     int valid) {
        Tiles::template zero<0>();
        if constexpr (RG > 1) Tiles::template zero<1>();
        if constexpr (TB > 1) Tiles::template zero<2>();
        if constexpr (TB > 1 && RG > 1) Tiles::template zero<3>();
        const uint8_t* a0 = blocks[0].a + Elem::kActOffset;
        const uint8_t* a1 = TB > 1 ? blocks[1].a + Elem::kActOffset : nullptr;
        for (int64_t s = 0; s < steps; ++s) {
            Tiles::template load<4>(a0 + 64 * s, int64_t(blocks[0].as));
            if constexpr (TB > 1) Tiles::template load<5>(a1 + 64 * s, int64_t(blocks[1].as));
            Tiles::template load<6>(w + 1024 * s, 64);
            if constexpr (RG > 1) Tiles::template load<7>(w + wb + 1024 * s, 64);
            Elem::template dot<Tiles, 0, 4, 6>();
            if constexpr (RG > 1) Elem::template dot<Tiles, 1, 4, 7>();
            if constexpr (TB > 1) Elem::template dot<Tiles, 2, 5, 6>();
            if constexpr (TB > 1 && RG > 1) Elem::template dot<Tiles, 3, 5, 7>();
        }
        alignas(64) uint8_t c[16 * 64];
        auto out = [&](int b, int g, int rows) {
            Elem::finish(c, blocks[b].a, blocks[b].as, blocks[b].tokens, y + 16 * b * ldy + 16 * g, ldy, rows);
        };
        Tiles::template store<0>(c, 64);
        out(0, 0, RG > 1 ? 16 : valid);
        if constexpr (RG > 1) {
            Tiles::template store<1>(c, 64);
            out(0, 1, valid);
        }
        if constexpr (TB > 1) {
            Tiles::template store<2>(c, 64);
            out(1, 0, RG > 1 ? 16 : valid);
        }
        if constexpr (TB > 1 && RG > 1) {
            Tiles::template store<3>(c, 64);
            out(1, 1, valid);
        }
    }

    template <int TB>
    static void tile_rows(const Block* blocks, const uint8_t* w, int64_t wb, int64_t steps, float* y, int64_t ldy,
                          int64_t rows) {
        if (rows > 16) return tile<TB, 2>(blocks, w, wb, steps, y, ldy, int(rows - 16));
        tile<TB, 1>(blocks, w, wb, steps, y, ldy, int(rows));
    }

    // Token blocks [0, nb) (blocks[i] for block i) against rows [r0, r1) (r0 a multiple of 16): per
    // chunk of ~256 KiB of activations, 32 rows at a time (their weights stay in L2) against every
    // pair of blocks in the chunk.
    static void run(const std::vector<Block>& blocks, int64_t chunk_blocks, const uint8_t* packed, int64_t k,
                    float* y, int64_t ldy, int64_t r0, int64_t r1) {
        const int64_t wb = Elem::group_bytes(k), steps = wb / 1024;
        const int64_t nb = int64_t(blocks.size());
        Tiles::begin();
        for (int64_t b0 = 0; b0 < nb; b0 += chunk_blocks) {
            const int64_t b1 = b0 + chunk_blocks < nb ? b0 + chunk_blocks : nb;
            for (int64_t r = r0; r < r1; r += 32) {
                const uint8_t* w = packed + (r / 16) * wb;
                const int64_t rows = r1 - r < 32 ? r1 - r : 32;
                for (int64_t b = b0; b < b1; b += 2) {
                    float* yb = y + 16 * b * ldy + r;
                    if (b + 1 < b1) {
                        tile_rows<2>(&blocks[b], w, wb, steps, yb, ldy, rows);
                    } else {
                        tile_rows<1>(&blocks[b], w, wb, steps, yb, ldy, rows);
                    }
                }
            }
        }
        Tiles::end();
    }

    // Blocks per chunk: ~256 KiB of activation rows, an even count, at least 2.
    static int64_t chunk_blocks(size_t arb) {
        const int64_t c = int64_t((256 << 10) / (16 * (arb > 0 ? arb : 1))) & ~int64_t(1);
        return c < 2 ? 2 : c;
    }
};

// PackedMatmulKernel::gemm for I8 at the amx level (VnniI8's packing).
template <class Tiles>
void amx_i8_gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                 int64_t r0, int64_t r1) {
    const int64_t full = k % 64 == 0 ? n / 16 * 16 : 0;
    if (full > 0) {
        using G = AmxGemm<Tiles, AmxElemI8>;
        const uint8_t* a = static_cast<const uint8_t*>(act);
        static thread_local std::vector<typename G::Block> blocks;  // reused: no allocation per call
        blocks.clear();
        for (int64_t t = 0; t < full; t += 16) blocks.push_back({a + t * int64_t(arb), arb, 16});
        G::run(blocks, G::chunk_blocks(arb), static_cast<const uint8_t*>(packed), k, y, ldy, r0, r1);
    }
    if (full < n) {
        VnniI8::gemm(packed, static_cast<const uint8_t*>(act) + full * int64_t(arb), arb, n - full, k, y + full * ldy,
                     ldy, r0, r1);
    }
}

// PackedMatmulKernel::gemm for BF16 at the amx level (the avx512-vnni pair panels).
template <class Tiles>
void amx_bf16_gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                   int64_t r0, int64_t r1) {
    if (k % 32 != 0) return FloatPacked<PackedElemBF16>::gemm(packed, act, arb, n, k, y, ldy, r0, r1);
    using G = AmxGemm<Tiles, AmxElemBf16>;
    const uint8_t* a = static_cast<const uint8_t*>(act);
    static thread_local std::vector<typename G::Block> blocks;  // reused: decode allocates nothing
    blocks.clear();
    const int64_t full = n / 16 * 16;
    for (int64_t t = 0; t < full; t += 16) blocks.push_back({a + t * int64_t(arb), arb, 16});
    if (full < n) {  // the last tokens in a 16-row buffer (tileloadd reads 16 rows)
        // Its other rows are never cleared: row m of a product depends on row m of A alone, and only
        // the block's real tokens are stored (decode would otherwise clear 16 rows per call).
        static thread_local std::vector<uint8_t> pad;
        const size_t row = size_t(2 * k);
        if (pad.size() < 16 * row) pad.resize(16 * row);
        for (int64_t t = full; t < n; ++t) std::memcpy(pad.data() + (t - full) * row, a + t * int64_t(arb), row);
        blocks.push_back({pad.data(), row, int(n - full)});
    }
    G::run(blocks, G::chunk_blocks(arb), static_cast<const uint8_t*>(packed), k, y, ldy, r0, r1);
}

template <class Tiles>
constexpr PackedMatmulKernel kAmxI8Packed{VnniI8::packed_bytes, VnniI8::pack, amx_i8_gemm<Tiles>,
                                          "16-row VNNI groups (AMX tiles)"};
template <class Tiles>
constexpr PackedMatmulKernel kAmxBf16Packed{FloatPacked<PackedElemBF16>::packed_bytes,
                                            FloatPacked<PackedElemBF16>::pack, amx_bf16_gemm<Tiles>,
                                            "16-row bf16 pair panels (AMX tiles)"};

}  // namespace
}  // namespace kiln::kernels::cpu
