// Building blocks of `kiln synth`: model presets at the real shapes of public checkpoints, the
// tensor plan of a Llama-family GGUF, seeded random weights and a small ggml-layout quantizer.
// Weights are a deterministic function of (seed, tensor index, row index) only, so a file is the
// same whatever the thread count or chunking that produced it. Values are realistic in scale:
// matrices ~N(0, 0.02) (Irwin-Hall approximation), norm weights ~1 + N(0, 0.02), biases ~N(0, 0.02),
// so activations of the forward pass stay finite and non-trivial.
// Quantized layouts follow ggml (ggml-common.h) exactly as kernels/ref/dequant.cc decodes them;
// the rounding follows ggml-quants.c quantize_row_*_ref (mxfp4: OCP MX rounding of quant/mx.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "loader/metadata_json.h"
#include "loader/model_config.h"

namespace kiln::tools {

struct SynthPreset {
    const char* name;
    const char* arch;  // ModelConfig::arch
    int64_t vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim, max_seq_len;
    double rms_norm_eps, rope_theta;
    bool tie_word_embeddings;
    bool llama3_rope;  // Llama-3.1/3.2 RoPE scaling (factor 32, low 1, high 4, original 8192)
    const char* about;
    // Mixture of experts (0: dense): experts, experts per token, each expert's width, renormalized.
    int64_t num_experts = 0, num_experts_used = 0, expert_ffn = 0;
    bool norm_topk = false;
};

const std::vector<SynthPreset>& synth_presets();
const SynthPreset* find_synth_preset(const std::string& name);  // nullptr if unknown
std::string synth_preset_names();                               // "a, b, c" for messages

// The preset's config; num_layers > 0 overrides the layer count. dense (MoE presets): the same model
// with one dense MLP of num_experts_used * expert_ffn, the dense equivalent in active parameters
// (arch "qwen3" for Qwen3-MoE, "llama" for the others: gpt-oss's without sinks, biases, window or YaRN).
loader::ModelConfig synth_config(const SynthPreset& p, int64_t num_layers, bool dense = false);

// Weight dtypes `kiln synth` writes (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, mxfp4).
bool synth_dtype_supported(core::DType t);

enum class SynthKind { kMatrix, kNorm, kBias };
struct SynthTensor {
    std::string name;
    core::DType dtype;
    std::vector<uint64_t> shape;  // row-major: [rows, cols], [cols] or [experts, rows, cols]
    SynthKind kind;
    uint64_t rows() const {  // all but the last dimension
        uint64_t r = 1;
        for (size_t d = 0; d + 1 < shape.size(); ++d) r *= shape[d];
        return r;
    }
    uint64_t cols() const { return shape.back(); }
    uint64_t row_bytes() const;
    uint64_t num_bytes() const { return rows() * row_bytes(); }
};

// Every tensor of the architecture in file order: matrices in `weight_dtype`, norms, biases and the
// MoE router f32 (as llama.cpp's quantized files keep them); a layer's experts as GGUF's stacked
// [E, rows, cols] ffn_*_exps tensors.
std::vector<SynthTensor> synth_tensor_plan(const loader::ModelConfig& c, core::DType weight_dtype);

// Writes rows [row_begin, row_end) of tensor `tensor_idx` into dst (row_bytes each). `scratch`
// holds cols floats.
void synth_rows(const SynthTensor& t, uint64_t seed, uint64_t tensor_idx, uint64_t row_begin, uint64_t row_end,
                uint8_t* dst, float* scratch);

// fp32 row -> `type` bytes (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, mxfp4); n a multiple of the block size.
void quantize_row(core::DType type, const float* x, int64_t n, uint8_t* dst);

// A minimal SentencePiece ("llama") tokenizer of exactly vocab_size pieces (>= 259): <unk>, <s>,
// </s>, the 256 byte tokens <0x00>..<0xFF>, then synthetic pieces ("▁a", "a", "▁b", ..., "▁aa", ...)
// with descending scores. BOS 1, EOS 2, UNK 0.
loader::GgufMetadata synth_tokenizer(int64_t vocab_size);

}  // namespace kiln::tools
