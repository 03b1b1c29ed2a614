// The tensors of a Llama-family checkpoint in kiln's canonical (GGUF) names, written down once: which
// exist for a ModelConfig, their shapes and whether each is a weight matrix or a vector (norm weight,
// bias). check_checkpoint_tensors checks a checkpoint against this list; the CPU model
// (model/cpu_model.cc) and the GPU model (model/cuda/cuda_model_load.cc) look their weights up through
// it, so a tensor is named in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loader/model_config.h"

namespace kiln::loader {

// One decoder layer's tensors. kQBias..kVBias exist with attention_bias, kOBias with
// has_output_bias(), kQNorm / kKNorm with qk_norm, kPostAttnNorm / kPostFfnNorm with sandwich_norms;
// the others always.
enum class LayerTensor {
    kAttnNorm, kQ, kK, kV, kO, kFfnNorm, kGate, kUp, kDown,  // every layer
    kQBias, kKBias, kVBias, kOBias, kQNorm, kKNorm,          // per family
    kPostAttnNorm, kPostFfnNorm,                             // sandwich_norms (Gemma 3)
};

struct TensorSpec {
    std::string name;
    std::vector<uint64_t> shape;  // [rows, cols] for a matrix, [n] for a vector
    bool matrix = false;
};

// "blk.<layer>.attn_q.weight" and so on.
std::string layer_tensor_name(int64_t layer, LayerTensor t);
// Whether layer tensor t exists for config c, and its shape.
bool layer_tensor_present(const ModelConfig& c, LayerTensor t);
TensorSpec layer_tensor(const ModelConfig& c, int64_t layer, LayerTensor t);
// Every tensor a checkpoint of config c holds, in order: token_embd, output_norm, output (untied
// only), then each layer's present tensors in LayerTensor order.
std::vector<TensorSpec> checkpoint_tensors(const ModelConfig& c);

}  // namespace kiln::loader
