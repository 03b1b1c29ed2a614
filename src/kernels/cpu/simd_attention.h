// The SIMD attention kernel body (simd_attention_task), compiled once per ISA by the TUs that
// include it: attention_avx2.cc (-mavx2 -mfma -mf16c) and attention_avx512.cc (AVX-512 F/BW/VL/DQ:
// EVEX encodings and 32 vector registers; used by the avx512 and avx512-vnni levels, attention has
// no use for VNNI or BF16). The tiled online-softmax algorithm of attention.h / attention.cc's
// scalar kernel, vectorized.
//  - rows that share a key range (the heads of one token, or neighbouring tokens away from the
//    causal diagonal) go in register-blocked pairs, so each K and V vector loaded serves two rows;
//  - scores: one 8-lane partial sum per (row, key) along head_dim, 8 accumulators in flight, four
//    keys reduced to four scores by an hadd tree in one fixed order (a row's scores are the same
//    whether it runs alone or paired); head_dim % 8 adds a scalar tail. The AVX-512 build runs
//    head_dims that are multiples of 16 on 16 lanes (block_scores_z, block_exp_z, block_pv_z: half
//    the instructions), the others as the AVX2 build does;
//  - exp: Cephes-style exp (round(x log2 e) range reduction, degree-6 polynomial, ~2 ulp), inputs
//    below -87 (masked keys, underflow) give exactly 0;
//  - P V: output chunks (up to 64 floats for one row, 32 for a pair) stay in registers across one
//    block of keys;
//  - K/V rows (contiguous or paged, see KvSpan) are located once per block of keys into arrays
//    of row pointers that the inner loops index: the loads and the arithmetic are the same for
//    either layout, so a paged cache gives bit-identical results.
//  - K/V rows of >= 2 KiB, and every row in decode tasks, are prefetched one block ahead (NextBlock;
//    f32, and every cache the 16-lane forms read in place: block_scores; f16, int8, fp8 widened:
//    cache_rows while it widens them): a task's slice of each row is a strided walk the hardware
//    prefetchers miss.
//  - The 16-lane forms read f16 caches in place, int8 and fp8 ones in decode tasks (load16: each
//    element the value a widened copy would hold); otherwise each block of rows is widened into a
//    buffer first.
// Measured (SmolLM2 shape, 9 heads / 3 KV heads / head_dim 64, EPYC Zen 3, one core): prefill 512
// ~43 GFLOP/s = ~43% of the FMA peak; decode with a cache-resident KV ~35 GFLOP/s. Long-context
// decode on 16 lanes: docs/performance.md "Long-context decode".
// Everything here has internal linkage (include ONLY from those TUs), and no std:: templates
// or inline library functions are used (not even kv_row: cache_rows below repeats it): an
// out-of-line copy compiled with AVX2 flags could be merged into generic code by the linker and
// run on a CPU without AVX2.
#pragma once

#include <immintrin.h>
#include <math.h>

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd_avx2.h"

namespace kiln::kernels::cpu {
namespace {  // NOLINT(google-build-namespaces): internal linkage per ISA TU is the point

constexpr float kNegInf = -__builtin_huge_valf();
constexpr int64_t kPrefetchStride = 2048;  // cache row bytes from which block_scores always prefetches
constexpr int64_t kPrefetchTokens = 4;     // ... and below, tasks of at most this many query tokens (decode)

// Rows per register block: 4 with the 32 AVX-512 registers (4 x 4 score or P.V accumulators), 2
// with AVX2's 16. A row's arithmetic is the same in any block (KU and the P.V chunking only depend
// on whether R == 1), so the blocking never changes results.
#ifdef __AVX512F__
constexpr int kMaxRows = 4;
#else
constexpr int kMaxRows = 2;
#endif
static_assert(kMaxRows <= kAttentionMaxRows);

// Pins a loaded vector in a register: without it GCC folds the load into each FMA that uses it (one
// load per row instead of one per register block), and the loads, not the FMAs, set the pace.
inline __m256 in_register(__m256 x) {
    asm("" : "+x"(x));
    return x;
}

inline int64_t imin(int64_t a, int64_t b) {
    return a < b ? a : b;
}
inline int64_t imax(int64_t a, int64_t b) {
    return a > b ? a : b;
}

// Lane u of the result = horizontal sum of a_u, u < 4, summed as ((0+1)+(2+3)) + ((4+5)+(6+7)) of
// the lanes of a_u: the same order for every caller, so a row's scores never depend on how rows
// are grouped into register blocks.
inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// The cache lines that [p, p + bytes) touches, into L2 (T1): a prefetch into L1 (T0) waits for one of
// its few miss buffers (27% of the kernel's samples sat on prefetcht0 in decode at depth 1900; with
// T1 TinyLlama q4_0 decode there ran 12% faster, docs/performance.md). Whole cache rows (every
// head's slice) are no longer prefetched: on the Xeon VM of 2026-12-06 the prefetch instructions
// alone took 28-50% of the kernel's time with the cache in L3, and each head's own slice a block
// ahead read DRAM faster.
KILN_PREFETCH_INLINE void prefetch_row(const void* p, int64_t bytes) {  // (simd_avx2.h: why always_inline)
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (uintptr_t line = a & ~uintptr_t(63); line < a + uintptr_t(bytes); line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
}

// A row of an int8 / fp8 cache read in place: its codes and its KV head's scale (fp8: the scale
// times 256, as widen_fp8 takes it).
struct I8Row {
    const int8_t* c;
    float s;
};
struct Fp8Row {
    const uint8_t* c;
    float s256;
};

// The next block's K and V rows, prefetched a few at a time while the current block is worked on
// (simd_attention_task): key i at k + offs[i] and v + offs[i], bytes each (a KV head's slice), and
// for int8 / fp8 caches its scale at + scale_off. A whole block ahead covers the latency of DRAM,
// which a few keys ahead did not (docs/performance.md "Long-context decode").
struct NextBlock {
    const uint8_t* k = nullptr;
    const uint8_t* v = nullptr;
    int64_t offs[kAttentionBlockKeys];
    int64_t n = 0, bytes = 0, scale_off = 0;
    int64_t done = 0;  // entries prefetched so far

    // Prefetches entries up to `upto` (capped at n).
    void advance(int64_t upto) {
        for (; done < n && done < upto; ++done) {
            prefetch_row(k + offs[done], bytes);
            prefetch_row(v + offs[done], bytes);
            if (scale_off) {
                _mm_prefetch(reinterpret_cast<const char*>(k + offs[done] + scale_off), _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(v + offs[done] + scale_off), _MM_HINT_T1);
            }
        }
    }
};

// For each of the R rows (same key range): s[r][i] = scale * q_r . k_i for i < n (k_i at
// kptr[i], [head_dim]); mx[r] = max_i s[r][i]. Entries of s[r] past n are unspecified. KU keys per
// step give R * KU independent accumulators (8: enough to cover the FMA latency); each loaded key
// vector serves all R rows.
//
//
// next (nullptr: none): step i prefetches the next block's entries below i + KU (NextBlock), so the
// prefetches spread over the block's steps.
template <int R>
void block_scores(const float* const* qr, const float* const* kptr, int64_t n, int64_t hd, float scale, NextBlock* next,
                  float* const* s, float* mx) {
    constexpr int KU = R == 1 ? 8 : 4;
    const int64_t hd8 = hd & ~int64_t(7);
    const __m128 lane = _mm_setr_ps(0.0f, 1.0f, 2.0f, 3.0f);
    __m128 vmax[R];
    for (int r = 0; r < R; ++r) vmax[r] = _mm_set1_ps(kNegInf);
    for (int64_t i = 0; i < n; i += KU) {
        if (next) next->advance(i + KU);
        const float* kp[KU];
        for (int u = 0; u < KU; ++u) kp[u] = kptr[imin(i + u, n - 1)];  // clamp: no reads past n
        __m256 acc[R][KU];
        for (int r = 0; r < R; ++r)
            for (int u = 0; u < KU; ++u) acc[r][u] = _mm256_setzero_ps();
        for (int64_t d = 0; d < hd8; d += 8) {
            __m256 qv[R];
            for (int r = 0; r < R; ++r) qv[r] = _mm256_loadu_ps(qr[r] + d);
            for (int u = 0; u < KU; ++u) {
                const __m256 kv = in_register(_mm256_loadu_ps(kp[u] + d));
                for (int r = 0; r < R; ++r) acc[r][u] = _mm256_fmadd_ps(qv[r], kv, acc[r][u]);
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int g = 0; g < KU; g += 4) {
                __m128 dots = reduce4(acc[r][g], acc[r][g + 1], acc[r][g + 2], acc[r][g + 3]);
                if (hd8 < hd) {  // scalar tail (head_dim % 8)
                    alignas(16) float tail[4];
                    for (int u = 0; u < 4; ++u) {
                        float t = 0.0f;
                        for (int64_t d = hd8; d < hd; ++d) t += qr[r][d] * kp[g + u][d];
                        tail[u] = t;
                    }
                    dots = _mm_add_ps(dots, _mm_load_ps(tail));
                }
                __m128 sc = _mm_mul_ps(dots, _mm_set1_ps(scale));
                const __m128 valid = _mm_cmplt_ps(lane, _mm_set1_ps(float(n - i - g)));  // clamped duplicates
                sc = _mm_blendv_ps(_mm_set1_ps(kNegInf), sc, valid);
                _mm_storeu_ps(s[r] + i + g, sc);
                vmax[r] = _mm_max_ps(vmax[r], sc);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        __m128 m = _mm_max_ps(vmax[r], _mm_movehl_ps(vmax[r], vmax[r]));
        mx[r] = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
}

// p[i] = exp(p[i] - m) for i < n (entries past n, up to the next multiple of 8, become 0); returns
// their sum.
float block_exp(float* p, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 x = _mm256_sub_ps(_mm256_loadu_ps(p + i), vm);
        if (n - i < 8) {
            const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - i)), lane));
            x = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), x, valid);
        }
        const __m256 e = avx2_exp_nonpos(x);
        _mm256_storeu_ps(p + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    return avx2_hsum(sum);
}

// For each of the R rows: o_r[d0, d0 + 8 NV) = o_r * corr_r + sum_{j < n} p_r[j] v_j[...] (v_j at
// vptr[j], [head_dim]). The chunk stays in registers across the keys; each V load serves R rows.
template <int R, int NV>
void pv_chunk(float* const* o, int64_t d0, const float* const* vptr, int64_t n, const float* const* p,
              const float* corr) {
    __m256 acc[R][NV];
    for (int r = 0; r < R; ++r) {
        const __m256 c = _mm256_set1_ps(corr[r]);
        for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_mul_ps(_mm256_loadu_ps(o[r] + d0 + 8 * i), c);
    }
    for (int64_t j = 0; j < n; ++j) {
        __m256 pj[R];
        for (int r = 0; r < R; ++r) pj[r] = _mm256_broadcast_ss(p[r] + j);
        const float* vj = vptr[j] + d0;
        for (int i = 0; i < NV; ++i) {
            const __m256 vv = in_register(_mm256_loadu_ps(vj + 8 * i));
            for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(pj[r], vv, acc[r][i]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < NV; ++i) _mm256_storeu_ps(o[r] + d0 + 8 * i, acc[r][i]);
}

// pv_chunk with nv (1 <= nv <= NV) vectors chosen at run time.
template <int R, int NV>
void pv_chunk_n(int64_t nv, float* const* o, int64_t d0, const float* const* vptr, int64_t n, const float* const* p,
                const float* corr) {
    if constexpr (NV > 1) {
        if (nv < NV) return pv_chunk_n<R, NV - 1>(nv, o, d0, vptr, n, p, corr);
    }
    pv_chunk<R, NV>(o, d0, vptr, n, p, corr);
}

// o_r = o_r * corr_r + sum_{j < n} p_r[j] v_j for each of the R rows (v_j at vptr[j]; element-wise,
// keys in order: the same arithmetic for any R or chunking).
template <int R>
void block_pv(float* const* o, const float* const* vptr, int64_t n, int64_t hd, const float* const* p,
              const float* corr) {
    constexpr int64_t kMaxVectors = R == 1 ? 8 : 4;  // R * kMaxVectors accumulators + R broadcasts
    const int64_t hd8 = hd & ~int64_t(7);
    for (int64_t d0 = 0; d0 < hd8; d0 += 8 * kMaxVectors)
        pv_chunk_n<R, kMaxVectors>(imin(kMaxVectors, (hd8 - d0) / 8), o, d0, vptr, n, p, corr);
    for (int r = 0; r < R; ++r) {
        for (int64_t d = hd8; d < hd; ++d) {  // scalar tail (head_dim % 8)
            float acc = o[r][d] * corr[r];
            for (int64_t j = 0; j < n; ++j) acc = fmaf(p[r][j], vptr[j][d], acc);
            o[r][d] = acc;
        }
    }
}

#ifdef __AVX512F__
// The 512-bit forms of block_scores, block_exp and block_pv, for head_dim % 16 == 0 (the AVX-512
// build picks them per call from head_dim alone, so a model's rows always take the same ones). The
// arithmetic of a row does not depend on R or on which keys share a step, as above; the results
// differ from the 256-bit forms' in the order of each dot product's and the exp sum's additions.
// Measured: docs/performance.md "Long-context decode".

inline __m512 in_register(__m512 x) {
    asm("" : "+v"(x));
    return x;
}

// Lane u of the result = the sum of the 16 lanes of a_u, u < 4, in one fixed order for every key:
// lane i + lane i + 8, then those of i and i + 4, then ((0 + 2) + (1 + 3)).
inline __m128 reduce4_z(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    constexpr __mmask16 kAll = 0xffff;  // maskz forms: see avx512_exp_nonpos
    // t01 (128-bit lanes) = [a0 folded: lanes 0-3, 4-7 | a1 folded: 0-3, 4-7]
    const __m512 t01 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, a0, a1, 0x44), _mm512_maskz_shuffle_f32x4(kAll, a0, a1, 0xee));
    const __m512 t23 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, a2, a3, 0x44), _mm512_maskz_shuffle_f32x4(kAll, a2, a3, 0xee));
    // g: 128-bit lane u = key u's 4 partial sums
    const __m512 g = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, t01, t23, 0x88), _mm512_maskz_shuffle_f32x4(kAll, t01, t23, 0xdd));
    const __m512 x = _mm512_add_ps(g, _mm512_maskz_permute_ps(kAll, g, 0x4e));  // lanes (0 + 2), (1 + 3)
    const __m512 y = _mm512_add_ps(x, _mm512_maskz_permute_ps(kAll, x, 0xb1));  // lane 0 of each 128-bit lane: the sum
    return _mm512_maskz_extractf32x4_ps(
        __mmask8(0xf), _mm512_maskz_permutexvar_ps(kAll, _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12), y), 0);
}

// Elements [d, d + 16) of a cache row as f32, for the 16-lane forms (which caches they read in place:
// simd_attention_task's in_place): f32 rows as they are, f16 rows widened, int8 / fp8 codes times
// their scale. Each gives exactly the
// value widen_f16 / widen_i8 / widen_fp8 would have stored (the same operations per element), so
// reading in place changes no result.
inline __m512 load16(const float* p, int64_t d) {
    return _mm512_loadu_ps(p + d);
}
inline __m512 load16(const uint16_t* p, int64_t d) {
    return _mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + d)));
}
inline __m512 load16(const I8Row& r, int64_t d) {
    const __m512i w = _mm512_maskz_cvtepi8_epi32(__mmask16(0xffff), _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.c + d)));
    return _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(__mmask16(0xffff), w), _mm512_set1_ps(r.s));
}
inline __m512 load16(const Fp8Row& r, int64_t d) {  // widen_fp8's half bits of 16 codes
    const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.c + d)));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(int16_t(0xbfff)));
    return _mm512_mul_ps(_mm512_maskz_cvtph_ps(__mmask16(0xffff), h), _mm512_set1_ps(r.s256));
}

// block_scores with 16 lanes along head_dim (hd % 16 == 0): KU = 4 keys per step for every R. Row:
// how the cache rows are read (const float*; const uint16_t*: f16 in place; I8Row, Fp8Row).
template <int R, class Row>
void block_scores_z(const float* const* qr, const Row* kptr, int64_t n, int64_t hd, float scale,
                      NextBlock* next, float* const* s, float* mx) {
    constexpr int KU = 4;
    const __m128 lane = _mm_setr_ps(0.0f, 1.0f, 2.0f, 3.0f);
    __m128 vmax[R];
    for (int r = 0; r < R; ++r) vmax[r] = _mm_set1_ps(kNegInf);
    for (int64_t i = 0; i < n; i += KU) {
        if (next) next->advance(i + KU);
        Row kp[KU];
        for (int u = 0; u < KU; ++u) kp[u] = kptr[imin(i + u, n - 1)];  // clamp: no reads past n
        __m512 acc[R][KU];
        for (int r = 0; r < R; ++r)
            for (int u = 0; u < KU; ++u) acc[r][u] = _mm512_setzero_ps();
        for (int64_t d = 0; d < hd; d += 16) {
            __m512 qv[R];
            for (int r = 0; r < R; ++r) qv[r] = _mm512_loadu_ps(qr[r] + d);
            for (int u = 0; u < KU; ++u) {
                const __m512 kv = in_register(load16(kp[u], d));
                for (int r = 0; r < R; ++r) acc[r][u] = _mm512_fmadd_ps(qv[r], kv, acc[r][u]);
            }
        }
        for (int r = 0; r < R; ++r) {
            __m128 sc = _mm_mul_ps(reduce4_z(acc[r][0], acc[r][1], acc[r][2], acc[r][3]), _mm_set1_ps(scale));
            const __m128 valid = _mm_cmplt_ps(lane, _mm_set1_ps(float(n - i)));  // clamped duplicates
            sc = _mm_blendv_ps(_mm_set1_ps(kNegInf), sc, valid);
            _mm_storeu_ps(s[r] + i, sc);
            vmax[r] = _mm_max_ps(vmax[r], sc);
        }
    }
    for (int r = 0; r < R; ++r) {
        __m128 m = _mm_max_ps(vmax[r], _mm_movehl_ps(vmax[r], vmax[r]));
        mx[r] = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
}

// avx2_exp_nonpos (simd_avx2.h) on 16 lanes: the same operations, so the same value per lane.
inline __m512 avx512_exp_nonpos(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);  // below: exp underflows (or x = -inf)
    // (maskz forms throughout: GCC 12 warns that the plain intrinsics' pass-through is uninitialized)
    constexpr __mmask16 kAll = 0xffff;
    x = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, x, lo), _mm512_setzero_ps());
    const __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), r);
    __m512 y = _mm512_set1_ps(kExpP0);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpP1));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpP2));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpP3));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpP4));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpP5));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_maskz_slli_epi32(kAll, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(keep, y, _mm512_castsi512_ps(e));
}

// block_exp on 16 lanes: p[i] = exp(p[i] - m) for i < n (entries past n unchanged); returns their sum.
inline float block_exp_z(float* p, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        const __m512 x = _mm512_mask_sub_ps(_mm512_set1_ps(kNegInf), k, _mm512_maskz_loadu_ps(k, p + i), vm);
        const __m512 e = avx512_exp_nonpos(x);  // 0 past n
        _mm512_mask_storeu_ps(p + i, k, e);
        sum = _mm512_add_ps(sum, e);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    return avx2_hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

// pv_chunk on 16 lanes: o_r[d0, d0 + 16 NV) = o_r * corr_r + sum_{j < n} p_r[j] v_j[...].
template <int R, int NV, class Row>
void pv_chunk_z(float* const* o, int64_t d0, const Row* vptr, int64_t n, const float* const* p, const float* corr) {
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r) {
        const __m512 c = _mm512_set1_ps(corr[r]);
        for (int i = 0; i < NV; ++i) acc[r][i] = _mm512_mul_ps(_mm512_loadu_ps(o[r] + d0 + 16 * i), c);
    }
    for (int64_t j = 0; j < n; ++j) {
        __m512 pj[R];
        for (int r = 0; r < R; ++r) pj[r] = _mm512_set1_ps(p[r][j]);
        const Row vj = vptr[j];
        for (int i = 0; i < NV; ++i) {
            const __m512 vv = in_register(load16(vj, d0 + 16 * i));
            for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(pj[r], vv, acc[r][i]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < NV; ++i) _mm512_storeu_ps(o[r] + d0 + 16 * i, acc[r][i]);
}

template <int R, int NV, class Row>
void pv_chunk_z_n(int64_t nv, float* const* o, int64_t d0, const Row* vptr, int64_t n, const float* const* p,
                  const float* corr) {
    if constexpr (NV > 1) {
        if (nv < NV) return pv_chunk_z_n<R, NV - 1, Row>(nv, o, d0, vptr, n, p, corr);
    }
    pv_chunk_z<R, NV, Row>(o, d0, vptr, n, p, corr);
}

template <int R, class Row>
void block_pv_z(float* const* o, const Row* vptr, int64_t n, int64_t hd, const float* const* p, const float* corr) {
    constexpr int64_t kMaxVectors = R == 1 ? 8 : 4;  // R * kMaxVectors accumulators + R broadcasts
    for (int64_t d0 = 0; d0 < hd; d0 += 16 * kMaxVectors)
        pv_chunk_z_n<R, kMaxVectors, Row>(imin(kMaxVectors, (hd - d0) / 16), o, d0, vptr, n, p, corr);
}
#endif  // __AVX512F__

// One block's online-softmax update of R rows that share the key range [ja, ja + n) (key / value
// ja + i at kptr[i] / vptr[i]).
// W: the 512-bit forms (AVX-512 builds, head_dim % 16 == 0); Row: how the rows are read (f32
// pointers; the others, caches read in place, W only: see load16).
template <int R, bool W, class Row = const float*>
void update_rows(const float* const* qr, float* const* o, const Row* kptr, const Row* vptr, int64_t n,
                 int64_t hd, float scale, float softcap, NextBlock* next, float* const* p, float* m, float* l) {
    static_assert(W || __is_same(Row, const float*), "only the 512-bit forms read caches in place");
    float mx[R], corr[R];
#ifdef __AVX512F__
    if constexpr (W) block_scores_z<R, Row>(qr, kptr, n, hd, scale, next, p, mx);
    else
#endif
        block_scores<R>(qr, kptr, n, hd, scale, next, p, mx);
    if (softcap > 0) {  // Gemma 2: scalar, off the models' usual path
        for (int r = 0; r < R; ++r) {
            mx[r] = kNegInf;
            for (int64_t i = 0; i < n; ++i) {
                p[r][i] = softcap_score(p[r][i], softcap);
                if (p[r][i] > mx[r]) mx[r] = p[r][i];
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        const float m_new = m[r] > mx[r] ? m[r] : mx[r];
        corr[r] = m[r] == kNegInf ? 0.0f : expf(m[r] - m_new);
        // fmaf, not l * corr + sum: GCC contracts that into an FMA in some inlined copies of this
        // function and not in others, and a row's sum must not depend on its register block
#ifdef __AVX512F__
        if constexpr (W) l[r] = fmaf(l[r], corr[r], block_exp_z(p[r], n, m_new));
        else
#endif
            l[r] = fmaf(l[r], corr[r], block_exp(p[r], n, m_new));
        m[r] = m_new;
    }
#ifdef __AVX512F__
    if constexpr (W) return block_pv_z<R, Row>(o, vptr, n, hd, p, corr);
    else
#endif
        block_pv<R>(o, vptr, n, hd, p, corr);
}

// update_rows for a register block of nr = 4, 2 or 1 rows (4 only where kMaxRows allows it).
template <bool W, class Row>
void update_rows_n(int nr, const float* const* qr, float* const* o, const Row* kptr, const Row* vptr,
                   int64_t n, int64_t hd, float scale, float softcap, NextBlock* next, float* const* p, float* m,
                   float* l) {
    if constexpr (kMaxRows >= 4) {
        if (nr == 4) return update_rows<4, W>(qr, o, kptr, vptr, n, hd, scale, softcap, next, p, m, l);
    }
    if (nr == 2) return update_rows<2, W>(qr, o, kptr, vptr, n, hd, scale, softcap, next, p, m, l);
    update_rows<1, W>(qr, o, kptr, vptr, n, hd, scale, softcap, next, p, m, l);
}

// n halves at h widened to f32 at f (F16C; exact).
inline void widen_f16(const uint16_t* h, float* f, int64_t n) {
    int64_t d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(f + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + d))));
    for (; d < n; ++d) f[d] = _cvtsh_ss(h[d]);
}

// n int8 codes at c times scale s, to f32 at f (one rounding each: kernels/ref kv_load's value).
inline void widen_i8(const int8_t* c, float s, float* f, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
        const __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + d)));
        _mm256_storeu_ps(f + d, _mm256_mul_ps(_mm256_cvtepi32_ps(w), vs));
    }
    for (; d < n; ++d) f[d] = float(c[d]) * s;
}

// n E4M3 codes at c times scale s, to f32 at f. A code's sign and 7 magnitude bits, moved to bits 15 and
// 13..7 of a half, make a half worth exactly code / 256 (exponent bias 15 against E4M3's 7; E4M3's
// subnormals land on the half's), which F16C widens exactly; times 256 s (exact) it is one rounding
// of code * s, as kernels/ref kv_load computes it. Codes 0x7f / 0xff (NaN) are never stored.
// Vectorized: the code sign-extended to 16 bits and shifted left by 7 has the magnitude in bits 7..13
// and the sign in bits 14 and 15; clearing bit 14 leaves the half.
inline uint16_t e4m3_half_bits(uint8_t c) {
    return uint16_t(((c & 0x7f) << 7) | ((c & 0x80) << 8));
}
inline void widen_fp8(const uint8_t* c, float s, float* f, int64_t n) {
    const float s256 = s * 256.0f;
    const __m256 vs = _mm256_set1_ps(s256);
    const __m128i keep = _mm_set1_epi16(int16_t(0xbfff));
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
        const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + d)));
        const __m128i h = _mm_and_si128(_mm_slli_epi16(b, 7), keep);
        _mm256_storeu_ps(f + d, _mm256_mul_ps(_mm256_cvtph_ps(h), vs));
    }
    for (; d < n; ++d) f[d] = _cvtsh_ss(e4m3_half_bits(c[d])) * s256;
}

// Bytes per cache row of kv's format (kv_row's arithmetic; int8 / fp8 rows end with a scale per head).
// Bytes per cached element of kv's format (f32 4, f16 2, int8 / fp8 1).
inline int64_t cache_elem_bytes(const KvSpan& kv) {
    return kv.dtype == KvDtype::kF32 ? 4 : kv.dtype == KvDtype::kF16 ? 2 : 1;
}

inline int64_t cache_row_bytes(const KvSpan& kv, int64_t num_kv_heads, int64_t hd) {
    const bool quantized = kv.dtype == KvDtype::kI8 || kv.dtype == KvDtype::kFp8;
    const int64_t elem = cache_elem_bytes(kv);
    return num_kv_heads * hd * elem + (quantized ? 4 * num_kv_heads : 0);
}

// offs[j - j_begin] = byte offset of key j's slice of KV head kv_head, j_begin <= j < j_end, with
// kv_row's arithmetic walked slot by slot (divides once per call, never per key).
void slice_offsets(const KvSpan& kv, int64_t kv_head, int64_t num_kv_heads, int64_t hd, int64_t j_begin, int64_t j_end,
                   int64_t* offs) {
    const int64_t elem = cache_elem_bytes(kv);
    const int64_t row_bytes = cache_row_bytes(kv, num_kv_heads, hd);
    int64_t block_idx = kv.block_table ? j_begin / kv.block_size : 0,
            slot = kv.block_table ? j_begin % kv.block_size : 0;
    for (int64_t j = j_begin; j < j_end; ++j) {
        int64_t row = j;
        if (kv.block_table) {
            row = int64_t(kv.block_table[block_idx]) * kv.block_size + slot;
            if (++slot == kv.block_size) {
                slot = 0;
                ++block_idx;
            }
        }
        offs[j - j_begin] = row * row_bytes + kv_head * hd * elem;
    }
}

// One block's rows of an f16, int8 or fp8 cache read in place (the 16-lane forms), by format.
union InPlaceRows {
    struct {
        const uint16_t* k[kAttentionBlockKeys];
        const uint16_t* v[kAttentionBlockKeys];
    } f16;
    struct {
        I8Row k[kAttentionBlockKeys];
        I8Row v[kAttentionBlockKeys];
    } i8;
    struct {
        Fp8Row k[kAttentionBlockKeys];
        Fp8Row v[kAttentionBlockKeys];
    } fp8;
};

// krow[i] / vrow[i] = start of key / value j_begin + i of KV head kv_head (of num_kv_heads, hd each),
// j_begin <= j < j_end. f32 caches: pointers into the cache; other caches (f16, int8, fp8: KvDtype in
// kernels/kernel_params.h): the rows widened to f32 into kbuf / vbuf ([j_end - j_begin, hd] each),
// slot i at kbuf + i * hd, prefetching the next block's rows (next, nullptr: none) as they go. With
// ip (caches read in place, else nullptr): entry i of ip's member for kv.dtype instead (the row, and
// for int8 / fp8 its scale), nothing widened, nothing prefetched (block_scores_z prefetches).
void cache_rows(const KvSpan& kv, int64_t kv_head, int64_t num_kv_heads, int64_t hd, int64_t j_begin, int64_t j_end,
                NextBlock* next, const float** krow, const float** vrow, float* kbuf, float* vbuf, InPlaceRows* ip,
                int64_t ip_first) {
    const int64_t kv_dim = num_kv_heads * hd;
    int64_t offs[kAttentionBlockKeys];  // byte offset of each key's head slice
    slice_offsets(kv, kv_head, num_kv_heads, hd, j_begin, j_end, offs);
    const int64_t n = j_end - j_begin;
    const auto* kb = static_cast<const uint8_t*>(kv.k);
    const auto* vb = static_cast<const uint8_t*>(kv.v);
    if (kv.dtype == KvDtype::kF32) {
        for (int64_t i = 0; i < n; ++i) {
            krow[i] = reinterpret_cast<const float*>(kb + offs[i]);
            vrow[i] = reinterpret_cast<const float*>(vb + offs[i]);
        }
        return;
    }
    // kI8 / kFp8: a head's scale sits kv_dim - kv_head hd + 4 kv_head bytes after its codes.
    const int64_t scale_off = kv_dim - kv_head * hd + 4 * kv_head;
    auto scale_at = [scale_off](const uint8_t* row) {
        float sc;
        __builtin_memcpy(&sc, row + scale_off, 4);
        return sc;
    };
    if (ip) {
        for (int64_t i = 0; i < n; ++i) {
            const uint8_t* kp = kb + offs[i];
            const uint8_t* vp = vb + offs[i];
            const int64_t e = ip_first + i;
            if (kv.dtype == KvDtype::kF16) {
                ip->f16.k[e] = reinterpret_cast<const uint16_t*>(kp);
                ip->f16.v[e] = reinterpret_cast<const uint16_t*>(vp);
                continue;
            }
            if (kv.dtype == KvDtype::kI8) {
                ip->i8.k[e] = {reinterpret_cast<const int8_t*>(kp), scale_at(kp)};
                ip->i8.v[e] = {reinterpret_cast<const int8_t*>(vp), scale_at(vp)};
            } else {
                ip->fp8.k[e] = {kp, scale_at(kp) * 256.0f};  // widen_fp8's s256
                ip->fp8.v[e] = {vp, scale_at(vp) * 256.0f};
            }
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        if (next) next->advance(i + 1);
        float* kf = kbuf + i * hd;
        float* vf = vbuf + i * hd;
        const uint8_t* kp = kb + offs[i];
        const uint8_t* vp = vb + offs[i];
        if (kv.dtype == KvDtype::kF16) {
            widen_f16(reinterpret_cast<const uint16_t*>(kp), kf, hd);
            widen_f16(reinterpret_cast<const uint16_t*>(vp), vf, hd);
        } else if (kv.dtype == KvDtype::kI8) {
            widen_i8(reinterpret_cast<const int8_t*>(kp), scale_at(kp), kf, hd);
            widen_i8(reinterpret_cast<const int8_t*>(vp), scale_at(vp), vf, hd);
        } else {
            widen_fp8(kp, scale_at(kp), kf, hd);
            widen_fp8(vp, scale_at(vp), vf, hd);
        }
        krow[i] = kf;
        vrow[i] = vf;
    }
}

void simd_attention_task(const float* q, const KvSpan& kv, const AttentionShape& s, const AttentionTask& task,
                         float* out, float* lse, float* scratch) {
    const int64_t hd = s.head_dim, num_heads = s.num_heads, group = s.num_heads / s.num_kv_heads;
    const int64_t kv_stride = s.num_kv_heads * hd;  // elements per cache row
    // Prefetched a block ahead (NextBlock: block_scores for f32 caches, cache_rows while it widens the
    // others): rows of >= kPrefetchStride bytes always, shorter ones in decode (tasks of <=
    // kPrefetchTokens tokens). A task reads its KV head's slice of each row (256 B every 2 KiB for
    // Llama-3.2-1B), a stride the hardware prefetchers do not follow across pages.
    const bool decode = task.t1 - task.t0 <= kPrefetchTokens;
    const int64_t elem = cache_elem_bytes(kv);
    NextBlock next_block;
    NextBlock* next = nullptr;
    if (kv_stride * elem >= kPrefetchStride || decode) {
        next = &next_block;
        next->k = static_cast<const uint8_t*>(kv.k);
        next->v = static_cast<const uint8_t*>(kv.v);
        next->bytes = hd * elem;
        if (kv.dtype == KvDtype::kI8 || kv.dtype == KvDtype::kFp8) next->scale_off = kv_stride - task.kv_head * hd + 4 * task.kv_head;
    }
    // Keys [j_begin, j_end) as the next block to prefetch.
    auto plan_next = [&](int64_t j_begin, int64_t j_end) {
        next->n = imax(0, j_end - j_begin);
        next->done = 0;
        if (next->n > 0) slice_offsets(kv, task.kv_head, s.num_kv_heads, hd, j_begin, j_end, next->offs);
    };
    const int64_t first_pos = kv.kv_len - s.num_tokens;
    const float scale = 1.0f / sqrtf(float(hd));
    const int64_t num_task_tokens = task.t1 - task.t0, rows = num_task_tokens * group;
#ifdef __AVX512F__
    const bool wide = hd % 16 == 0;  // the 512-bit forms
    // ... reading the cache unwidened: f16 always (one conversion per load); int8 / fp8 (3 / 4
    // operations per 16 elements) when the task's rows take at most two register blocks per key
    // block (decode), since each block of rows converts every key again where widening converts once.
    const bool in_place = wide && (kv.dtype == KvDtype::kF16 ||
                                   ((kv.dtype == KvDtype::kI8 || kv.dtype == KvDtype::kFp8) && rows <= 2 * kMaxRows));
#else
    constexpr bool wide = false, in_place = false;
#endif
    if (num_task_tokens <= 0) return;
    float* m = scratch;                                            // [rows] running max of the scores
    float* l = m + rows;                                           // [rows] running sum of exp(score - m)
    float* p[kMaxRows];  // kMaxRows x [block + 8]: scores, then probabilities
    for (int i = 0; i < kMaxRows; ++i) p[i] = l + rows + i * (kAttentionBlockKeys + 8);
    float* kbuf = l + rows + kAttentionMaxRows * (kAttentionBlockKeys + 8);  // [block, head_dim]: keys as f32 (widened caches)
    float* vbuf = kbuf + kAttentionBlockKeys * hd;  // [block, head_dim]: values
    const int64_t head0 = task.kv_head * group;     // first query head of the group
    // Task row r = (token t0 + r / group, head head0 + r % group); its index in q rows (absolute)
    // and in out / lse rows (relative to t0, attention.h):
    auto q_idx = [&](int64_t r) { return (task.t0 + r / group) * num_heads + head0 + r % group; };
    auto out_idx = [&](int64_t r) { return r / group * num_heads + head0 + r % group; };
    for (int64_t r = 0; r < rows; ++r) {
        float* o = out + out_idx(r) * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] = 0.0f;
        m[r] = kNegInf;
        l[r] = 0.0f;
    }
    const int64_t win = s.window;
    // Keys [ja, jb) of block kb that token t attends to (empty when ja >= jb).
    auto key_range = [&](int64_t t, int64_t kb, int64_t* ja, int64_t* jb) {
        const int64_t pos = first_pos + t;
        *ja = imax(imax(kb, task.j0), win > 0 ? pos - win + 1 : 0);
        *jb = imin(imin(kb + kAttentionBlockKeys, pos + 1), task.j1);
    };
    const int64_t a = imax(imax(0, task.j0), win > 0 ? first_pos + task.t0 - win + 1 : 0);
    const int64_t b = imin(task.j1, first_pos + task.t1);
    const int64_t kb0 = a / kAttentionBlockKeys * kAttentionBlockKeys;
    if (next && kb0 < b) {  // the first block at once
        plan_next(imax(kb0, a), imin(kb0 + kAttentionBlockKeys, b));
        next->advance(next->n);
    }
    for (int64_t kb = kb0; kb < b; kb += kAttentionBlockKeys) {
        if (next) plan_next(kb + kAttentionBlockKeys, imin(kb + 2 * kAttentionBlockKeys, b));
        // Every row's keys in this block lie in [imax(kb, a), imin(kb + block, b)): locate them once.
        const float* krow[kAttentionBlockKeys];  // key kb + i of kv_head at krow[i], [head_dim]
        const float* vrow[kAttentionBlockKeys];  // value kb + i at vrow[i], [head_dim]
        InPlaceRows ip;  // in_place: the rows instead, entry i = key kb + i
        const int64_t lo = imax(kb, a);
        cache_rows(kv, task.kv_head, s.num_kv_heads, hd, lo, imin(kb + kAttentionBlockKeys, b), next, krow + (lo - kb),
                   vrow + (lo - kb), kbuf, vbuf, in_place ? &ip : nullptr, lo - kb);
        for (int64_t r = 0; r < rows;) {
            const int64_t t = task.t0 + r / group;
            int64_t ja, jb;
            key_range(t, kb, &ja, &jb);
            if (ja >= jb) {
                r = (r / group + 1) * group;
                continue;
            }
            // Up to kMaxRows rows go together while they share the key range: heads of one token,
            // or (across a group boundary) the next token when its range in this block is the same.
            int64_t same = 1;
            while (same < kMaxRows && r + same < rows) {
                if ((r + same) % group == 0) {
                    int64_t ja2, jb2;
                    key_range(task.t0 + (r + same) / group, kb, &ja2, &jb2);
                    if (ja2 != ja || jb2 != jb) break;
                }
                ++same;
            }
            const int nr = same >= 4 ? 4 : same >= 2 ? 2 : 1;  // register blocks of 4, 2 or 1 rows
            const float* qr[kMaxRows];
            float* o[kMaxRows];
            for (int i = 0; i < nr; ++i) {
                qr[i] = q + q_idx(r + i) * hd;     // [head_dim]
                o[i] = out + out_idx(r + i) * hd;  // [head_dim]
            }
            const float* const* kj = krow + (ja - kb);  // [jb - ja] row pointers
            const float* const* vj = vrow + (ja - kb);
#ifdef __AVX512F__
            const int64_t e = ja - kb;  // ip's first entry for these rows
            if (in_place && kv.dtype == KvDtype::kF16)
                update_rows_n<true>(nr, qr, o, ip.f16.k + e, ip.f16.v + e, jb - ja, hd, scale, s.softcap, next, p, m + r,
                                    l + r);
            else if (in_place && kv.dtype == KvDtype::kI8)
                update_rows_n<true>(nr, qr, o, ip.i8.k + e, ip.i8.v + e, jb - ja, hd, scale, s.softcap, next, p, m + r,
                                    l + r);
            else if (in_place)
                update_rows_n<true>(nr, qr, o, ip.fp8.k + e, ip.fp8.v + e, jb - ja, hd, scale, s.softcap, next, p, m + r,
                                    l + r);
            else
#endif
            if (wide)
                update_rows_n<true>(nr, qr, o, kj, vj, jb - ja, hd, scale, s.softcap, next, p, m + r, l + r);
            else
                update_rows_n<false>(nr, qr, o, kj, vj, jb - ja, hd, scale, s.softcap, next, p, m + r, l + r);
            r += nr;
        }
        if (next) next->advance(next->n);
    }
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = out_idx(r);
        float* o = out + row * hd;
        if (l[r] > 0.0f) {
            const float inv = 1.0f / l[r];
            for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
        }
        if (lse) lse[row] = l[r] > 0.0f ? m[r] + logf(l[r]) : kNegInf;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
