// Matmul building blocks for ops::matmul: y = x @ W^T with W stored as rows of a plain or GGML
// block-quantized dtype, compiled once per ISA and picked at run time. A kernel is a plain struct of
// function pointers; the caller owns threading (it splits the weight rows [r0, r1) across threads;
// decode tiles are 8 rows for the legacy formats (lanes = rows), 4 for F32/F16/BF16 and 2 for
// K-quants, so splits at multiples of 8 avoid remainder tiles) and scratch (activation rows quantized by quantize_row once
// per token, shared by all threads).
// ISAs (and kAmx, below): kRef (kernels/ref/quant_matmul.cc, scalar oracle); kAvx2 (AVX2+FMA+F16C); kAvxVnni (the
// AVX2 bodies with AVX-VNNI: the u8 x s8 block dot is one 256-bit VEX vpdpbusd); kAvx512 (the
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
#include "kernels/kernel_params.h"

namespace kiln::kernels::cpu {

// Kernel levels. kAvxVnni is the AVX2 build with its u8 x s8 dots as one 256-bit VEX vpdpbusd
// (AVX-VNNI: CPUs that have it without AVX-512, e.g. Alder Lake; the same integers, so the same
// results as kAvx2). kAllIsas lists every level, weakest first.
// kAmx is kAvx512Vnni plus AMX tiles (Sapphire Rapids and later): its I8 and BF16 packed kernels
// multiply tiles (kernels/cpu/simd_amx_kernels.h), everything else is kAvx512Vnni's.
enum class Isa { kRef, kAvx2, kAvxVnni, kAvx512, kAvx512Vnni, kAmx };
inline constexpr Isa kAllIsas[] = {Isa::kRef, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAmx};

const char* isa_name(Isa isa);  // "ref", "avx2", "avx-vnni", "avx512", "avx512-vnni", "amx"
std::optional<Isa> parse_isa(std::string_view name);
// True when this CPU (and OS) can run code of `isa`. kRef always.
bool isa_supported(Isa isa);
// The best ISA this CPU supports among those this build has kernels for.
Isa best_isa();

// The packed kernel for `weight_type` at `isa` (same activations as find_matmul_kernel's); nullptr
// when there is none (kRef never packs). Does not check isa_supported.
const PackedMatmulKernel* find_packed_matmul_kernel(core::DType weight_type, Isa isa);

// For tests: the amx level's packed kernel for I8 or BF16 with its tile instructions emulated in
// scalar code (AmxEmulated, simd_amx_kernels.h), runnable wherever kAvx512Vnni is; nullptr for
// other types. The same layouts, blocking and epilogues as find_packed_matmul_kernel(t, kAmx).
const PackedMatmulKernel* amx_emulated_packed_kernel(core::DType weight_type);
// For tests: the check the amx level runs once on AMX hardware before isa_supported(kAmx) says yes
// (its I8 and BF16 kernels against avx512-vnni's on fixed data), through the emulated tiles.
bool amx_emulation_self_check();

// Kernel for `weight_type` compiled for `isa` (kRef: kernels/ref's scalar kernels); nullptr when
// this build has none (or the type is not supported). Does not check isa_supported: calling an
// unsupported ISA's kernel is SIGILL. Defined, with best_matmul_kernel, in kernels/select (the one
// place that sees both kernels/ref and kernels/cpu).
const MatmulKernel* find_matmul_kernel(core::DType weight_type, Isa isa);

// find_matmul_kernel at best_isa(), falling back to lower ISAs and finally kRef; nullptr only when
// no ISA handles weight_type.
const MatmulKernel* best_matmul_kernel(core::DType weight_type);

}  // namespace kiln::kernels::cpu
