// The tensors of a Llama-family checkpoint in kiln's canonical (GGUF) names, written down once: which
// exist for a ModelConfig, their shapes and whether each is a weight matrix or a vector (norm weight,
// bias). check_checkpoint_tensors checks a checkpoint against this list; the CPU model
// (model/cpu_model.cc) and the GPU model (model/cuda/cuda_model_load.cc) look their weights up through
// it, so a tensor is named in one place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/model_config.h"

namespace kiln::loader {

// One decoder layer's tensors. kGate/kUp/kDown exist in dense models, kQBias..kVBias with
// attention_bias, kOBias with has_output_bias(), kQNorm / kKNorm with qk_norm ([head_dim], or
// [q_dim] / [kv_dim] with qk_norm_full), kPostAttnNorm / kPostFfnNorm with sandwich_norms; the
// mixture-of-experts ones with experts (kShared* with a shared expert); the others always.
// An expert's tensors are named per expert (blk.N.ffn_gate.E.weight, the names llama.cpp once wrote
// Mixtral with): GGUF's stacked blk.N.ffn_gate_exps.weight [E, F, H] is split into them on load
// (row views, no copy) and stacked again on write.
enum class LayerTensor {
    kAttnNorm, kQ, kK, kV, kO, kFfnNorm, kGate, kUp, kDown,  // every layer (kGate..kDown: dense only)
    kQBias, kKBias, kVBias, kOBias, kQNorm, kKNorm,          // per family
    kPostAttnNorm, kPostFfnNorm,                             // sandwich_norms (Gemma 3)
    kRouter,                                                 // ffn_gate_inp [E, H]: the router's logits
    kExpertGate, kExpertUp, kExpertDown,                     // per expert: [Fe, H], [Fe, H], [H, Fe]
    kSharedGate, kSharedUp, kSharedDown,                     // the shared expert: [S, H], [S, H], [H, S]
    kSharedRouter,                                           // ffn_gate_inp_shexp [H]: its sigmoid gate
    kAttnSinks,                                              // gpt-oss: attn_sinks [num_heads]
    kRouterBias,                                             // gpt-oss: ffn_gate_inp.bias [E]
    kExpertGateBias, kExpertUpBias, kExpertDownBias,         // gpt-oss, per expert: [Fe], [Fe], [H]
};

struct TensorSpec {
    std::string name;
    std::vector<uint64_t> shape;  // [rows, cols] for a matrix, [n] for a vector
    bool matrix = false;
};

// "blk.<layer>.attn_q.weight" and so on; `expert` picks the expert of kExpert* tensors.
std::string layer_tensor_name(int64_t layer, LayerTensor t, int64_t expert = 0);
// Whether t is one of the per-expert tensors (kExpertGate, kExpertUp, kExpertDown and their biases).
bool is_expert_tensor(LayerTensor t);
// A per-expert tensor's name taken apart: "blk.3.ffn_up.5.weight" -> stem "blk.3.ffn_up", expert 5,
// bias false. nullopt for any other name.
struct ExpertTensorName {
    std::string stem;
    int64_t expert = 0;
    bool bias = false;
};
std::optional<ExpertTensorName> parse_expert_tensor_name(const std::string& name);
// Whether layer tensor t exists for config c, and its shape.
bool layer_tensor_present(const ModelConfig& c, LayerTensor t);
TensorSpec layer_tensor(const ModelConfig& c, int64_t layer, LayerTensor t, int64_t expert = 0);
// Every tensor a checkpoint of config c holds, in order: token_embd, output_norm, output (untied
// only), then each layer's present tensors in LayerTensor order (a per-expert tensor for every
// expert in turn). A pipeline stage's config (ModelConfig::stage_begin) lists its own tensors only.
std::vector<TensorSpec> checkpoint_tensors(const ModelConfig& c);

}  // namespace kiln::loader
