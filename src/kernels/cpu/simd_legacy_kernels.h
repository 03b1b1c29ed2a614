// Kernel bodies for F32/F16 weights (f32 activations), BF16 weights (bf16 activations, expanded to
// f32; the avx512-vnni build uses simd_vnni_kernels.h's vdpbf16ps kernel instead) and the legacy
// 32-element GGML formats
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ActQ8 activations); see matmul.h for the contract and
// kernels/ref/quant_matmul.cc for the scalar oracle with the same integer arithmetic.
// Per block: unpack the weight bytes once (nibbles with shift/mask, the 5th bit from qh via a
// byte shuffle + compare), integer dot u8 x s8 (Q8_0 via the sign trick |w| x sign(x, w); Q4_0/Q5_0
// as unsigned q minus offset * sum(x), computed once per activation block for 8 rows;
// maddubs + madd on AVX2, one vpdpbusd where the TU has a 256-bit one (avx-vnni, avx512-vnni; see
// simd_avx2.h KILN_VNNI256).
// Legacy tiles are lanes = rows (see Legacy below): 8 weight rows share one fp32 accumulator vector
// per activation row, and y[t * ldy + r] gets the same lane operations on every path (batch
// invariance). Float weights keep one 8-lane accumulator per (weight row, activation row).
// Include ONLY from ISA TUs (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc): everything
// here has internal linkage, so each TU gets its own copy compiled with its own instruction set.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/block_layouts.h"
#include "kernels/cpu/simd_avx2.h"

namespace kiln::kernels::cpu {
namespace {

namespace blk = blocks;

// ---- activations ----

size_t f32_row_bytes(int64_t k) {
    return size_t(k) * 4;
}
size_t q8_row_bytes(int64_t k) {
    return size_t(k / blk::kQK) * blk::kActQ8Bytes;
}

void copy_row(const float* x, void* dst, int64_t k) {
    std::memcpy(dst, x, size_t(k) * 4);
}

size_t bf16_row_bytes(int64_t k) {
    return size_t(k) * 2;
}

// ActFormat::kBF16: round to nearest even, NaN kept (quiet), as core::f32_to_bf16 (own copy: internal
// linkage per ISA TU, see simd_avx2.h).
void quantize_bf16(const float* x, void* dst, int64_t k) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < k; ++i) {
        uint32_t u;
        std::memcpy(&u, &x[i], 4);
        uint16_t h;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            h = uint16_t((u >> 16) | 0x40);
        } else {
            h = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
        std::memcpy(out + 2 * i, &h, 2);
    }
}

void quantize_q8(const float* x, void* dst, int64_t k) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < k / blk::kQK; ++i, x += blk::kQK, out += blk::kActQ8Bytes) {
        const float d = avx2_amax(x, blk::kQK) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        const __m256i q = avx2_quantize32(x, _mm256_set1_ps(id), &sum);
        const float s = d * float(sum);
        std::memcpy(out + blk::kActQ8D, &d, 4);
        std::memcpy(out + blk::kActQ8S, &s, 4);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + blk::kActQ8Q), q);
    }
}

// ---- legacy weight formats: load(block) -> 32 bytes in element order, scale d, min m ----

inline __m256i nibbles32(const uint8_t* qs) {
    // the 16 bytes in both lanes; the high lane shifted right by 4 (64-bit shifts: the mask drops
    // the bits that cross bytes)
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

// Byte j = 0x10 when bit j of the little-endian u32 at p is set, else 0.
inline __m256i bit4_from_qh(const uint8_t* p) {
    uint32_t qh;
    std::memcpy(&qh, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bitsel = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), shuf);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bitsel), bitsel);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// kSigned: weights are int8 (sign trick); otherwise unsigned with weight = d * (u - kOffset) (+ m).
// kD (kM): byte offset of the fp16 scale (min) in the block. The payload is the rest of the block
// (kPayload bytes from kPayloadOff: qs, or qh then qs), which load_payload turns into 32 bytes in
// element order; the packed layout (PackedSrc below) stores payloads apart from the scales.
struct FmtQ8_0 {
    static constexpr size_t kBytes = blk::kQ8_0Bytes, kD = blk::kQ8_0D, kM = 0;
    static constexpr size_t kPayloadOff = blk::kQ8_0Qs, kPayload = 32;
    static constexpr bool kSigned = true, kMin = false;
    static constexpr int kOffset = 0;
    static __m256i load_payload(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
};
struct FmtQ4_0 {
    static constexpr size_t kBytes = blk::kQ4_0Bytes, kD = blk::kQ4_0D, kM = 0;
    static constexpr size_t kPayloadOff = blk::kQ4_0Qs, kPayload = 16;
    static constexpr bool kSigned = false, kMin = false;
    static constexpr int kOffset = 8;
    static __m256i load_payload(const uint8_t* p) { return nibbles32(p); }
};
struct FmtQ4_1 {
    static constexpr size_t kBytes = blk::kQ4_1Bytes, kD = blk::kQ4_1D, kM = blk::kQ4_1M;
    static constexpr size_t kPayloadOff = blk::kQ4_1Qs, kPayload = 16;
    static constexpr bool kSigned = false, kMin = true;
    static constexpr int kOffset = 0;
    static __m256i load_payload(const uint8_t* p) { return nibbles32(p); }
};
struct FmtQ5_0 {
    static constexpr size_t kBytes = blk::kQ5_0Bytes, kD = blk::kQ5_0D, kM = 0;
    static constexpr size_t kPayloadOff = blk::kQ5_0Qh, kPayload = 20;  // qh (4), then qs (16)
    static constexpr bool kSigned = false, kMin = false;
    static constexpr int kOffset = 16;
    static __m256i load_payload(const uint8_t* p) { return _mm256_or_si256(nibbles32(p + 4), bit4_from_qh(p)); }
};
struct FmtQ5_1 {
    static constexpr size_t kBytes = blk::kQ5_1Bytes, kD = blk::kQ5_1D, kM = blk::kQ5_1M;
    static constexpr size_t kPayloadOff = blk::kQ5_1Qh, kPayload = 20;
    static constexpr bool kSigned = false, kMin = true;
    static constexpr int kOffset = 0;
    static __m256i load_payload(const uint8_t* p) { return _mm256_or_si256(nibbles32(p + 4), bit4_from_qh(p)); }
};
static_assert(blk::kQ5_0Qs == blk::kQ5_0Qh + 4 && blk::kQ5_1Qs == blk::kQ5_1Qh + 4);

// A weight block of the 8 rows as tile8 keeps it across activation rows. Rows8: each row's 32
// values unpacked to bytes (block_dots8). Pairs8 (4-bit packed payloads: rows 2j and 2j + 1 are 32
// contiguous bytes): lo[j] = the low nibbles (elements 0-15) of rows 2j | 2j + 1 in the two 128-bit
// halves, hi[j] the high nibbles (elements 16-31); one load, one shift, two ands per 2 rows.
struct Rows8 {
    __m256i wq[8];
};
struct Pairs8 {
    __m256i lo[4], hi[4];
};

// Where tile8 reads the 8 rows' blocks from. RowSrc: the ggml layout (8 row pointers; the 8 fp16
// scales gathered with vpinsrw). PackedSrc: one 8-row group of the packed layout (matmul.h
// PackedMatmulKernel): per block {fp16 d[8]; fp16 m[8] if kMin; 8 payloads}, one load per scale vector.
template <class Fmt>
struct RowSrc {
    static_assert(Fmt::kPayloadOff + Fmt::kPayload == Fmt::kBytes);
    using Decoded = Rows8;
    const uint8_t* const* rows;
    void decode(int64_t b, Rows8* w) const {
        for (int i = 0; i < 8; ++i) w->wq[i] = q(i, b);
    }
    __m256i q(int i, int64_t b) const {
        return Fmt::load_payload(rows[i] + b * int64_t(Fmt::kBytes) + Fmt::kPayloadOff);
    }
    void scales(int64_t b, __m256* dw, __m256* mw) const {
        // through a small array: GCC builds it with vpinsrw (a vpgatherdd, or forcing the array
        // through memory (failed store forwarding), measured slower)
        alignas(32) uint16_t dh[8], mh[8];
        for (int i = 0; i < 8; ++i) {
            const uint8_t* wb = rows[i] + b * int64_t(Fmt::kBytes);
            std::memcpy(&dh[i], wb + Fmt::kD, 2);
            if constexpr (Fmt::kMin) std::memcpy(&mh[i], wb + Fmt::kM, 2);
        }
        *dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
        if constexpr (Fmt::kMin) *mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mh)));
    }
};
template <bool B, class A, class C>
struct PickType {
    using type = A;
};
template <class A, class C>
struct PickType<false, A, C> {
    using type = C;
};

template <class Fmt>
struct PackedSrc {
    static constexpr int64_t kHeader = Fmt::kMin ? 32 : 16;
    static constexpr int64_t kGroupBytes = 8 * int64_t(Fmt::kBytes);  // = kHeader + 8 payloads
    static_assert(kHeader + 8 * int64_t(Fmt::kPayload) == kGroupBytes);
    static constexpr bool kPairs = Fmt::kPayload == 16;  // Q4_0, Q4_1: two rows' nibbles per 32 bytes
    using Decoded = typename PickType<kPairs, Pairs8, Rows8>::type;
    const uint8_t* group;
    void decode(int64_t b, Decoded* w) const {
        if constexpr (kPairs) {
            const uint8_t* p = group + b * kGroupBytes + kHeader;
            const __m256i mask = _mm256_set1_epi8(0x0f);
            for (int j = 0; j < 4; ++j) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * j));
                w->lo[j] = _mm256_and_si256(v, mask);
                w->hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            }
        } else {
            for (int i = 0; i < 8; ++i) w->wq[i] = q(i, b);
        }
    }
    __m256i q(int i, int64_t b) const {
        return Fmt::load_payload(group + b * kGroupBytes + kHeader + i * int64_t(Fmt::kPayload));
    }
    void scales(int64_t b, __m256* dw, __m256* mw) const {
        const uint8_t* h = group + b * kGroupBytes;
        *dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
        if constexpr (Fmt::kMin) *mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 16)));
    }
};

// Reductions for lanes = rows. All sums are of exact integers, so their order does not matter.
// unpack + add rather than hadd: vphaddd is microcoded on Zen (one per 2 cycles, 4x an unpack).
// pair(a, b): per 128-bit half, dwords [a0 + a2, b0 + b2, a1 + a3, b1 + b3];
// quad(pair(a, b), pair(c, d)): per half, dwords [a, b, c, d], each the sum of the half's 4 dwords.
inline __m256i pair_i32(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
inline __m256i quad_i32(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}
// The same moves on int16 pairs (a dword = 2 int16 lanes, added lane-wise, wrapping).
inline __m256i pair_i16(__m256i a, __m256i b) {
    return _mm256_add_epi16(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
inline __m256i quad_i16(__m256i a, __m256i b) {
    return _mm256_add_epi16(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}
// [r0..r3 | r0..r3] (half sums) and [r4..r7 | r4..r7] -> [r0 .. r7].
inline __m256i halves_i32(__m256i s0123, __m256i s4567) {
    return _mm256_add_epi32(_mm256_blend_epi32(s0123, s4567, 0xf0), _mm256_permute2x128_si256(s0123, s4567, 0x21));
}

#if defined(KILN_VNNI256)
constexpr bool kLegacyVnni = true;
#else
constexpr bool kLegacyVnni = false;
#endif

// Lane i = dot(weight block row i, activation block) as an exact int32 (including the Q4_0/Q5_0
// offset: dot(u, x) - offset * sum(x) = dot(u - offset, x)). wq: the 8 rows' blocks as loaded.
template <class Fmt>
inline __m256i block_dots8(const __m256i* wq, __m256i xq) {
    if constexpr (!Fmt::kSigned && !kLegacyVnni) {
        // 4- and 5-bit weights without VNNI: maddubs gives int16 pair sums |u0 x0 + u1 x1| <= 2 * 31 * 127;
        // the first two reduction levels add 4 of them (8 products) in int16: the true sums (with the
        // offset subtracted: <= 8 * 16 * 127) fit, so wrapping intermediates do not matter. One madd
        // per 4 rows then widens to int32.
        __m256i q0123 = quad_i16(pair_i16(_mm256_maddubs_epi16(wq[0], xq), _mm256_maddubs_epi16(wq[1], xq)),
                                 pair_i16(_mm256_maddubs_epi16(wq[2], xq), _mm256_maddubs_epi16(wq[3], xq)));
        __m256i q4567 = quad_i16(pair_i16(_mm256_maddubs_epi16(wq[4], xq), _mm256_maddubs_epi16(wq[5], xq)),
                                 pair_i16(_mm256_maddubs_epi16(wq[6], xq), _mm256_maddubs_epi16(wq[7], xq)));
        if constexpr (Fmt::kOffset != 0) {
            const __m256i o = pair_i16(_mm256_maddubs_epi16(_mm256_set1_epi8(Fmt::kOffset), xq),
                                       _mm256_maddubs_epi16(_mm256_set1_epi8(Fmt::kOffset), xq));
            const __m256i oq = quad_i16(o, o);
            q0123 = _mm256_sub_epi16(q0123, oq);
            q4567 = _mm256_sub_epi16(q4567, oq);
        }
        const __m256i ones = _mm256_set1_epi16(1);
        return halves_i32(_mm256_madd_epi16(q0123, ones), _mm256_madd_epi16(q4567, ones));
    } else {
        __m256i v[8];
        for (int i = 0; i < 8; ++i) {
            if constexpr (Fmt::kSigned) {
                v[i] = avx2_dot_u8s8(_mm256_abs_epi8(wq[i]), _mm256_sign_epi8(xq, wq[i]));
            } else {
                v[i] = avx2_dot_u8s8(wq[i], xq);
            }
        }
        __m256i s0123 = quad_i32(pair_i32(v[0], v[1]), pair_i32(v[2], v[3]));
        __m256i s4567 = quad_i32(pair_i32(v[4], v[5]), pair_i32(v[6], v[7]));
        if constexpr (Fmt::kOffset != 0) {
            // the offset dot reduced the same way: the half's sum in every dword of the half
            const __m256i o = pair_i32(avx2_dot_u8s8(_mm256_set1_epi8(Fmt::kOffset), xq),
                                       avx2_dot_u8s8(_mm256_set1_epi8(Fmt::kOffset), xq));
            const __m256i oq = quad_i32(o, o);
            s0123 = _mm256_sub_epi32(s0123, oq);
            s4567 = _mm256_sub_epi32(s4567, oq);
        }
        return halves_i32(s0123, s4567);
    }
}

template <class Fmt>
inline __m256i block_dots8(const Rows8& w, const uint8_t* xq) {
    return block_dots8<Fmt>(w.wq, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
}

// Lane i = the exact int32 dot of row i with the activation block, as block_dots8 (the same integers,
// summed in another order). Per 2 rows: u8 x s8 dots of lo with x[0..15] and hi with x[16..31] (both
// broadcast to the two halves), minus the offset's dot with the same halves (so each half's 4 partial
// sums add up to the row's dot of u - offset), then one pair/quad reduction and a lane permutation
// for the 8 rows. int16 lanes stay exact: |u0 x0 + u1 x1| <= 2 * 15 * 127, two of them and the offset
// term (<= 4 * 8 * 127) stay below 2^15.
template <class Fmt>
inline __m256i block_dots8(const Pairs8& w, const uint8_t* xq) {
    const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq)));
    const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16)));
    const __m256i off = _mm256_set1_epi8(Fmt::kOffset);
    __m256i v[4];
    if constexpr (kLegacyVnni) {
        __m256i o = _mm256_setzero_si256();
        if constexpr (Fmt::kOffset != 0) o = avx2_dot_u8s8_acc(avx2_dot_u8s8(off, xlo), off, xhi);
        for (int j = 0; j < 4; ++j) {
            v[j] = avx2_dot_u8s8_acc(avx2_dot_u8s8(w.lo[j], xlo), w.hi[j], xhi);
            if constexpr (Fmt::kOffset != 0) v[j] = _mm256_sub_epi32(v[j], o);
        }
    } else {
        __m256i o = _mm256_setzero_si256();
        if constexpr (Fmt::kOffset != 0)
            o = _mm256_add_epi16(_mm256_maddubs_epi16(off, xlo), _mm256_maddubs_epi16(off, xhi));
        for (int j = 0; j < 4; ++j) {
            __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo[j], xlo), _mm256_maddubs_epi16(w.hi[j], xhi));
            if constexpr (Fmt::kOffset != 0) t = _mm256_sub_epi16(t, o);
            v[j] = _mm256_madd_epi16(t, _mm256_set1_epi16(1));
        }
    }
    // half 0: rows 0 2 4 6, half 1: rows 1 3 5 7 -> lanes in row order
    return _mm256_permutevar8x32_epi32(quad_i32(pair_i32(v[0], v[1]), pair_i32(v[2], v[3])),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The 8-row-group loop shared by the lanes = rows tiles (Legacy here, Fp4 in simd_fp4_kernels.h).
// F provides kRows = 8, kMaxTokens and template <int T, class Src> tile8(src, act, arb, k, y, ldy,
// valid, next_group).

// The 8 row pointers of the group starting at row r (rows past r1 repeat row r1 - 1); returns the
// number of valid lanes.
inline int group_rows8(const uint8_t* w, size_t wrb, int64_t r, int64_t r1, const uint8_t** rows) {
    const int valid = int(r1 - r < 8 ? r1 - r : 8);
    for (int i = 0; i < 8; ++i) rows[i] = w + (r + (i < valid ? i : valid - 1)) * int64_t(wrb);
    return valid;
}

// Stores lanes [0, valid) of v (lane i = row i of an 8-row group) to y[0 .. valid).
inline void store_rows8(float* y, __m256 v, int valid) {
    if (valid == 8) {
        _mm256_storeu_ps(y, v);
    } else {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y, mask, v);
    }
}

// One block's contribution to a lanes = rows accumulator, the arithmetic every 8-row tile shares (so
// the packed and unpacked layouts stay bit-identical): acc += mult * idot (mult = d_w * d_x, lane-wise,
// one rounding for the product and one for the fma); with a min (kMin), macc += m_w * s_x (s_x of the
// activation block at xb).
template <bool kMin>
inline void accumulate_block(__m256 mult, __m256i idot, __m256 mw, const uint8_t* xb, __m256* acc, __m256* macc) {
    *acc = _mm256_fmadd_ps(mult, _mm256_cvtepi32_ps(idot), *acc);
    if constexpr (kMin) {
        float sx;
        std::memcpy(&sx, xb + blk::kActQ8S, 4);
        *macc = _mm256_fmadd_ps(mw, _mm256_set1_ps(sx), *macc);
    }
}

// One 8-row group for run_groups(): where the tile reads it, its valid lanes, the next group (decode
// prefetch).
template <class Src>
struct RowGroup {
    Src src;
    int valid;
    const uint8_t* next;
};

template <class F, class Src>
void tile8_t(int num_t, const Src& src, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy, int valid) {
    switch (num_t) {
        case 4:
            F::template tile8<4>(src, act, arb, k, y, ldy, valid, nullptr);
            break;
        case 3:
            F::template tile8<3>(src, act, arb, k, y, ldy, valid, nullptr);
            break;
        case 2:
            F::template tile8<2>(src, act, arb, k, y, ldy, valid, nullptr);
            break;
        default:
            F::template tile8<1>(src, act, arb, k, y, ldy, valid, nullptr);
            break;
    }
}

// Decode = 8-row groups with a prefetch of the next; prefill = activation chunks of ~256 KiB, up to
// F::kMaxTokens activation rows per weight-block decode. at(r) gives the RowGroup of rows [r, r + 8).
template <class F, class At>
void run_groups(At at, const uint8_t* ab, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
    constexpr int kMaxTokens = F::kMaxTokens;
    if (n == 1) {
        for (int64_t r = r0; r < r1; r += 8) {
            const auto g = at(r);
            F::template tile8<1>(g.src, ab, arb, k, y + r, ldy, g.valid, g.next);
        }
        return;
    }
    int64_t chunk = int64_t((256 << 10) / (arb > 0 ? arb : 1)) & ~int64_t(kMaxTokens - 1);
    if (chunk < kMaxTokens) chunk = kMaxTokens;
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n ? t0 + chunk : n;
        for (int64_t r = r0; r < r1; r += 8) {
            const auto g = at(r);
            for (int64_t t = t0; t < t1; t += kMaxTokens) {
                const int num_t = int(t1 - t < kMaxTokens ? t1 - t : kMaxTokens);
                tile8_t<F>(num_t, g.src, ab + t * int64_t(arb), arb, k, y + t * ldy + r, ldy, g.valid);
            }
        }
    }
}

// Legacy formats, lanes = rows: 8 weight rows share one fp32 accumulator vector per activation row
// (lane i = weight row i), so the scaling, conversion and accumulation are done once per 8 rows.
// Per block and activation row: the 8 integer block dots, reduced to one vector of 8 exact int32
// (block_dots8; the Q4_0/Q5_0 offset term, identical for all rows, subtracted once for the 8),
// converted once, then
//   acc  = fma(d_w * d_x, idot, acc)      (lane-wise: one rounding for the product, one for the fma)
//   macc = fma(m_w, s_x, macc)            (formats with a min)
// and y = acc (+ macc) at the end. Batch invariance (the serving engine compares logits bit for
// bit): every y[t * ldy + r] goes through exactly these lane operations in block order whatever n,
// the tile shape, the row range or the row's lane: decode, prefill and remainder rows all run tile8
// (remainder groups repeat the last valid row and store only the valid lanes). Keep every fp32
// multiply feeding an fma's multiplicand: GCC contracts a mul whose result is only added (default
// -ffp-contract=fast), which could differ between inlined tile shapes.
template <class Fmt>
struct Legacy {
    static constexpr int kRows = 8;
    static constexpr int kMaxTokens = 4;

    // src: the 8 weight rows (lane i = row i); y + i: its output column; lanes [0, valid) are stored.
    // next_group (decode): where the next 8 rows' bytes start (contiguous), prefetched block by block.
    template <int T, class Src>
    static void tile8(const Src& src, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy, int valid,
                      const uint8_t* next_group) {
        __m256 acc[T], macc[T];
        for (int t = 0; t < T; ++t) {
            acc[t] = _mm256_setzero_ps();
            macc[t] = _mm256_setzero_ps();
        }
        const int64_t nb = k / blk::kQK;
        for (int64_t b = 0; b < nb; ++b) {
            if (next_group) avx2_prefetch_next_group(next_group, kRows * int64_t(Fmt::kBytes), b);
            typename Src::Decoded wd;
            src.decode(b, &wd);
            __m256 dw, mw = _mm256_setzero_ps();
            src.scales(b, &dw, &mw);
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                const __m256i idot = block_dots8<Fmt>(wd, xb + blk::kActQ8Q);
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8D, 4);
                accumulate_block<Fmt::kMin>(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), idot, mw, xb, &acc[t], &macc[t]);
            }
        }
        for (int t = 0; t < T; ++t) {
            __m256 sum = acc[t];
            if constexpr (Fmt::kMin) sum = _mm256_add_ps(sum, macc[t]);
            store_rows8(y + t * ldy, sum, valid);
        }
    }

    // MatmulKernel::gemm over the ggml row layout.
    static void gemm(const void* w, size_t wrb, const void* act, size_t arb, int64_t n, int64_t k, float* y,
                     int64_t ldy, int64_t r0, int64_t r1) {
        const uint8_t* wb = static_cast<const uint8_t*>(w);
        const uint8_t* rows[kRows];
        auto at = [&](int64_t r) {
            const int valid = group_rows8(wb, wrb, r, r1, rows);
            return RowGroup<RowSrc<Fmt>>{RowSrc<Fmt>{rows}, valid, wb + (r + kRows) * int64_t(wrb)};
        };
        run_groups<Legacy>(at, static_cast<const uint8_t*>(act), arb, n, k, y, ldy, r0, r1);
    }

    // PackedMatmulKernel (matmul.h): the packed layout, groups of 8 rows in row order.
    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK) * size_t(PackedSrc<Fmt>::kGroupBytes);
    }
    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* wb = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        const int64_t nb = k / blk::kQK;
        for (int64_t g = 0; g < (rows + kRows - 1) / kRows; ++g) {
            for (int64_t b = 0; b < nb; ++b, out += PackedSrc<Fmt>::kGroupBytes) {
                for (int i = 0; i < kRows; ++i) {
                    const int64_t r = g * kRows + i < rows ? g * kRows + i : rows - 1;  // pad: repeat the last row
                    const uint8_t* blk = wb + r * int64_t(wrb) + b * int64_t(Fmt::kBytes);
                    std::memcpy(out + 2 * i, blk + Fmt::kD, 2);
                    if constexpr (Fmt::kMin) std::memcpy(out + 16 + 2 * i, blk + Fmt::kM, 2);
                    std::memcpy(out + PackedSrc<Fmt>::kHeader + i * int64_t(Fmt::kPayload), blk + Fmt::kPayloadOff,
                                Fmt::kPayload);
                }
            }
        }
    }
    // As gemm, over the packed matrix; r0 is a multiple of 8.
    static void gemm_packed(const void* wp, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                            int64_t r0, int64_t r1) {
        const uint8_t* base = static_cast<const uint8_t*>(wp);
        const int64_t group_bytes = (k / blk::kQK) * PackedSrc<Fmt>::kGroupBytes;
        auto at = [&](int64_t r) {
            const uint8_t* g = base + (r / kRows) * group_bytes;
            return RowGroup<PackedSrc<Fmt>>{PackedSrc<Fmt>{g}, int(r1 - r < kRows ? r1 - r : kRows), g + group_bytes};
        };
        run_groups<Legacy>(at, static_cast<const uint8_t*>(act), arb, n, k, y, ldy, r0, r1);
    }
};

// ---- float weights: 8 elements per step, scalar tail ----

struct FloatF32 {
    static constexpr size_t kElemBytes = 4;
    static __m256 load8(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
    static float load1(const uint8_t* p) { return avx2_load_f32(p); }
};
struct FloatF16 {
    static constexpr size_t kElemBytes = 2;
    static __m256 load8(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static float load1(const uint8_t* p) { return avx2_half(p); }
};
struct FloatBF16 {
    static constexpr size_t kElemBytes = 2;
    static __m256 load8(const uint8_t* p) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static float load1(const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t u = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

// Elem: the weight element; Act: the activation element (FloatF32, or FloatBF16 for ActFormat::kBF16).
template <class Elem, class Act = FloatF32>
struct Float {
    static constexpr int kDecodeRows = 4;
#if defined(__AVX512F__)
    static constexpr int kPrefillRows = 4;  // 4 x 4 accumulators + 4 weight vectors: fits 32 registers
#else
    static constexpr int kPrefillRows = 2;  // 16 registers (AVX2)
#endif

    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256 acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
        }
        int64_t i = 0;
        for (; i + 8 <= k; i += 8) {
            __m256 wv[R];
            for (int r = 0; r < R; ++r) wv[r] = Elem::load8(w + r * int64_t(wrb) + i * int64_t(Elem::kElemBytes));
            for (int t = 0; t < T; ++t) {
                const __m256 xv = Act::load8(act + t * int64_t(arb) + i * int64_t(Act::kElemBytes));
                for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) {
                float sum = avx2_hsum(acc[r][t]);
                const uint8_t* x = act + t * int64_t(arb);  // rows need not be 4-byte aligned
                // Explicit FMA: a plain `sum += a * b` may be contracted in some instantiations and
                // not in others (seen with the AVX-512 flags), which broke batch invariance.
                for (int64_t j = i; j < k; ++j) {
                    const __m128 wj = _mm_set_ss(Elem::load1(w + r * int64_t(wrb) + j * int64_t(Elem::kElemBytes)));
                    const __m128 xj = _mm_set_ss(Act::load1(x + j * int64_t(Act::kElemBytes)));
                    sum = _mm_cvtss_f32(_mm_fmadd_ss(wj, xj, _mm_set_ss(sum)));
                }
                y[t * ldy + r] = sum;
            }
        }
    }
};

// MatmulKernel::gemm through Legacy's tiles for a format whose blocks are not one fixed-size block per
// 32 elements (IQ4_XS, TQ1_0, TQ2_0: super-blocks of 256): Src reads sub-block b of the 8 rows it is
// built from (Src{rows}: decode(b, Rows8*), scales(b, dw, mw)), as RowSrc does for the legacy layout.
template <class Fmt, class Src>
void rows_gemm(const void* w, size_t wrb, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
               int64_t r0, int64_t r1) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* rows[8];
    auto at = [&](int64_t r) {
        const int valid = group_rows8(wb, wrb, r, r1, rows);
        return RowGroup<Src>{Src{rows}, valid, wb + (r + 8) * int64_t(wrb)};
    };
    run_groups<Legacy<Fmt>>(at, static_cast<const uint8_t*>(act), arb, n, k, y, ldy, r0, r1);
}

constexpr MatmulKernel kF32{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Float<FloatF32>>};
constexpr MatmulKernel kF16{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Float<FloatF16>>};
constexpr MatmulKernel kBF16{ActFormat::kBF16, bf16_row_bytes, quantize_bf16, avx2_gemm<Float<FloatBF16, FloatBF16>>};
constexpr MatmulKernel kQ8_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, Legacy<FmtQ8_0>::gemm};
constexpr MatmulKernel kQ4_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, Legacy<FmtQ4_0>::gemm};
constexpr MatmulKernel kQ4_1{ActFormat::kQ8, q8_row_bytes, quantize_q8, Legacy<FmtQ4_1>::gemm};
constexpr MatmulKernel kQ5_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, Legacy<FmtQ5_0>::gemm};
constexpr MatmulKernel kQ5_1{ActFormat::kQ8, q8_row_bytes, quantize_q8, Legacy<FmtQ5_1>::gemm};

template <class Fmt>
constexpr PackedMatmulKernel kPacked{Legacy<Fmt>::packed_bytes, Legacy<Fmt>::pack, Legacy<Fmt>::gemm_packed,
                                     "8-row groups, blocks interleaved"};

inline const PackedMatmulKernel* simd_packed_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kQ8_0:
            return &kPacked<FmtQ8_0>;
        case core::DType::kQ4_0:
            return &kPacked<FmtQ4_0>;
        case core::DType::kQ4_1:
            return &kPacked<FmtQ4_1>;
        case core::DType::kQ5_0:
            return &kPacked<FmtQ5_0>;
        case core::DType::kQ5_1:
            return &kPacked<FmtQ5_1>;
        default:
            return nullptr;
    }
}

inline const MatmulKernel* simd_legacy_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kF32:
            return &kF32;
        case core::DType::kF16:
            return &kF16;
        case core::DType::kBF16:
            return &kBF16;
        case core::DType::kQ8_0:
            return &kQ8_0;
        case core::DType::kQ4_0:
            return &kQ4_0;
        case core::DType::kQ4_1:
            return &kQ4_1;
        case core::DType::kQ5_0:
            return &kQ5_0;
        case core::DType::kQ5_1:
            return &kQ5_1;
        default:
            return nullptr;
    }
}

}  // namespace

}  // namespace kiln::kernels::cpu
