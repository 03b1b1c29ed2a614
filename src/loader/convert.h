// Checkpoint conversion: any loadable checkpoint (checkpoint.h) -> a single GGUF file or an HF
// safetensors directory (model.safetensors + config.json).
// - GGUF output: general.architecture, general.name, the {arch}.* hyper-parameters
//   (model_config.h), then the source's GGUF metadata (tokenizer.ggml.* ...) or a llama2.c
//   tokenizer given as --tokenizer. Tensors keep kiln's canonical names; Q/K rows go back to
//   rotate-half order for architectures whose GGUF files use it (qwen2/qwen3). Quantized tensors
//   are copied as they are.
// - safetensors output: HF tensor names, Q/K rows permuted for rotate-half RoPE, __metadata__
//   {"format": "pt", "kiln.gguf_tokenizer": <GGUF tokenizer metadata as JSON>} so that converting
//   back reproduces the GGUF tokenizer; config.json; tokenizer.json / tokenizer_config.json copied
//   from an HF source. Quantized tensors have no safetensors form: kUnsupported.
// - dtype: F32/F16/BF16 tensors of rank >= 2 become the requested float type; rank <= 1 tensors
//   (norm weights, biases) become F32. Other dtypes are left alone.
// The converted tensors are held in memory until the file is written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/safetensors.h"
#include "loader/checkpoint.h"

namespace kiln::loader {

struct ConvertOptions {
    std::string to;                    // "gguf" or "safetensors"
    std::optional<core::DType> dtype;  // kF32, kF16 or kBF16; nullopt keeps each tensor's dtype
    std::string tokenizer_path;        // llama2.c tokenizer .bin to embed (replaces tokenizer.* metadata)
    bool progress = false;             // per-tensor progress lines on stderr
    // > 0: keep only the first num_layers layers (blk.0 .. blk.N-1 and every non-layer tensor), the
    // config saying so: a small model with real trained weights for tests (must be below the
    // source's layer count).
    int64_t num_layers = 0;
    // Quantized tensors are written dequantized: as `dtype` (f32 when unset), norms and biases f32.
    bool dequantize = false;
};

// kInvalidArgument unless `to` is gguf or safetensors and `dtype` (if set) is f32, f16 or bf16.
// convert_checkpoint checks this first; the CLI calls it to tell usage errors apart.
core::Status check_convert_options(const ConvertOptions& options);
core::Status convert_checkpoint(const std::string& in, const std::string& out, const ConvertOptions& options);

core::Status write_gguf_checkpoint(const Checkpoint& checkpoint, const std::string& path,
                                   const ConvertOptions& options);
// What kiln quantize adds to an HF write: `transform` sees each tensor as it will be written (HF
// name, Q/K rows in HF order, dtype converted) and may append replacement tensors to *out (buffers
// kept alive in *owners) and return true, or return false to write the tensor as it is.
// `quantization_config` (a JSON object, "" = none) is added to config.json under that key.
struct HfWriteExtras {
    std::function<core::Result<bool>(const formats::SafetensorsTensorIn& t,
                                     std::vector<formats::SafetensorsTensorIn>* out,
                                     std::vector<std::shared_ptr<const void>>* owners)>
        transform;
    std::string quantization_config;
};

// `dir` is created if needed.
core::Status write_hf_checkpoint(const Checkpoint& checkpoint, const std::string& dir, const ConvertOptions& options,
                                 const HfWriteExtras* extras = nullptr);

// A llama2.c tokenizer.bin (int32 max_token_len, then per token: f32 score, int32 byte length,
// bytes) as GGUF tokenizer metadata: tokenizer.ggml.model "llama", tokens (spaces written as
// U+2581 and "\n<s>\n" / "\n</s>\n" as "<s>" / "</s>", as SentencePiece vocabularies spell them),
// scores, token_type (0 unknown=2, 1-2 control=3, <0xNN> byte=6, else normal=1), bos 1, eos 2,
// unk 0. `vocab_size` tokens are read (the file does not store the count).
core::Result<GgufMetadata> read_llama2c_tokenizer(const std::string& path, int64_t vocab_size);

// A copy of `checkpoint` whose float and block-quantized tensors are all F32 (dequantized with
// kernels::ref::dequantize_row; F32 tensors are shared, not copied): the reference weights of a
// quantized model, and what kiln quantize starts from. Other dtypes (integers) are kept.
core::Result<Checkpoint> to_f32_checkpoint(const Checkpoint& checkpoint);

// `t` converted element-wise to `to` (both in {F32, F16, BF16}) into a buffer appended to `owners`;
// fp16/bf16 rounding is round-to-nearest-even (core/numeric.h).
core::Result<TensorRef> cast_tensor(const TensorRef& t, core::DType to,
                                    std::vector<std::shared_ptr<const void>>* owners);

}  // namespace kiln::loader
