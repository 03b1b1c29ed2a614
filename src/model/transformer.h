// The transformer step, written once: embedding, the layers (attention block, gated MLP), the final
// norm and the logits of the rows that want them, as calls of an ops::Backend. The CPU model
// (model/cpu_model.h) and the CUDA model (model/cuda) are runners around it: each holds its weights and
// activation buffers on its device, sets the step's batch on its backend and calls run_step.
// Calibration observes the projections' inputs through the hook (CPU runner).
//
// x = embed(tokens) (times sqrt(H) with scale_embeddings), then layer l (transformers
// modeling_llama / modeling_qwen3 / modeling_gemma3):
//   xn = rmsnorm(x += o_prev)           (o_prev: the previous layer's MLP output, none for layer 0)
//   q, k, v = split(xn @ Wqkv^T + bqkv); q, k = rope(q_norm(q)), rope(k_norm(k)); k, v -> cache
//   o = attention(q, cache) @ Wo^T + bo          (o = rmsnorm(o) with sandwich_norms)
//   xn = rmsnorm(x += o)
//   o = (f(xn @ Wgate^T) * (xn @ Wup^T)) @ Wdown^T   (f: SiLU, or GELU-tanh with gelu_mlp;
//                                                    o = rmsnorm(o) with sandwich_norms)
//     or, in a mixture-of-experts model, o = the weighted sum of such MLPs over the experts the
//     router picks for the token (ops::Backend::moe_mlp)
// then xn = rmsnorm(x += o) over the rows that want logits, logits = xn @ Wout^T (soft-capped with
// final_softcap; attention scores with attn_softcap).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "loader/model_config.h"
#include "ops/backend.h"

namespace kiln::model {

// One layer's weights on the backend's device; null when the model has none.
struct LayerWeights {
    const ops::Weight* qkv = nullptr;      // [Q + 2 KV, H]: q, k, v rows
    const ops::Weight* o = nullptr;        // [H, Q]
    const ops::Weight* gate_up = nullptr;  // [2 F, H]: gate and up (in the backend's order)
    const ops::Weight* down = nullptr;     // [H, F]
    const float* attn_norm = nullptr;      // [H]
    const float* ffn_norm = nullptr;       // [H]
    const float* bqkv = nullptr;           // [Q + 2 KV]
    const float* bo = nullptr;             // [H]
    const float* q_norm = nullptr;         // [head_dim] ([Q] with qk_norm_full)
    const float* k_norm = nullptr;         // [head_dim] ([KV] with qk_norm_full)
    bool qk_norm_full = false;             // the q/k norms span all heads of a token (OLMoE)
    const float* attn_sinks = nullptr;     // [num_heads] gpt-oss's attention sinks
    const ops::MoeWeights* moe = nullptr;  // set: the MLP is a mixture of experts (gate_up / down unused)
    const float* post_attn_norm = nullptr;  // [H] sandwich_norms: the attention output's norm
    const float* post_ffn_norm = nullptr;   // [H] sandwich_norms: the MLP output's norm
    const double* inv_freq = nullptr;      // [head_dim / 2] RoPE frequencies of this layer
    const double* inv_freq_long = nullptr;  // [head_dim / 2] LongRoPE: the table from position long_from on
    int64_t long_from = 0;
};

struct ModelWeights {
    const ops::Weight* embed = nullptr;    // [V, H] table
    const ops::Weight* lm_head = nullptr;  // [V, H]
    const float* output_norm = nullptr;    // [H]
    std::vector<LayerWeights> layers;
};

// The step's activation buffers on the backend's device, each for the step's T tokens.
struct StepBuffers {
    float* x = nullptr;        // [T, H] the residual stream
    float* xn = nullptr;       // [T, H]
    float* qkv = nullptr;      // [T, Q + 2 KV]
    float* q = nullptr;        // [T, Q]
    float* att = nullptr;      // [T, Q]
    float* o = nullptr;        // [T, H]
    float* gate_up = nullptr;  // [T, 2 F]
    float* act = nullptr;      // [T, F]
    float* logits = nullptr;   // [num_logits, V]
};

// The inputs of each layer's projections, for calibration (kiln quantize): kQkv is the input of
// q/k/v (the attention norm's output), kAttnOut of o_proj, kGateUp of gate/up (the MLP norm's
// output), kDown of down_proj (f(gate) * up). In a mixture-of-experts layer kGateUp is the router's
// and every expert's input (all tokens) and kDown is not observed (each expert has its own).
enum class LinearInput { kQkv, kAttnOut, kGateUp, kDown };
// x: [rows, cols] row-major in host memory, valid only during the call.
using LinearInputHook =
    std::function<void(int64_t layer, LinearInput which, std::span<const float> x, int64_t rows, int64_t cols)>;
// The inputs of a mixture-of-experts layer's experts: expert e's gate/up input (kGateUp) and down
// input (kDown) over the tokens routed to it, in row order; expert -1 is the shared expert (its
// down input only: its gate/up input is the layer's kGateUp).
using ExpertInputHook = std::function<void(int64_t layer, int64_t expert, LinearInput which, std::span<const float> x,
                                           int64_t rows, int64_t cols)>;

// Expert parallelism (loader/tensor_parallel.h): this rank holds experts [expert_begin[rank],
// expert_begin[rank + 1]) of each mixture-of-experts layer, and every rank holds every token (the
// attention's all-reduce leaves them so). Rank r owns tokens [T r / n, T (r + 1) / n): it routes them
// (ops::Backend::moe_router) and an all-gather gives every rank every token's choices; each rank runs
// its experts over the tokens routed to them (moe_experts); an all-to-all sends each expert output to
// its token's owner, which sums them in ascending expert id with the shared expert (moe_combine: the
// one-rank sum, bit for bit); an all-gather gives every rank every token's result. The buffers are
// the runner's, reused.
struct ExpertParallel {
    struct Route {
        int32_t id;
        float weight;
    };
    dist::Communicator* comm = nullptr;
    std::vector<int64_t> expert_begin;  // [ranks + 1]
    ops::MoeSlots slots;
    std::vector<Route> route_send, route_recv;
    std::vector<int64_t> count, taken;
    std::vector<float> send, recv, rows_send, rows_recv;
};

struct StepOptions {
    const LinearInputHook* hook = nullptr;  // set: called with each projection's input (host backends only)
    const ExpertInputHook* expert_hook = nullptr;  // set: called with the experts' inputs (host backends only)
    int64_t num_layers = -1;  // run only the first num_layers layers and no logits (calibration); -1: all
    // Calibration and pipeline stages, host backends only (num_layers set): start at layer
    // first_layer from the residual stream resid_in [T, H] entering it (null: from the embeddings,
    // first_layer 0), and, with resid_out, leave the stream after the last layer run (before any
    // final norm) there (it may be resid_in).
    int64_t first_layer = 0;
    const float* resid_in = nullptr;
    float* resid_out = nullptr;
    // Tensor parallelism (loader/tensor_parallel.h): the weights are this rank's slices, and the
    // outputs of attn_output and ffn_down (partial sums over the rank's heads / hidden units) are
    // summed across the group before they join the residual stream. Null: one rank.
    dist::Communicator* tp = nullptr;
    // Expert parallelism for the mixture-of-experts layers (host backends); null: every expert here.
    ExpertParallel* ep = nullptr;
};

// The attention scale query_pre_attn_scalar^-0.5 as a multiplier of q on top of the kernels'
// 1/sqrt(head_dim), times LongRoPE's or YaRN's attention factor squared (transformers scales cos and
// sin, i.e. q and k, by it); 1 when the model has none of them.
float attention_q_scale(const loader::ModelConfig& config);

// The blocks of a layer, for run_step and for whoever evaluates one block alone (the AWQ losses):
// Layer l's attention heads: b.att [T, Q] from b.xn [T, H]: the q/k/v products (+ biases), the q/k
// norms (eps) and RoPE (L.inv_freq) at the step's positions, the K/V write, causal attention (shape).
// q_scale multiplies q after RoPE (1: the usual 1/sqrt(head_dim) attention scale).
core::Status attention_heads(ops::Backend& backend, const LayerWeights& L, int64_t layer,
                             const ops::AttentionParams& shape, float eps, float q_scale, const StepBuffers& b,
                             int64_t num_tokens);
// The gated MLP's activations: b.act [T, F] = f(xn Wgate^T) * (xn Wup^T) from b.xn [T, H] (b.gate_up
// holds the products).
core::Status mlp_activations(ops::Backend& backend, const LayerWeights& L, ops::GatedAct f, const StepBuffers& b,
                             int64_t num_tokens);

// Runs the step for `num_tokens` tokens of the batch the backend was given; `num_logits` rows of
// logits (the backend's logit rows) into buffers.logits. With num_logits 0 no logits are made; the
// K/V of every layer run are written either way.
core::Status run_step(ops::Backend& backend, const loader::ModelConfig& config, const ModelWeights& weights,
                      const StepBuffers& buffers, int64_t num_tokens, int64_t num_logits,
                      const StepOptions& options = {});

}  // namespace kiln::model
