// Byte layouts of the GGML weight blocks the matmul kernels read (ggml-common.h block_q4_0 ...
// block_q6_k, block_mxfp4; kiln's nvfp4, e4m3_b32 and mxfp8; the field meanings are spelled out in
// kernels/ref/dequant.cc). Offsets, not structs: weight rows carry no alignment promise, so kernels read fields with
// memcpy / unaligned loads. Constants only, on purpose: this header is included by ISA-specific TUs (-mavx2 ...), and
// an inline function here could be ODR-merged into generic code compiled with those flags.
// A neutral kernels header (scripts/lint_layers.py): kernels/ref, kernels/cpu and kernels/cuda may all
// include it; it includes no kernels.
#pragma once

#include <cstddef>

namespace kiln::kernels::blocks {

constexpr int kQK = 32;     // elements per legacy block
constexpr int kQK_K = 256;  // elements per K-quant super-block

// Q4_0: fp16 d | 16 bytes nibbles (low nibble element j, high nibble element j + 16). x = d (q - 8).
constexpr size_t kQ4_0Bytes = 18, kQ4_0D = 0, kQ4_0Qs = 2;
// Q4_1: fp16 d | fp16 m | 16 bytes nibbles. x = d q + m.
constexpr size_t kQ4_1Bytes = 20, kQ4_1D = 0, kQ4_1M = 2, kQ4_1Qs = 4;
// Q5_0: fp16 d | u32 qh (bit j = bit 4 of element j) | 16 bytes nibbles. x = d (q - 16).
constexpr size_t kQ5_0Bytes = 22, kQ5_0D = 0, kQ5_0Qh = 2, kQ5_0Qs = 6;
// Q5_1: fp16 d | fp16 m | u32 qh | 16 bytes nibbles. x = d q + m.
constexpr size_t kQ5_1Bytes = 24, kQ5_1D = 0, kQ5_1M = 2, kQ5_1Qh = 4, kQ5_1Qs = 8;
// Q8_0: fp16 d | 32 int8. x = d q.
constexpr size_t kQ8_0Bytes = 34, kQ8_0D = 0, kQ8_0Qs = 2;
// Q4_K: fp16 d | fp16 dmin | 12 bytes 6-bit scales/mins | 128 bytes nibbles.
// x = (d sc_j) q - (dmin m_j) for sub-block j of 32; sub-blocks 2p, 2p+1 share qs[32p .. 32p+31]
// (low nibbles, then high nibbles).
constexpr size_t kQ4_KBytes = 144, kQ4_KD = 0, kQ4_KDmin = 2, kQ4_KScales = 4, kQ4_KQs = 16;
// Q5_K: as Q4_K plus qh[32]: bit j of qh[l] = bit 4 of element l of sub-block j.
constexpr size_t kQ5_KBytes = 176, kQ5_KD = 0, kQ5_KDmin = 2, kQ5_KScales = 4, kQ5_KQh = 16, kQ5_KQs = 48;
// Q6_K: ql[128] | qh[64] | int8 scales[16] | fp16 d. x = (d sc_i) (q - 32), sub-blocks of 16.
// Half h (128 elements), element 32 s + l: low 4 bits in ql[64h + l + 32 (s & 1)] (nibble s >> 1),
// high 2 bits at bits 2s, 2s+1 of qh[32h + l].
constexpr size_t kQ6_KBytes = 210, kQ6_KQl = 0, kQ6_KQh = 128, kQ6_KScales = 192, kQ6_KD = 208;

// Q2_K: scales[16] (low nibble scale, high nibble min of sub-block i of 16) | qs[64] | fp16 d | fp16 dmin.
// x = (d sc_i) q - (dmin m_i); element 128h + 32s + l (l = 0..31) is bits 2s, 2s+1 of qs[32h + l].
constexpr size_t kQ2_KBytes = 84, kQ2_KScales = 0, kQ2_KQs = 16, kQ2_KD = 80, kQ2_KDmin = 82;
// Q3_K: hmask[32] | qs[64] (2 low bits, laid out as Q2_K) | 12 bytes 6-bit scales | fp16 d.
// x = (d (sc_i - 32)) (q - (hbit ? 0 : 4)); element 128h + 32s + l has its hbit at bit 4h + s of hmask[l].
constexpr size_t kQ3_KBytes = 110, kQ3_KHmask = 0, kQ3_KQs = 32, kQ3_KScales = 96, kQ3_KD = 108;

// MXFP4 (ggml block_mxfp4): E8M0 e | 16 bytes E2M1 nibbles (as Q4_0). x = e2m1(q) 2^(e - 127).
constexpr size_t kMxfp4Bytes = 17, kMxfp4E = 0, kMxfp4Qs = 1;
// NVFP4 (kiln's, core/dtype.h): fp16 d | 8 bytes E2M1 nibbles (element j low nibble of qs[j], j + 8
// high). 16 elements; the kernels take two consecutive blocks per 32-element activation block.
constexpr size_t kNvfp4Bytes = 10, kNvfp4D = 0, kNvfp4Qs = 2;
// E4M3_B32 (kiln's): fp32 d | 32 E4M3 codes. x = e4m3(q) d.
constexpr size_t kE4m3B32Bytes = 36, kE4m3B32D = 0, kE4m3B32Qs = 4;
// MXFP8 (kiln's, OCP MX v1.0 with E4M3 elements): E8M0 e | 32 E4M3 codes. x = e4m3(q) 2^(e - 127).
constexpr size_t kMxfp8Bytes = 33, kMxfp8E = 0, kMxfp8Qs = 1;
// IQ4_NL (ggml block_iq4_nl): fp16 d | 16 bytes nibbles (as Q4_0). x = d kIq4Values[q].
constexpr size_t kIq4NlBytes = 18, kIq4NlD = 0, kIq4NlQs = 2;
// IQ4_XS (ggml block_iq4_xs), 256 elements: fp16 d | u16 scales_h | 4 bytes scales_l | 128 bytes
// nibbles. Sub-block j (32 elements): ls = (scales_l[j / 2] >> 4 (j % 2)) & 15 | ((scales_h >> 2j) & 3)
// << 4, x = (d (ls - 32)) kIq4Values[q], nibbles qs[16j .. 16j + 15] as Q4_0's.
constexpr size_t kIq4XsBytes = 136, kIq4XsD = 0, kIq4XsScalesH = 2, kIq4XsScalesL = 4, kIq4XsQs = 8;
// TQ2_0 (ggml block_tq2_0), 256 elements: 64 bytes qs | fp16 d. Element 128c + 32s + j is bits 2s, 2s+1
// of qs[32c + j]: x = d (code - 1).
constexpr size_t kTq2_0Bytes = 66, kTq2_0Qs = 0, kTq2_0D = 64;
// TQ1_0 (ggml block_tq1_0), 256 elements: 48 bytes qs | 4 bytes qh | fp16 d, five trits per byte in
// base 3: trit m of byte q is ((q * 3^m) mod 256 * 3) >> 8 (as gguf-py decodes it). Element 32m + j
// (m < 5) is trit m of qs[j] (j < 32), 160 + 16m + j of qs[32 + j] (j < 16), 240 + 4m + j (m < 4)
// of qh[j]. x = d (trit - 1).
constexpr size_t kTq1_0Bytes = 54, kTq1_0Qs = 0, kTq1_0Qh = 48, kTq1_0D = 52;
// The 16 non-linear levels of IQ4_NL / IQ4_XS (ggml kvalues_iq4nl).
constexpr signed char kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// E2M1 code -> 2 * value, an exact int8 ({0, 1, 2, 3, 4, 6, 8, 12} and negatives; ggml kvalues_mxfp4).
constexpr signed char kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Offsets inside the activation blocks (ActQ8 / ActQ8K in matmul.h).
constexpr size_t kActQ8Bytes = 40, kActQ8D = 0, kActQ8S = 4, kActQ8Q = 8;
constexpr size_t kActQ8KBytes = 292, kActQ8KD = 0, kActQ8KBsums = 4, kActQ8KQ = 36;

}  // namespace kiln::kernels::blocks
