// Internal helpers shared by the SIMD kernel TUs (matmul_avx2.cc, attention_avx2.cc: -mavx2 -mfma -mf16c;
// matmul_avx512.cc / matmul_avx512vnni.cc (AVX-512 flags; with VNNI the u8 x s8 dot is vpdpbusd).
// Include ONLY from such TUs. Everything here has internal linkage (anonymous namespace): an inline
// function with external linkage compiled with AVX2 flags could be ODR-merged into generic code and
// run on a CPU without AVX2. For the same reason no std:: templates are used here.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kiln::kernels::cpu {
namespace {  // NOLINT(google-build-namespaces): internal linkage per ISA TU is the point

inline float avx2_load_f32(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
}

inline float avx2_half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// The Cephes exp polynomial's constants (avx2_exp_nonpos, and its 16-lane twin in simd_attention.h).
constexpr float kExpLog2e = 1.44269504088896341f, kExpLn2Hi = 0.693359375f, kExpLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f, kExpP1 = 1.3981999507e-3f, kExpP2 = 8.3334519073e-3f,
                kExpP3 = 4.1665795894e-2f, kExpP4 = 1.6666665459e-1f, kExpP5 = 5.0000001201e-1f;

// exp(x) for x <= 0 (Cephes expf): x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial
// (~2 ulp); x below -87 (underflow, -inf) gives exactly 0, x > 0 is taken as 0, NaN gives 0.
inline __m256 avx2_exp_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);  // below: exp underflows (or x = -inf)
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(0.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), r);
    __m256 y = _mm256_set1_ps(kExpP0);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP4));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP5));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
}

inline float avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int32_t avx2_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// u8 x s8 products summed in groups of 4 -> 8 int32. Exact as long as every adjacent u*s pair sum
// fits int16 (true for |s| <= 127 and u <= 128), so both forms below give identical integers.
// KILN_VNNI256: this TU has a 256-bit vpdpbusd, either AVX512-VNNI's EVEX form (with AVX512VL) or
// AVX-VNNI's VEX form (the avx-vnni level: AVX2 + -mavxvnni, no AVX-512).
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define KILN_VNNI256 1
#endif
#if defined(KILN_VNNI256)
// acc + the 4-product sums of u8 u x s8 s per lane: vpdpbusd, as inline asm with the accumulator
// tied in and out. GCC 12 allocates the intrinsic's result to a fresh register, so the accumulators
// of an unrolled tile were copied out and back on every step (2 moves per vpdpbusd; the I8 prefill
// tile ran at 307 instead of 408 GOP/s on one Zen 4 thread). Without AVX512VL only the VEX form
// exists: "{vex}" makes the assembler emit it, on ymm0-15 ("x").
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
#else
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
#endif
    return acc;
}
// acc + avx2_dot_u8s8(u, s): the same instruction as an intrinsic (the compiler schedules and
// allocates it freely).
inline __m256i avx2_dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}
inline __m256i avx2_dot_u8s8(__m256i u, __m256i s) {
    return avx2_dot_u8s8_acc(_mm256_setzero_si256(), u, s);
}
#else
inline __m256i avx2_dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
inline __m256i avx2_dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, avx2_dot_u8s8(u, s));
}
#endif

inline float avx2_max8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// 32 int32 in four vectors (elements 0-7, 8-15, ...) -> 32 int8 in element order (saturating).
inline __m256i avx2_pack_i32_to_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i p01 = _mm256_packs_epi32(i0, i1);  // per 128-bit lane: i0 lo/hi half, i1 half
    const __m256i p23 = _mm256_packs_epi32(i2, i3);
    const __m256i b = _mm256_packs_epi16(p01, p23);  // 4-byte groups: 0 2 4 6 | 1 3 5 7 (of 8 groups)
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Quantizes 32 floats with multiplier `id` (round half to even, MXCSR default) and returns the
// 32 int8 values; *sum receives their sum.
inline __m256i avx2_quantize32(const float* x, __m256 id, int32_t* sum) {
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    *sum = avx2_hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    return avx2_pack_i32_to_i8(i0, i1, i2, i3);
}

// max |x| over len floats (len a multiple of 8).
inline float avx2_amax(const float* x, int len) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < len; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
    return avx2_max8(m);
}

// The prefetch helpers below are always_inline: a function whose only effect is prefetches is "const"
// to GCC's IPA pure-const pass, so where GCC 12 kept one out of line it deleted the calls. It did so
// for avx2_prefetch_ahead_l1 inside the avx512-vnni TU once that TU held enough kernels: the decode
// tiles ran without their L1 prefetch (tinyllama q4_0 decode 35-38 tok/s against 44-47 with it,
// docs/performance.md "The lost decode prefetch").
#define KILN_PREFETCH_INLINE inline __attribute__((always_inline))

// Decode streams R weight rows at a time; rows are short (a few KiB), so the hardware prefetcher
// keeps re-training at row starts and one thread reaches well under DRAM bandwidth. While a tile
// runs its block loop, it pulls the next R-row group (contiguous, right after its own rows) into L2,
// step_bytes per block (R * block bytes): call once per block index b. Prefetches never fault, so
// running past the end of the matrix is harmless.
KILN_PREFETCH_INLINE void avx2_prefetch_next_group(const uint8_t* next_group, int64_t step_bytes, int64_t b) {
    const char* p = reinterpret_cast<const char*>(next_group + b * step_bytes);
    for (int64_t off = 0; off < step_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
}
// As avx2_prefetch_next_group, the block's lines cut in `parts` slices of which this call issues
// slice `part`: a K-quant super-block's compute calls it once per sub-block (parts = 8), so its
// prefetches go out spread over the block instead of in one burst. The burst (37 lines for a 16-row
// Q4_K group) filled the line-fill buffers and stalled the tile's own loads behind it: perf put 41%
// of the decode tile's samples on it; spread, tinyllama Q4_K decode ran 4-13% faster (five
// alternated rounds; Q6_K, sliced between its quarters, 30%: docs/performance.md "K-quant decode: the
// next group's prefetch spread out").
KILN_PREFETCH_INLINE void prefetch_next_group_part(const uint8_t* next_group, int64_t step_bytes, int64_t b,
                                                   int part, int parts) {
    const char* p = reinterpret_cast<const char*>(next_group + b * step_bytes);
    const int64_t lines = (step_bytes + 63) / 64;
    for (int64_t l = lines * part / parts; l < lines * (part + 1) / parts; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T1);
}
// Decode tiles (one token) of the AVX-512 VNNI group kernels (simd_vnni_kernels.h, simd_vnni_q4.h):
// the step_bytes starting kDecodePrefetchAhead bytes past the block the tile is at (`block`), into
// L1; call once per block. Groups lie one after the other, so this runs ahead in the tile's own
// stream and into the next group. In-process A/B on TinyLlama decode (depth 16), against the same
// block of the next group (36-100 KB ahead) into L1: q4_0 at 4 KiB 1.149 / 1.113 / 1.092, 2 KiB
// 1.066 / 1.096, 8 KiB 1.106 / 1.069, 16 KiB 1.040 / 1.111; q8_0 at 4 KiB 1.053 / 1.044 / 1.051,
// 2 KiB 0.973, 8 KiB 1.034 / 1.024. (That one had itself given q4_0 1.016-1.052 and q8_0 1.04 over
// avx2_prefetch_next_group, which puts the next group into L2.) MXFP4 / NVFP4 share the tile: not
// measured separately.
inline constexpr int64_t kDecodePrefetchAhead = 4096;
KILN_PREFETCH_INLINE void avx2_prefetch_ahead_l1(const uint8_t* block, int64_t step_bytes) {
    const char* p = reinterpret_cast<const char*>(block) + kDecodePrefetchAhead;
    for (int64_t off = 0; off < step_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// A VNNI group tile of T tokens at block b (`block` = its bytes, block_bytes long), when it has a
// next_group to prefetch (null: none): decode (T = 1) 4 KiB ahead into L1; a multi-token tile
// next_step bytes of the next group per block into L2, starting at next_group (its tiles re-read
// their own group from L1 / L2). vnni_next_share says which part each pass over a group takes.
template <int T>
KILN_PREFETCH_INLINE void vnni_tile_prefetch(const uint8_t* block, int64_t block_bytes, const uint8_t* next_group,
                                             int64_t next_step, int64_t b) {
    if (!next_group) return;
    if constexpr (T == 1) {
        avx2_prefetch_ahead_l1(block, block_bytes);
    } else {
        avx2_prefetch_next_group(next_group, next_step, b);
    }
}

// The next row group's bytes shared out over the `passes` token tiles that run over the current
// group (nb blocks of block_bytes): pass p prefetches the p-th contiguous share, `*step` bytes per
// block, from the returned address. All in the first pass (the whole group while one tile runs)
// issued prefetches faster than one core's fill buffers take them: a 16-token GEMM over a 300 MB
// Q4_0 matrix from DRAM ran at 311 GOP/s on one core, with the shares at 386 (400 from L2).
inline const uint8_t* vnni_next_share(const uint8_t* next_group, int64_t nb, int64_t block_bytes, int64_t pass,
                                      int64_t passes, int64_t* step) {
    if (passes <= 1) {  // one pass: the whole group, block for block
        *step = block_bytes;
        return next_group;
    }
    *step = (block_bytes + passes - 1) / passes;
    *step = (*step + 63) / 64 * 64;
    return next_group + pass * *step * nb;
}

// Row tiling shared by all formats. F provides kDecodeRows, kPrefillRows and
//   template <int R, int T> static void tile(const uint8_t* w, size_t w_row_bytes, const uint8_t* act,
//                                            size_t act_row_bytes, int64_t k, float* y, int64_t ldy);
// computing y[t * ldy + r] for r < R weight rows starting at w and t < T activation rows at act.
template <class F, int R>
inline void avx2_tile_t(int num_t, const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y,
                        int64_t ldy) {
    switch (num_t) {
        case 4:
            F::template tile<R, 4>(w, wrb, act, arb, k, y, ldy);
            break;
        case 3:
            F::template tile<R, 3>(w, wrb, act, arb, k, y, ldy);
            break;
        case 2:
            F::template tile<R, 2>(w, wrb, act, arb, k, y, ldy);
            break;
        default:
            F::template tile<R, 1>(w, wrb, act, arb, k, y, ldy);
            break;
    }
}

template <class F>
void avx2_gemm(const void* w, size_t wrb, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
               int64_t r0, int64_t r1) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(act);
    if (n == 1) {  // decode: several weight rows at once = several independent read streams
        constexpr int R = F::kDecodeRows;
        int64_t r = r0;
        for (; r + R <= r1; r += R) F::template tile<R, 1>(wb + r * int64_t(wrb), wrb, ab, arb, k, y + r, ldy);
        for (; r < r1; ++r) F::template tile<1, 1>(wb + r * int64_t(wrb), wrb, ab, arb, k, y + r, ldy);
        return;
    }
    // Prefill: each decoded weight block serves up to 4 activation rows. Activation rows are taken in
    // chunks of ~256 KiB so they stay in L2 while the weight rows [r0, r1) stream past them.
    constexpr int R = F::kPrefillRows;
    int64_t chunk = int64_t((256 << 10) / (arb > 0 ? arb : 1)) & ~int64_t(3);
    if (chunk < 4) chunk = 4;
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n ? t0 + chunk : n;
        int64_t r = r0;
        for (; r < r1; r += R) {
            const bool full = r + R <= r1;
            for (int64_t t = t0; t < t1; t += 4) {
                const int num_t = int(t1 - t < 4 ? t1 - t : 4);
                const uint8_t* a = ab + t * int64_t(arb);
                float* yt = y + t * ldy;
                if (full) {
                    avx2_tile_t<F, R>(num_t, wb + r * int64_t(wrb), wrb, a, arb, k, yt + r, ldy);
                } else {
                    for (int64_t rr = r; rr < r1; ++rr) {
                        avx2_tile_t<F, 1>(num_t, wb + rr * int64_t(wrb), wrb, a, arb, k, yt + rr, ldy);
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
