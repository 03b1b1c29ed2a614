// Mapping between ggml tensor type ids (the `type` field of a GGUF tensor info) and core::DType.
// Ids follow enum ggml_type in ggml.h; only the types kiln can store are mapped, every other id
// (removed Q4_2/Q4_3, IQ*, TQ*, NVFP4 = 40, ...) yields nullopt so readers can report it as unsupported.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace kiln::formats {

// ggml type ids kiln understands (ggml.h enum ggml_type).
enum class GgmlType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ5_0 = 6,
    kQ5_1 = 7,
    kQ8_0 = 8,
    kQ8_1 = 9,
    kQ2_K = 10,
    kQ3_K = 11,
    kQ4_K = 12,
    kQ5_K = 13,
    kQ6_K = 14,
    kQ8_K = 15,
    kIq4Nl = 20,  // block_iq4_nl: fp16 d + 16 nibble bytes (non-linear levels), 32 elements
    kIq4Xs = 23,  // block_iq4_xs: 256 elements, 6-bit sub-block scales
    kI8 = 24,
    kI16 = 25,
    kI32 = 26,
    kI64 = 27,
    kF64 = 28,
    kBF16 = 30,
    kTq1_0 = 34,  // block_tq1_0: 256 ternary weights, five per byte in base 3, fp16 d
    kTq2_0 = 35,  // block_tq2_0: 256 ternary weights, four 2-bit codes per byte, fp16 d
    kMxfp4 = 39,  // block_mxfp4: E8M0 e + 16 nibble bytes, 32 elements
};

// nullopt for ids kiln does not support.
std::optional<core::DType> dtype_from_ggml(uint32_t ggml_type_id);
// nullopt for dtypes ggml has no id for (u8, bool, fp8, kiln's nvfp4).
std::optional<uint32_t> ggml_from_dtype(core::DType dtype);
// Human-readable name of any ggml id, including unsupported ones ("iq2_xxs", "unknown").
const char* ggml_type_name(uint32_t ggml_type_id);

}  // namespace kiln::formats
