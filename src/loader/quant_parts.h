// Internal to src/loader: checked access to the stored parts of one quantized Linear (the
// safetensors tensors "M.weight_scale", "M.qweight", ...), shared by the compressed-tensors reader
// and the AutoAWQ / GPTQ one. Every accessor checks dtype and shape and names the tensor on failure
// (kCorrupt); nothing here trusts the file.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/checkpoint.h"
#include "loader/compressed_tensors.h"

namespace kiln::loader::quant_parts {

std::string shape_text(const std::vector<uint64_t>& shape);  // "[64,4]"
core::Result<const TensorPart*> find_part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                          const char* name);
core::Status wrong_part(const std::string& module, const char* name, const TensorPart& p, const std::string& want);
// The part `name` of `module`, of exactly this dtype and shape.
core::Result<const TensorPart*> part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                     const char* name, core::DType dtype, const std::vector<uint64_t>& shape);
// A float part (f32 as kiln writes it; bf16 or f16 as llmcompressor, AutoAWQ and GPTQ store scales)
// as f32, exactly. With `tensor`, any shape of one element, repeated to `shape`'s size.
core::Result<std::vector<float>> float_part(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                            const char* name, const std::vector<uint64_t>& shape, bool tensor = false);
// Field i of `bits` bits in int32 words packed densely (field i at bit i * bits, possibly straddling
// two words; compressed-tensors' pack_to_int32), as stored (unsigned). Word k is words[k * stride].
uint32_t packed_field(const int32_t* words, int64_t stride, int64_t i, int bits);

template <typename T>
std::vector<T> copy_of(const TensorPart& p) {
    std::vector<T> v(p.num_bytes / sizeof(T));
    std::memcpy(v.data(), p.data, v.size() * sizeof(T));
    return v;
}

// kCorrupt unless every scale is finite and > 0.
core::Status check_scales(const std::vector<float>& s, const std::string& module);
// kCorrupt naming the first E4M3 NaN code (0x7F / 0xFF) of a [*, cols] matrix.
core::Status check_e4m3_codes(const std::vector<uint8_t>& codes, int64_t cols, const std::string& module);
// Tensors that own their bytes (TensorRef::storage).
TensorRef own(std::string name, core::DType dtype, uint64_t rows, uint64_t cols, std::vector<uint8_t> bytes);
TensorRef own_f32(std::string name, uint64_t rows, uint64_t cols, const std::vector<float>& v);
// I8 rows with their row scales as stored (the W8A8 kernels, any row length); the values are
// q * scale, what weight_row decodes. The scales are kept alive through `owners`.
TensorRef int8_rows(std::string name, uint64_t rows, uint64_t cols, std::vector<uint8_t> q, std::vector<float> scales,
                    std::vector<std::shared_ptr<const void>>* owners);

// The column -> group map of a weight of `cols` columns in groups of `group` (part `name`, I32
// [cols], each value below ceil(cols / group)): empty when the part is absent (kCorrupt if
// `required`) or holds the contiguous order c / group.
core::Result<std::vector<int32_t>> group_index(const std::map<std::string, TensorPart>& parts, const std::string& module,
                                               const char* name, int64_t cols, int64_t group, bool required);
// A Linear stored as unsigned integer codes: w = (code - zero) * scale per (row, group). codes [rows,
// cols] of `bits` bits; zeros and scales [rows, groups]; g_idx [cols] or empty (contiguous groups of
// `group`). Becomes, with contiguous groups: 4-bit -> Q4_0 (every zero 8) or Q4_1 when the row and
// the group are whole 32-element blocks; 8-bit with every zero 128 -> I8 rows (one group per row, any
// row length) or Q8_0 (groups of 32k); otherwise f32, exact.
core::Result<TensorRef> int_weight(const std::string& name, int64_t rows, int64_t cols, int64_t group, int bits,
                                   const std::vector<uint8_t>& codes, const std::vector<int32_t>& zeros,
                                   std::vector<float> scales, const std::vector<int32_t>& g_idx,
                                   std::vector<std::shared_ptr<const void>>* owners);

}  // namespace kiln::loader::quant_parts
