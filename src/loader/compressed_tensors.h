// Quantized checkpoints in the compressed-tensors layout (vllm-project/compressed-tensors, what
// vLLM loads; facts and sources in docs/quantization.md): `kiln quantize` writes it and kiln loads it
// back. Linear weights only (q/k/v/o, gate/up/down); everything else stays f32.
//
// Per Linear `M` (HF module name), by scheme (format string in config.json). Scales ("weight_scale")
// are f32 as kiln writes them, or bf16 / f16 as llmcompressor writes them (the model's dtype).
//   int8       int-quantized          M.weight I8 [out,in], M.weight_scale [out,1] (or [1]: one per
//                                      tensor); activations int8 per token, dynamic
//   w4-gN      pack-quantized         M.weight_packed I32 [out, ceil(in*bits/32)]: element i of a row
//   (wB-gN,                            at bit i*bits, densely (fields may straddle two words), stored
//    wB-channel)                       as value + 2^(bits-1); M.weight_scale [out, groups] (groups =
//                                      ceil(in/N), 1 per channel), M.weight_shape I64 [2]; with zero
//                                      points also M.weight_zero_point I32 [ceil(out*bits/32), groups]
//                                      (zp + 2^(bits-1), packed along the output dim); w = (q - zp) *
//                                      scale. GPTQ act-order ("actorder": "group") adds
//                                      M.weight_g_idx I32 [in]: the group of each column. kiln writes
//                                      bits = 4 with N = 32, 64, 128; it reads bits 2..8, any N.
//   fp8        float-quantized        M.weight F8_E4M3 [out,in], M.weight_scale [out,1] (or [1])
//   fp8-block  float-quantized        M.weight_scale [ceil(out/128), ceil(in/128)]
//   mxfp8      mxfp8-quantized        M.weight F8_E4M3, M.weight_scale U8 (E8M0) [out, ceil(in/32)]
//   mxfp4      mxfp4-pack-quantized   M.weight_packed U8 [out,ceil(in/2)] (element 2i low nibble),
//                                      M.weight_scale U8 (E8M0) [out, ceil(in/32)]
//   nvfp4      nvfp4-pack-quantized   M.weight_packed U8, M.weight_scale F8_E4M3 [out, ceil(in/16)],
//                                      M.weight_global_scale F32 [1]; w = fp4 * scale / global
// Activation quantization in the config (dynamic per token or group, or static scales calibrated
// into M.input_scale / M.input_global_scale) is accepted, but kiln quantizes activations its own
// way at run time (dynamic, per token), so input scales are not used: a static-scale checkpoint
// runs at least as accurately as its scales would. Checkpoints whose weights need more than their
// parts (transform_config rotations, sparsity compression) are refused by name.
// Loading: int8 -> I8 rows with their f32 row scales (TensorRef::row_scale; the per-token W8A8
// kernels, any `in`); 4-bit packed ints become GGML blocks that kiln's int8 kernels run (symmetric
// -> Q4_0, with zero points -> Q4_1; fp16-rounded scales) and symmetric 8-bit ones I8 rows (per
// channel) or Q8_0 (groups), when `in` and the group are whole 32-element blocks and the groups
// are contiguous; mxfp4 -> kMxfp4 (ggml block_mxfp4, exact) and nvfp4 -> kNvfp4 (fp16-rounded
// folded scale) for the FP4 kernels when `in` is a multiple of 32 (quant/fp4_blocks.h); fp8 /
// fp8-block -> kE4m3B32 and mxfp8 -> kMxfp8 for the FP8 kernels, exact (quant/fp8_blocks.h);
// everything else (other bit widths, act-order groups, other row lengths) is dequantized to F32
// at load (exact). E4M3 NaN codes in FP8 weights are rejected (kCorrupt).
// Invariant: reading never trusts the file: every part's dtype and shape is checked before use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/safetensors.h"
#include "loader/checkpoint.h"
#include "quant/int_quant.h"

namespace kiln::loader {

// kAwq, kGptq: AutoAWQ's GEMM layout and GPTQ's (awq_gptq_read.cc), read only.
enum class QuantFormat { kInt8, kPackedInt, kFp8, kFp8Block, kMxfp8, kMxfp4, kNvfp4, kAwq, kGptq };

struct QuantScheme {
    QuantFormat format = QuantFormat::kInt8;
    int64_t group_size = 0;      // kPackedInt: the group length (kiln writes 32, 64, 128); 0: per channel
    bool zero_point = false;     // kPackedInt: asymmetric (zero points stored)
    int bits = 4;                // kPackedInt: 2..8 (kiln writes 4)
    bool tensor_scale = false;   // kInt8 / kFp8: one weight scale for the whole matrix
    bool act_order = false;      // kPackedInt: columns grouped by weight_g_idx (GPTQ "group" actorder)
    bool static_inputs = false;  // the checkpoint calibrated static activation scales (kiln ignores them)
    bool gptq_v2 = false;        // kGptq: zeros stored as they are (GPTQModel's gptq_v2), not zero - 1
    // kNvfp4 as NVIDIA ModelOpt exports it: codes in M.weight (not weight_packed), the tensor scale
    // itself in M.weight_scale_2 F32 [] (not its inverse in weight_global_scale).
    bool modelopt = false;
    std::string name() const;    // "int8", "w4-g128", "w4-g128-zp", "w8-channel", "fp8", "fp8-tensor", ...
};

// "int8", "w4-g32|64|128", "fp8", "fp8-block", "mxfp8", "mxfp4", "nvfp4"; kInvalidArgument otherwise.
core::Result<QuantScheme> parse_quant_scheme(std::string_view name);

// The config.json "quantization_config" object (JSON text); `ignore`: HF module names kept in f32.
std::string quantization_config_json(const QuantScheme& scheme, const std::vector<std::string>& ignore);

// Appends the tensors of Linear `module` (weight w [rows = out, cols = in], f32, HF row order).
core::Status compress_weight(const QuantScheme& scheme, const std::string& module, std::span<const float> w,
                             int64_t rows, int64_t cols, std::vector<formats::SafetensorsTensorIn>* out,
                             std::vector<std::shared_ptr<const void>>* owners);

// Appends the tensors of Linear `module` already quantized to INT4 (pack-quantized; zero points
// with kAsymmetric), e.g. by GPTQ (quant/gptq.h).
core::Status write_int4_weight(const quant::Int4Matrix& q, const std::string& module,
                               std::vector<formats::SafetensorsTensorIn>* out,
                               std::vector<std::shared_ptr<const void>>* owners);

// ---- loading ----
struct CompressedConfig {
    QuantScheme scheme;
    std::vector<std::string> ignore;
};
// nullopt when config.json has no quantization_config (nor an hf_quant_config.json from ModelOpt
// beside it); kUnsupported, naming the scheme, for other quant methods and schemes kiln does not load
// (several config groups, asymmetric INT8, ModelOpt algorithms other than FP8 and NVFP4, ...).
// NVIDIA ModelOpt ("quant_method": "modelopt", or hf_quant_config.json): quant_algo "FP8" is
// M.weight F8_E4M3 with M.weight_scale F32 [] (kFp8, tensor_scale), "NVFP4" is M.weight U8
// [out, in/2] (element 2i low nibble), M.weight_scale F8_E4M3 [out, in/16], M.weight_scale_2 F32 []
// (w = fp4 * scale * scale_2; kNvfp4, modelopt). M.input_scale (static activation scale) and the
// KV cache's k_proj.k_scale / v_proj.v_scale are read past: kiln scales activations and K/V per
// token at run time.
core::Result<std::optional<CompressedConfig>> read_quantization_config(const std::string& config_json_path);

// AutoAWQ ("quant_method": "awq", GEMM layout) and GPTQ ("gptq") quantization_config objects (JSON
// text) as a CompressedConfig; kUnsupported naming what is not read (other AWQ versions, Marlin, 2/3 bits).
core::Result<CompressedConfig> awq_gptq_config(const std::string& quant_config_json);

// One safetensors tensor: its header entry and bytes.
struct TensorPart {
    core::DType dtype = core::DType::kF32;
    std::vector<uint64_t> shape;
    const uint8_t* data = nullptr;
    uint64_t num_bytes = 0;
};
// AutoAWQ's / GPTQ's parts of `module` ("qweight", "qzeros", "scales", "g_idx") as a runtime weight.
core::Result<TensorRef> decompress_awq_gptq(const CompressedConfig& config, const std::string& module,
                                            const std::map<std::string, TensorPart>& parts,
                                            std::vector<std::shared_ptr<const void>>* owners);
// Splits "M.weight_scale" into ("M", "weight_scale") for the part names this layout uses (and
// AutoAWQ's / GPTQ's "M.qweight", "M.qzeros", "M.scales", "M.g_idx"); nullopt
// for any other name (plain tensors such as norms or biases, and M.weight).
std::optional<std::pair<std::string, std::string>> split_quant_part(const std::string& name);
// The runtime weight of `module` from its parts ("weight", "weight_packed", "weight_scale", ...),
// named module + ".weight". kCorrupt for missing parts or wrong dtypes/shapes.
core::Result<TensorRef> decompress_weight(const CompressedConfig& config, const std::string& module,
                                          const std::map<std::string, TensorPart>& parts,
                                          std::vector<std::shared_ptr<const void>>* owners);

}  // namespace kiln::loader
