// The driver of the VNNI group layouts, shared by the AVX-512 VNNI kernels (Vnni and VnniQ4,
// simd_vnni_kernels.h / simd_vnni_q4.h) and the 256-bit AVX-VNNI kernels (simd_avxvnni_packed.h): a
// packed matrix is groups of K::kRows rows, per group and 32-element block K::kGroupBytes; a tile
// of T tokens walks one group's blocks. Also the row-pair packing of the Q4 layouts, where rows i and
// i + kRows / 2 share each payload byte, and the packing walk of every group layout. ISA-neutral
// templates: a kernel's own TU instantiates them.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/block_layouts.h"
#include "kernels/cpu/simd_avx2.h"

namespace kiln::kernels::cpu {
namespace {

namespace blk = blocks;

// PackedMatmulKernel::packed_bytes of the VNNI group layouts: rows padded to K::kRows, one
// K::kGroupBytes group-block per group and 32 elements.
template <class K>
size_t vnni_groups_bytes(int64_t rows, int64_t k) {
    return size_t((rows + K::kRows - 1) / K::kRows) * size_t(k / blk::kQK) * size_t(K::kGroupBytes);
}

// K::tile<num_t> for 1 <= num_t <= T.
template <class K, int T = K::kMaxTokens>
void vnni_tile_n(int num_t, const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off,
                 float* y, int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
    if constexpr (T > 1) {
        if (num_t < T)
            return vnni_tile_n<K, T - 1>(num_t, group, act, arb, k, off, y, ldy, valid, next_group, next_step);
    }
    K::template tile<T>(group, act, arb, k, off, y, ldy, valid, next_group, next_step);
}

// PackedMatmulKernel::gemm of the VNNI group layouts (Vnni above, VnniQ4 in simd_vnni_q4.h), given
// K::kRows, kMaxTokens, kGroupBytes, kOffsPerBlock, kStackOffsets, offsets() and tile<T>(). Decode:
// group after group, prefetching the next. Prefill: tokens in chunks whose activations (~256 KiB)
// stay in L2 while the row groups stream past, kMaxTokens tokens per pass over a group's blocks,
// the passes sharing out the next group's prefetch (vnni_next_share).
// r0 a multiple of K::kRows.
template <class K>
void vnni_groups_gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
    constexpr int kRows = K::kRows, kMaxTokens = K::kMaxTokens;
    constexpr int64_t kGroupBytes = K::kGroupBytes;
    const uint8_t* base = static_cast<const uint8_t*>(packed);
    const uint8_t* ab = static_cast<const uint8_t*>(act);
    const int64_t nb = k / blk::kQK;
    int64_t chunk = int64_t((256 << 10) / (arb > 0 ? arb : 1));
    chunk -= chunk % kMaxTokens;
    if (chunk < kMaxTokens) chunk = kMaxTokens;
    if (chunk > n) chunk = n;
    int32_t stack_off[K::kStackOffsets];
    int32_t* off = stack_off;
    int32_t* heap_off = nullptr;
    const int64_t per_token = nb * K::kOffsPerBlock;
    if (chunk * per_token > K::kStackOffsets) {
        if (per_token <= K::kStackOffsets) {
            chunk = K::kStackOffsets / per_token;
            if (chunk >= kMaxTokens) chunk -= chunk % kMaxTokens;  // whole token tiles
        } else {  // very long rows: one token's offsets do not fit the stack buffer
            heap_off = new int32_t[size_t(chunk * per_token)];
            off = heap_off;
        }
    }
    auto group_at = [&](int64_t r) { return base + (r / kRows) * nb * kGroupBytes; };
    auto valid_at = [&](int64_t r) { return int(r1 - r < kRows ? r1 - r : kRows); };
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n ? t0 + chunk : n;
        for (int64_t t = t0; t < t1; ++t) K::offsets(ab + t * int64_t(arb), nb, off + (t - t0) * per_token);
        // multi-token passes over each group (a last single token's tile is left out: it prefetches nothing)
        const int64_t passes = (t1 - t0) / kMaxTokens + ((t1 - t0) % kMaxTokens > 1 ? 1 : 0);
        for (int64_t r = r0; r < r1; r += kRows) {
            for (int64_t t = t0; t < t1; t += kMaxTokens) {
                const int num_t = int(t1 - t < kMaxTokens ? t1 - t : kMaxTokens);
                // the token tiles over a group prefetch the next one (it streams from DRAM), each its share
                int64_t step = kGroupBytes;
                const uint8_t* next = group_at(r + kRows);
                if (num_t > 1) next = vnni_next_share(next, nb, kGroupBytes, (t - t0) / kMaxTokens, passes, &step);
                vnni_tile_n<K>(num_t, group_at(r), ab + t * int64_t(arb), arb, k, off + (t - t0) * per_token,
                               y + t * ldy + r, ldy, valid_at(r), (num_t > 1 || t == t0) ? next : nullptr, step);
            }
        }
    }
    delete[] heap_off;
}


// The packing walk of the VNNI group layouts: for every group of kRows rows (in row order) and
// block b < blocks, put(out, i, src) for each row i of the group (src: row i's block b, src_bytes
// per block; the last group's missing rows repeat its last row), then done(out), out being the
// group-block (out_bytes each, one after the other).
template <int kRows, class Put, class Done>
void vnni_pack_walk(const void* w, size_t wrb, int64_t rows, int64_t blocks, int64_t src_bytes, int64_t out_bytes,
                    void* dst, Put put, Done done) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < (rows + kRows - 1) / kRows; ++g) {
        for (int64_t b = 0; b < blocks; ++b, out += out_bytes) {
            for (int i = 0; i < kRows; ++i) {
                const int64_t r = g * kRows + i < rows ? g * kRows + i : rows - 1;
                put(out, i, wb + r * int64_t(wrb) + b * src_bytes);
            }
            done(out);
        }
    }
}
template <int kRows, class Put>
void vnni_pack_walk(const void* w, size_t wrb, int64_t rows, int64_t blocks, int64_t src_bytes, int64_t out_bytes,
                    void* dst, Put put) {
    vnni_pack_walk<kRows>(w, wrb, rows, blocks, src_bytes, out_bytes, dst, put, [](uint8_t*) {});
}

// The Q6_K group layout of kRows rows (VnniQ6K: 16, AvxVnniQ6K: 8; kernels/cpu/simd_vnni_kquant.h
// describes it for 16): per group and super-block, exactly the rows' ggml bytes rearranged: fp16
// d[kRows] | int8 sc[16][kRows] | 32 L vectors | 16 H vectors of 4 kRows bytes; with u_r[e] the 6-bit
// value of element e of row r, byte 4 r + p of L_m = (u[4 m + p] & 15) | (u[128 + 4 m + p] & 15) << 4
// and of H_m = the high 2 bits of u[4 m + p], u[64 + 4 m + p], u[128 + 4 m + p], u[192 + 4 m + p] in
// bits 0-1, 2-3, 4-5, 6-7.
template <int kRows>
void pack_q6k_groups(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
    constexpr int64_t kVec = 4 * kRows, kSc = 2 * kRows, kL = kSc + 16 * kRows, kH = kL + 32 * kVec;
    constexpr int64_t kSbBytes = kH + 16 * kVec;
    static_assert(kSbBytes == kRows * int64_t(blk::kQ6_KBytes));
    vnni_pack_walk<kRows>(w, wrb, rows, k / blk::kQK_K, int64_t(blk::kQ6_KBytes), kSbBytes, dst,
                          [](uint8_t* out, int i, const uint8_t* b) {
        std::memcpy(out + 2 * i, b + blk::kQ6_KD, 2);
        for (int j = 0; j < 16; ++j) out[kSc + kRows * j + i] = b[blk::kQ6_KScales + j];
        uint8_t u[256];  // as the ref kernel reads them
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = b + blk::kQ6_KQl + 64 * half;
            const uint8_t* qh = b + blk::kQ6_KQh + 32 * half;
            for (int q = 0; q < 4; ++q) {
                for (int l = 0; l < 32; ++l) {
                    const int low = (ql[l + 32 * (q & 1)] >> (4 * (q >> 1))) & 0x0f;
                    const int high = (qh[l] >> (2 * q)) & 3;
                    u[128 * half + 32 * q + l] = uint8_t(low | high << 4);
                }
            }
        }
        for (int m = 0; m < 32; ++m) {
            for (int p = 0; p < 4; ++p)
                out[kL + kVec * m + 4 * i + p] = uint8_t((u[4 * m + p] & 15) | (u[128 + 4 * m + p] & 15) << 4);
        }
        for (int m = 0; m < 16; ++m) {
            for (int p = 0; p < 4; ++p) {
                uint8_t h = 0;
                for (int qq = 0; qq < 4; ++qq) h = uint8_t(h | (u[64 * qq + 4 * m + p] >> 4) << (2 * qq));
                out[kH + kVec * m + 4 * i + p] = h;
            }
        }
    });
}

// K::tile<1, num_t> for 1 <= num_t <= T (the Q6_K group kernels' token tiles).
template <class K, int T = K::kMaxTokens>
void q6k_tile_n(int num_t, const uint8_t* group, int64_t gbytes, const uint8_t* act, size_t arb, int64_t k, float* y,
                int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
    if constexpr (T > 1) {
        if (num_t < T) return q6k_tile_n<K, T - 1>(num_t, group, gbytes, act, arb, k, y, ldy, valid, next_group, next_step);
    }
    K::template tile<1, T>(group, gbytes, act, arb, k, y, ldy, valid, next_group, next_step);
}

// PackedMatmulKernel::gemm of the Q6_K group kernels (VnniQ6K, AvxVnniQ6K; r0 a multiple of
// K::kRows). Decode: 2 groups per tile (two independent streams of work); prefill: one group x
// K::kMaxTokens tokens, the token tiles over a group sharing out the next group's prefetch
// (vnni_next_share).
template <class K>
void q6k_groups_gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
    constexpr int kRows = K::kRows, kMaxTokens = K::kMaxTokens;
    const uint8_t* base = static_cast<const uint8_t*>(packed);
    const uint8_t* ab = static_cast<const uint8_t*>(act);
    const int64_t gbytes = (k / blk::kQK_K) * K::kSbBytes;
    int64_t r = r0;
    if (n == 1) {
        for (; r + 2 * kRows <= r1; r += 2 * kRows) {
            const uint8_t* group = base + (r / kRows) * gbytes;
            K::template tile<2, 1>(group, gbytes, ab, arb, k, y + r, ldy, kRows, group + 2 * gbytes, K::kSbBytes);
        }
    }
    const int64_t passes = (n + kMaxTokens - 1) / kMaxTokens;
    for (; r < r1; r += kRows) {
        const uint8_t* group = base + (r / kRows) * gbytes;
        const int valid = int(r1 - r < kRows ? r1 - r : kRows);
        for (int64_t t = 0; t < n; t += kMaxTokens) {
            const int num_t = int(n - t < kMaxTokens ? n - t : kMaxTokens);
            int64_t step = 0;
            const uint8_t* next = vnni_next_share(group + gbytes, k / blk::kQK_K, K::kSbBytes, t / kMaxTokens, passes, &step);
            q6k_tile_n<K>(num_t, group, gbytes, ab + t * int64_t(arb), arb, k, y + t * ldy + r, ldy, valid, next, step);
        }
    }
}

// The Q4_K / Q5_K group kernels (VnniK4, AvxVnniK4): the tokens' min multipliers, once per GEMM
// call rather than once per row group: mx[(t nsb + s) 4 + q] = the int16 pair (bsum_2q, bsum_2q+1)
// of token t's super-block s, bsum_j = bsums[2 j] + bsums[2 j + 1] (|.| <= 4064: int16), for the
// vpdpwssd against the rows' (m_2q, m_2q+1).
inline void k4_min_multipliers(const uint8_t* act, size_t arb, int64_t n, int64_t nsb, int32_t* mx) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t s = 0; s < nsb; ++s, mx += 4) {
            int16_t bs[16];
            std::memcpy(bs, act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes) + blk::kActQ8KBsums, sizeof(bs));
            for (int q = 0; q < 4; ++q) {
                const uint32_t b0 = uint16_t(int16_t(bs[4 * q] + bs[4 * q + 1]));
                const uint32_t b1 = uint16_t(int16_t(bs[4 * q + 2] + bs[4 * q + 3]));
                mx[q] = int32_t(b0 | (b1 << 16));
            }
        }
}

// K::tile<num_t> of the Q4_K / Q5_K super-block groups for 1 <= num_t <= T.
template <class K, int T = K::kMaxTokens>
void k4_tile_n(int num_t, const uint8_t* group, const uint8_t* act, size_t arb, const int32_t* mx, int64_t k, float* y,
               int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
    if constexpr (T > 1) {
        if (num_t < T) return k4_tile_n<K, T - 1>(num_t, group, act, arb, mx, k, y, ldy, valid, next_group, next_step);
    }
    K::template tile<T>(group, act, arb, mx, k, y, ldy, valid, next_group, next_step);
}

// PackedMatmulKernel::gemm of the Q4_K / Q5_K super-block groups (VnniK4, AvxVnniK4), given
// K::kRows, kMaxTokens, kSbBytes and tile<T>(group, act, arb, mins, k, y, ldy, valid, next,
// next_step): group by group, kMaxTokens tokens per tile, the token tiles over a group sharing out the
// next group's prefetch (it streams from memory; vnni_next_share). r0 a multiple of K::kRows.
template <class K>
void k4_groups_gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                    int64_t r0, int64_t r1) {
    constexpr int kRows = K::kRows, kMaxTokens = K::kMaxTokens;
    const uint8_t* base = static_cast<const uint8_t*>(packed);
    const uint8_t* ab = static_cast<const uint8_t*>(act);
    const int64_t nsb = k / blk::kQK_K, gbytes = nsb * K::kSbBytes;
    const int64_t passes = (n + kMaxTokens - 1) / kMaxTokens;
    thread_local std::vector<int32_t> mins;  // grown once, reused: decode allocates nothing
    if (mins.size() < size_t(n * nsb * 4)) mins.resize(size_t(n * nsb * 4));
    k4_min_multipliers(ab, arb, n, nsb, mins.data());
    for (int64_t r = r0; r < r1; r += kRows) {
        const uint8_t* group = base + (r / kRows) * gbytes;
        const int valid = int(r1 - r < kRows ? r1 - r : kRows);
        for (int64_t t = 0; t < n; t += kMaxTokens) {
            const int num_t = int(n - t < kMaxTokens ? n - t : kMaxTokens);
            int64_t step = 0;
            const uint8_t* next = vnni_next_share(group + gbytes, nsb, K::kSbBytes, t / kMaxTokens, passes, &step);
            k4_tile_n<K>(num_t, group, ab + t * int64_t(arb), arb, mins.data() + t * nsb * 4, k, y + t * ldy + r, ldy,
                      valid, next, step);
        }
    }
}

// The Q4_0 / Q4_1 row-pair layout of K::kRows rows per group (Fmt: FmtQ4_0 or FmtQ4_1): per group
// and 32-element block {fp16 d[kRows]; fp16 m[kRows] (Q4_1 only); eight payload vectors of 2 kRows
// bytes}, byte 4 i + p of vector j = c(i, 4 j + p) | c(i + kRows / 2, 4 j + p) << 4 for i < kRows /
// 2, where c(r, e) is the 4-bit code of element e of row r. The last group's missing rows repeat its
// last row. Word by word: with a = bytes 4 j' .. 4 j' + 3 of row i's qs and c = row i + kRows / 2's,
// vector j' (j' < 4, elements 4 j' + p: the low nibbles) takes (a & 0x0f..) | (c & 0x0f..) << 4 and
// vector j' + 4 (elements 16 + 4 j' + p: the high nibbles) (a >> 4 & 0x0f..) | (c & 0xf0..).
template <class Fmt, int kRows>
void pack_q4_row_pairs(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
    constexpr int kHalf = kRows / 2;
    constexpr int64_t kHeader = (Fmt::kMin ? 4 : 2) * kRows, kVec = 4 * kHalf;
    constexpr int64_t kGroupBytes = kRows * int64_t(Fmt::kBytes);
    static_assert(kHeader + 8 * kVec == kGroupBytes);
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    uint8_t* out = static_cast<uint8_t*>(dst);
    const int64_t nb = k / blk::kQK;
    const uint8_t* row[kRows];
    for (int64_t g = 0; g < (rows + kRows - 1) / kRows; ++g) {
        for (int i = 0; i < kRows; ++i) row[i] = wb + (g * kRows + i < rows ? g * kRows + i : rows - 1) * int64_t(wrb);
        for (int64_t b = 0; b < nb; ++b, out += kGroupBytes) {
            const int64_t at = b * int64_t(Fmt::kBytes);
            for (int i = 0; i < kRows; ++i) {
                std::memcpy(out + 2 * i, row[i] + at + Fmt::kD, 2);
                if constexpr (Fmt::kMin) std::memcpy(out + 2 * kRows + 2 * i, row[i] + at + Fmt::kM, 2);
            }
            for (int i = 0; i < kHalf; ++i) {
                const uint8_t* q0 = row[i] + at + Fmt::kPayloadOff;
                const uint8_t* q1 = row[i + kHalf] + at + Fmt::kPayloadOff;
                for (int j = 0; j < 4; ++j) {
                    uint32_t a, c;
                    std::memcpy(&a, q0 + 4 * j, 4);
                    std::memcpy(&c, q1 + 4 * j, 4);
                    const uint32_t lo = (a & 0x0f0f0f0fu) | ((c & 0x0f0f0f0fu) << 4);
                    const uint32_t hi = ((a >> 4) & 0x0f0f0f0fu) | (c & 0xf0f0f0f0u);
                    std::memcpy(out + kHeader + kVec * j + 4 * i, &lo, 4);
                    std::memcpy(out + kHeader + kVec * (j + 4) + 4 * i, &hi, 4);
                }
            }
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
