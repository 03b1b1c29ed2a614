// Matmul building blocks for ops::matmul: y = x @ W^T with W stored as rows of a plain or GGML
// block-quantized dtype, compiled once per ISA and picked at run time. A kernel is a plain struct of
// function pointers; the caller owns threading (it splits the weight rows [r0, r1) across threads;
// decode tiles are 8 rows for the legacy formats (lanes = rows), 4 for F32/F16/BF16 and 2 for
// K-quants, so splits at multiples of 8 avoid remainder tiles) and scratch (activation rows quantized by quantize_row once
// per token, shared by all threads).
// ISAs: kRef (kernels/ref/quant_matmul.cc, scalar oracle); kAvx2 (AVX2+FMA+F16C); kAvx512 (the
// same 256-bit kernel bodies built with AVX-512 F/BW/VL/DQ: EVEX, 32 registers); kAvx512Vnni (as
// kAvx512 plus VNNI/BF16 flags; the u8 x s8 block dot is one vpdpbusd, BF16 weights use vdpbf16ps
// and packed Q4_0/Q4_1/Q8_0 have their own layout, kernels/cpu/simd_vnni_kernels.h). Weight types: F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4, NVFP4, E4M3_B32, MXFP8,
// I8 on every ISA.
//
// Activation formats (kiln's own; every ISA produces bit-identical bytes for the same input):
//  - kF32:   the f32 row itself (for F32, F16 and the FP8 formats E4M3_B32 and MXFP8);
//            act_row_bytes = 4 * k.
//  - kBF16:  the row rounded to bf16 (round to nearest even, NaN kept quiet: core::f32_to_bf16), for
//            BF16 weights, as llama.cpp and bf16 PyTorch models do; act_row_bytes = 2 * k. The
//            products of two bf16 values are exact in fp32; the AVX-512 VNNI level (which includes
//            AVX512-BF16) sums them with vdpbf16ps (denormal inputs and results flushed to zero).
//  - kQ8:    k / 32 ActQ8 blocks (for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, NVFP4 weights; k % 32 == 0,
//            also for NVFP4, whose 16-element blocks are taken in pairs).
//  - kQ8K:   k / 256 ActQ8K blocks (for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K weights).
//  - kI8Row: the whole row as int8 with one scale (dynamic per-token W8A8, for I8 weights): an
//            ActI8Row header, then q[i8_row_padded(k)] (the pad is zeros); d = amax / 127 (1 when
//            amax = 0), q = clamp(round_half_even(x / d), -127, 127), exactly quant::quantize_int8_rows.
// Quantization (like ggml quantize_row_q8_0 / q8_K): amax = max |x| over the block,
// d = amax / 127, q = round_half_even(x * (1 / d)) (q = 0 when d = 0), so |q| <= 127.
//
// Arithmetic contract (what the tests tie together): for every weight block the integer dot
// product of the quantized values is exact (the same integer in every ISA); it is then scaled in
// fp32 (d_w * d_x) and accumulated. ISAs differ only in the order of the fp32 accumulation, so
// their results agree with the ref kernel to within 1e-5 of sum |w_i x_i| (the test bound).
// Weight block layouts: GGML ggml-common.h block_q4_0 ... block_q6_k, block_mxfp4, and kiln's
// NVFP4 block (core/dtype.h), as kernels/ref/dequant.cc. E2M1 weights enter the integer dot as their
// doubled values (exact int8), and the block term is scaled by d_w * (d_x / 2). FP8 weights are
// decoded exactly to f32 and the products summed in fp32 per block, then scaled by the block scale
// (kernels/cpu/simd_fp8_kernels.h); the same 1e-5 bound holds. BF16 weights times bf16 activations:
// every product exact in fp32, summed in fp32 (the ref kernel in double); the same bound.
// I8 weights (W8A8 per output channel): plain int8 rows, whose per-row scale the caller applies
// (ops::Linear); y = d_x * float(the exact int32 dot of the whole row), the same bits on every ISA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace kiln::kernels::cpu {

enum class Isa { kRef, kAvx2, kAvx512, kAvx512Vnni };

const char* isa_name(Isa isa);  // "ref", "avx2", "avx512", "avx512-vnni"
std::optional<Isa> parse_isa(std::string_view name);
// True when this CPU (and OS) can run code of `isa`. kRef always.
bool isa_supported(Isa isa);
// The best ISA this CPU supports among those this build has kernels for.
Isa best_isa();

// Activation block for the legacy 32-element weight formats. x[i] ~= d * q[i]; s = d * sum(q)
// (lets a weight format with a min, x = d_w * q_w + m_w, add m_w * s per block).
struct ActQ8 {
    float d;
    float s;
    int8_t q[32];
};
static_assert(sizeof(ActQ8) == 40);

// Activation block for the K-quants (256 elements). x[i] ~= d * q[i];
// bsums[j] = sum(q[16 j .. 16 j + 15]) (for the mins of Q2_K/Q4_K/Q5_K and the offsets of Q3_K
// (-4) and Q6_K (-32), applied in integers).
struct ActQ8K {
    float d;
    int16_t bsums[16];
    int8_t q[256];
};
static_assert(sizeof(ActQ8K) == 292);

// Header of a kI8Row activation row (per-token INT8): x[i] ~= d * q[i]; sum = sum(q) (kernels that
// feed vpdpbusd the weights + 128 subtract 128 * sum).
struct ActI8Row {
    float d;
    int32_t sum;
};
static_assert(sizeof(ActI8Row) == 8);
// q elements stored per kI8Row row: k rounded up to a multiple of 32.
inline constexpr int64_t i8_row_padded(int64_t k) {
    return (k + 31) / 32 * 32;
}
// The longest row the I8 kernels take: their int32 sums (with the +128 weight offset of vpdpbusd)
// stay exact up to k * 255 * 127 < 2^31. Longer rows take the f32 reference path (ops::make_linear).
inline constexpr int64_t kI8MaxK = 65536;

enum class ActFormat { kF32, kQ8, kQ8K, kBF16, kI8Row };
inline constexpr int kNumActFormats = 5;

struct MatmulKernel {
    ActFormat act;
    // Bytes of one activation row of k elements (k a multiple of the weight block size).
    size_t (*act_row_bytes)(int64_t k);
    // x [k] -> dst [act_row_bytes(k)]. dst needs no alignment.
    void (*quantize_row)(const float* x, void* dst, int64_t k);
    // y[t * ldy + r] = dot(weight row r, activation row t) for t in [0, n), r in [r0, r1).
    // w: the weight matrix, row r at w + r * w_row_bytes; act: n rows, row t at act + t * act_row_bytes.
    // Strides may exceed the dense row sizes (padding). k: elements per row (a multiple of the weight
    // block size). Pointers need no alignment. Only y[t * ldy + r] for r in [r0, r1) is written, so
    // threads given disjoint row ranges may share y.
    void (*gemm)(const void* w, size_t w_row_bytes, const void* act, size_t act_row_bytes, int64_t n, int64_t k,
                 float* y, int64_t ldy, int64_t r0, int64_t r1);
};

// Weights repacked at load for the legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; SIMD ISAs only):
// rows in groups of 8, and per group and 32-element block {fp16 d[8]; fp16 m[8] (Q4_1, Q5_1 only);
// the 8 rows' payloads (the ggml block without its fp16 fields: qs, or qh then qs)}; a group's blocks
// contiguous, groups in row order; the last group's missing rows repeat its last row. The same bytes
// as the ggml layout (8 blocks per group-block); what it saves is the 8 scalar inserts that gather
// the 8 rows' scales per block, and one stream per 8 rows instead of 8. Same arithmetic as
// MatmulKernel::gemm on the unpacked rows, so the results are bit-identical. At kAvx512Vnni, Q8_0,
// MXFP4 and NVFP4 use that level's own layout (groups of 16 rows, 4 elements of the 16 rows per
// 512-bit vpdpbusd, kernels/cpu/simd_vnni_kernels.h; r0 a multiple of 16) and Q4_0 and Q4_1 a 32-row
// one (rows i and i + 16 share each byte, kernels/cpu/simd_vnni_q4.h; r0 a multiple of 32), the same
// bytes padded to 16 or 32 rows and the same bit-identity; I8 rows are packed at
// kAvx512Vnni only (kernels/cpu/simd_i8_kernels.h: w + 128, 4 elements x 8 rows per vector; r0 a
// multiple of 8 as well); Q4_K, Q5_K and Q6_K in 16-row groups at kAvx512Vnni only
// (kernels/cpu/simd_vnni_kquant.h: within rounding of the row kernels, not their bits). F32, F16,
// E4M3_B32 and MXFP8 rows (and BF16 at kAvx512Vnni) are packed
// at the AVX-512 levels in 16-row k-major panels for an outer-product GEMM
// (kernels/cpu/simd_float_packed.h: r0 a multiple of 16; batch invariant, but another summation
// order than the row kernel, so not its bits). A packed buffer is only valid for the ISA whose
// kernel packed it.
struct PackedMatmulKernel {
    size_t (*packed_bytes)(int64_t rows, int64_t k);
    // w: rows x k in the ggml layout (row stride w_row_bytes) -> dst [packed_bytes(rows, k)].
    void (*pack)(const void* w, size_t w_row_bytes, int64_t rows, int64_t k, void* dst);
    // As MatmulKernel::gemm, over the packed matrix; r0 must be a multiple of 8 (16 for the
    // avx512-vnni 16-row groups and the float panels, 32 for its Q4_0 / Q4_1 groups; ops::linear
    // starts slices at multiples of 32).
    void (*gemm)(const void* packed, const void* act, size_t act_row_bytes, int64_t n, int64_t k, float* y,
                 int64_t ldy, int64_t r0, int64_t r1);
    const char* layout = "";  // the packed layout in a few words, for kiln inspect
};

// The packed kernel for `weight_type` at `isa` (same activations as find_matmul_kernel's); nullptr
// when there is none (kRef never packs). Does not check isa_supported.
const PackedMatmulKernel* find_packed_matmul_kernel(core::DType weight_type, Isa isa);

// Kernel for `weight_type` compiled for `isa`; nullptr when this build has none (or the type is
// not supported). Does not check isa_supported: calling an unsupported ISA's kernel is SIGILL.
const MatmulKernel* find_matmul_kernel(core::DType weight_type, Isa isa);

// find_matmul_kernel at best_isa(), falling back to lower ISAs and finally kRef; nullptr only when
// no ISA handles weight_type.
const MatmulKernel* best_matmul_kernel(core::DType weight_type);

}  // namespace kiln::kernels::cpu
