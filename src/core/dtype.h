// DType: every element type kiln stores, plain and block-quantized. A block-quantized type packs
// `block_size` elements into `block_bytes` bytes (GGML layouts: ggml-common.h block_q4_0 etc.);
// plain types have block_size 1. Row lengths of quantized tensors must be multiples of block_size.
// FP4 types (E2M1 element codes, two per byte; docs/quantization.md "FP4 kernels"):
//  - kMxfp4: ggml's block_mxfp4 (GGML_TYPE_MXFP4 = 39): {uint8 e (E8M0); uint8 qs[16]}, element j in
//    the low nibble of qs[j], j + 16 in the high nibble; x = e2m1(code) * 2^(e - 127) (OCP MX v1.0).
//  - kNvfp4: kiln-internal (no GGUF id; ggml's later GGML_TYPE_NVFP4 = 40 is a different 64-element
//    block): {fp16 d; uint8 qs[8]}, element j in the low nibble of qs[j], j + 8 in the high nibble;
//    x = e2m1(code) * d, d = fp16(e4m3 block scale * fp32 tensor scale) folded at load.
// FP8 types (E4M3 element codes, OCP OFP8 "FN": no infinities, 0x7F/0xFF NaN, max 448; one per byte):
//  - kE4m3B32: kiln-internal: {fp32 d; uint8 qs[32]}, x = e4m3(qs[j]) * d. One block format for FP8
//    per-tensor, per-channel and 128x128-block scales (every 32-element block lies in one scale group).
//  - kMxfp8: kiln-internal (ggml has no MXFP8 type): {uint8 e (E8M0); uint8 qs[32]},
//    x = e4m3(qs[j]) * 2^(e - 127) (OCP MX v1.0 MXFP8 with E4M3 elements).
// Non-linear 4-bit types (ggml's I-quants; x = scale * kvalues_iq4nl[code], 16 int8 levels from -127
// to 113; kernels/block_layouts.h):
//  - kIq4Nl: block_iq4_nl (GGML_TYPE_IQ4_NL = 20): {fp16 d; uint8 qs[16]}, nibbles as Q4_0's.
//  - kIq4Xs: block_iq4_xs (GGML_TYPE_IQ4_XS = 23), 256 elements: {fp16 d; uint16 scales_h; uint8
//    scales_l[4]; uint8 qs[128]}; sub-block j of 32 has the 6-bit scale ls_j (low 4 bits from
//    scales_l, high 2 from scales_h) and scale d * (ls_j - 32); its nibbles are qs[16j .. 16j + 15].
// Ternary types (ggml's TQ1_0 / TQ2_0, BitNet b1.58 weights: x = d * t, t in {-1, 0, 1}, 256 elements,
// one fp16 d at the end; kernels/block_layouts.h):
//  - kTq1_0 (GGML_TYPE_TQ1_0 = 34): {uint8 qs[48]; uint8 qh[4]; fp16 d}, five trits per byte (base 3).
//  - kTq2_0 (GGML_TYPE_TQ2_0 = 35): {uint8 qs[64]; fp16 d}, four 2-bit codes (t + 1) per byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::core {

enum class DType : uint8_t {
    kF32, kF16, kBF16, kF64, kI8, kU8, kI16, kI32, kI64, kBool, kF8E4M3, kF8E5M2,
    kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ8_1, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kQ8_K,
    kMxfp4, kNvfp4, kE4m3B32, kMxfp8, kIq4Nl, kIq4Xs, kTq1_0, kTq2_0,
};

struct DTypeInfo {
    std::string_view name;  // "f32", "q4_k", ...
    uint32_t block_size;    // elements per block
    uint32_t block_bytes;   // bytes per block
    bool is_float;          // plain floating point (convertible element-wise)
    bool is_quantized;      // block-quantized
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

// Bytes for `num_elements` of `t`; nullopt if not a whole number of blocks or on overflow.
std::optional<uint64_t> dtype_bytes(DType t, uint64_t num_elements);

}  // namespace kiln::core
