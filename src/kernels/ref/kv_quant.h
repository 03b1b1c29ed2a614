// The KV cache's row formats (KvDtype in kernels/kernel_params.h), scalar: how a row of keys or values
// computed in f32 is stored, and what each stored element reads back as. Every backend stores with
// these rules (ops::CpuBackend calls kv_store_row; kernels/cuda/kv_write.cu repeats it in CUDA), and
// every attention kernel reads what kv_load gives.
// kI8 / kFp8, per KV head h of the row (head_dim elements x):
//   amax = max |x|; amax == 0: scale 0 and codes 0;
//   kI8:  scale = amax / 127, code = round_half_even(x / scale)   (in [-127, 127]);
//   kFp8: scale = amax / 448, code = e4m3(x / scale)              (core::f32_to_fp8_e4m3);
//   element = code * scale, one f32 rounding.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/kernel_params.h"

namespace kiln::kernels::ref {

inline constexpr float kKvI8Max = 127.0f, kKvFp8Max = 448.0f;

// "f32", "f16", "int8", "fp8" (also vLLM's spellings "fp8_e4m3" and "float16"); nullopt for others.
std::optional<KvDtype> parse_kv_dtype(std::string_view name);
const char* kv_dtype_name(KvDtype t);  // "f32", "f16", "int8", "fp8"
inline constexpr const char* kKvDtypeNames = "f32, f16, int8 or fp8";

// Stores x [num_kv_heads * head_dim] (one token) as a row of format t at row (kv_row_bytes bytes).
void kv_store_row(KvDtype t, const float* x, int64_t num_kv_heads, int64_t head_dim, void* row);
// Element d of head h of a stored row, as f32.
float kv_load(KvDtype t, const void* row, int64_t num_kv_heads, int64_t head_dim, int64_t h, int64_t d);

}  // namespace kiln::kernels::ref
