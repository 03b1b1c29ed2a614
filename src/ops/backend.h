// The ops a transformer step is made of, as one interface every device implements: the model's step
// (model/transformer.h) is written once over ops::Backend and runs unchanged on the CPU
// (ops/cpu_backend.h) and on a CUDA device (model/cuda: CudaModel's backend). The model's
// weights and activations live on the backend's device; a Backend's methods take pointers into that
// device's memory and enqueue (CUDA) or run (CPU) the op.
//
// A backend is stateful per step: its runner sets the step's batch (tokens, positions, K/V slots,
// block tables, the rows that want logits) before calling the step, so ops that need them (embed,
// the K/V write, attention, the logit-row gather) take only the layer index.
// Fusions are ops of their own (the residual add with the next norm, the gated activation with
// the gate/up product, RoPE with the K/V write).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"

namespace kiln::ops {

// A weight matrix [rows, cols] as a backend stores it (repacked, fused, uploaded); the backend that
// made it is the only one that reads it.
class Weight {
public:
    Weight() = default;
    Weight(const Weight&) = default;
    Weight& operator=(const Weight&) = default;
    virtual ~Weight() = default;
    int64_t rows = 0, cols = 0;
};

// The activation of a gated MLP: act = f(gate) * up.
enum class GatedAct {
    kSilu,      // SwiGLU: silu(g) = g / (1 + e^-g)
    kGeluTanh,  // GeGLU (Gemma): gelu(g) = g / 2 * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 g^3)))
    // gpt-oss's clamped SwiGLU (MoE experts only, MoeParams' alpha and limit): g = min(g, limit),
    // u = clamp(u, -limit, limit), act = (u + 1) * g * sigmoid(alpha * g).
    kSwigluClamped,
};

// The K/V write of one layer: qkv [T, Q + 2 KV] (biases already added) is split into q (to q_out,
// [T, Q]) and k, v (to the layer's cache slots of the step's tokens), with the per-head q/k RMSNorm
// (when q_norm / k_norm are set) and RoPE at the step's positions applied to q and k.
struct QkvRope {
    int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    const float* q_norm = nullptr;  // [head_dim] or null ([Q] with norm_full)
    const float* k_norm = nullptr;  // [head_dim] or null ([KV] with norm_full)
    bool norm_full = false;         // the norms span a token's whole q / k (OLMoE), not each head
    float eps = 1e-6f;              // of the q/k norms
    const double* inv_freq = nullptr;  // [head_dim / 2] RoPE frequencies (kernels::ref::rope_inv_freqs)
    const double* inv_freq_long = nullptr;  // or null: the frequencies of positions >= long_from (LongRoPE)
    int64_t long_from = 0;
    float q_scale = 1.0f;              // q is multiplied by it after RoPE (an attention scale other than 1/sqrt(head_dim))
};

// The attention of one layer over the step's sequences (their K/V from the backend's cache).
struct AttentionParams {
    int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int64_t window = 0;    // sliding window (pos - window < j <= pos); 0 = full causal
    float softcap = 0.0f;  // scores soft-capped: cap * tanh(s / cap) (Gemma 2); 0 = none
    const float* sinks = nullptr;  // [num_heads]: a per-head logit in each softmax's denominator (gpt-oss)
};

// A mixture-of-experts MLP's weights as the backend stores them (formats/hyper_params.h says what
// the block computes).
struct MoeWeights {
    const Weight* router = nullptr;               // [E, H]: the router's logits
    const float* router_bias = nullptr;           // [E] or null (gpt-oss)
    // gpt-oss: each expert's biases (else empty): gate_up's [2 F] in the weight's output order, down's [H].
    std::span<const float* const> gate_up_bias, down_bias;
    std::span<const Weight* const> gate_up;       // E weights [2 F, H]: gate and up (in the backend's order)
    std::span<const Weight* const> down;          // E weights [H, F]
    const Weight* shared_gate_up = nullptr;       // [2 S, H], or null: no shared expert
    const Weight* shared_down = nullptr;          // [H, S]
    const Weight* shared_gate = nullptr;          // [1, H]: the shared expert's output times sigmoid(x . it)
};

// Calibration's view of an MoE block (host backends only): called with each expert's input rows,
// those routed to it in row order (down: its activations), expert -1 the shared expert's down input.
// x [rows, cols] is valid only during the call.
using MoeInputObserver = std::function<void(int64_t expert, bool down, const float* x, int64_t rows, int64_t cols)>;

struct MoeParams {
    int64_t top_k = 0;        // experts per token
    bool norm_topk = false;   // the chosen experts' weights renormalized to sum 1
    GatedAct act = GatedAct::kSilu;
    float alpha = 1.702f, limit = 7.0f;  // kSwigluClamped's
    const MoeInputObserver* observe = nullptr;  // set: called with the experts' inputs
};

// Expert parallelism's view of a mixture-of-experts MLP (host memory; model/transformer.cc moves the
// slots between ranks): every row's chosen experts and weights, and the experts' outputs per slot.
struct MoeSlots {
    std::vector<int32_t> ids;    // [rows, top_k] each row's experts, as moe_mlp routes them
    std::vector<float> weights;  // [rows, top_k] their weights
    std::vector<float> y;        // [rows * top_k, H]: slot r * top_k + j = expert ids[r, j]'s output for row r
};

class Backend {
public:
    virtual ~Backend() = default;

    // x [T, table.cols] = the table's rows of the step's tokens, times scale. The table holds the
    // rows of token ids [first_id, first_id + table.rows) (a vocabulary-parallel share; 0 and the
    // whole table otherwise); a token outside them gets a row of zeros.
    virtual core::Status embed(const Weight& table, float scale, float* x, int64_t first_id) = 0;
    // Row by row over [rows, n]: x += add (when add is set), then y = rmsnorm(x) * weight. `next` is
    // the weight that reads y next (or null): a backend may write y in the form that weight's
    // product wants (CUDA: rounded to its 16-bit type), so y is then only for next's linear.
    virtual core::Status add_rmsnorm(float* x, const float* add, const float* weight, float* y, int64_t rows,
                                     int64_t n, float eps, const Weight* next) = 0;
    // out [rows, w.rows] = in [rows, w.cols] @ W^T (+ bias [w.rows] when set).
    virtual core::Status linear(const Weight& w, const float* in, int64_t rows, const float* bias, float* out) = 0;
    // See QkvRope; T = the step's tokens.
    virtual core::Status qkv_rope_kv_write(int64_t layer, float* qkv, float* q_out, const QkvRope& p) = 0;
    // out [T, num_heads * head_dim] = causal attention of q [T, num_heads * head_dim] over each
    // sequence's cached keys and values of `layer`.
    virtual core::Status attention(int64_t layer, const float* q, float* out, const AttentionParams& p) = 0;
    // The gate and up products of a gated MLP and its activation: gate_up_out [rows, w.rows] holds
    // both products (in the backend's order), act [rows, w.rows / 2] = f(gate) * up. `next` as for
    // add_rmsnorm (act is then only for next's linear).
    virtual core::Status gated_mlp_up(const Weight& gate_up, const float* in, int64_t rows, GatedAct f,
                                      float* gate_up_out, float* act, const Weight* next) = 0;
    // The mixture-of-experts MLP: out [rows, H] = sum over the top_k experts e the router picks for
    // row r (softmax over its E logits, the top_k largest, ties to the lower expert id) of
    // w_e * down_e(f(gate_e x) * up_e x), w the chosen softmax weights (renormalized with
    // norm_topk), plus sigmoid(x . shared_gate) * the shared expert's output when there is one.
    // Each row's result does not depend on the other rows: the experts' products are per row and a
    // row's weighted sum runs over its experts in ascending id, then the shared expert.
    virtual core::Status moe_mlp(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                                 float* out) = 0;
    // moe_mlp in parts, for expert parallelism (host backends; others kUnsupported). moe_router: the
    // experts and weights of rows [first, first + count) of in (slots.ids / weights, grown to
    // first + count rows), as moe_mlp chooses them. moe_experts: with every row of in [rows, H]
    // routed in slots, run the experts this backend holds (w.gate_up[e] set; the other ranks' experts
    // are null) over the rows routed to them, into their slots (slots.y grown to rows; the other
    // experts' slots are left as they are). moe_combine: once every slot of rows [first, first +
    // count) holds its expert's output, out [count, H] = each of those rows' slots weighted and summed
    // in ascending expert id, plus the shared expert of in's rows [first, first + count): the bits
    // moe_mlp gives.
    virtual core::Status moe_router(const MoeWeights& w, const MoeParams& p, const float* in, int64_t first,
                                    int64_t count, MoeSlots& slots);
    virtual core::Status moe_experts(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                                     MoeSlots& slots);
    virtual core::Status moe_combine(const MoeWeights& w, const MoeParams& p, const float* in, int64_t first,
                                     int64_t count, const MoeSlots& slots, float* out);
    // out [num_logit_rows, n] = the rows of x [T, n] that want logits, in the step's order.
    virtual core::Status gather_logit_rows(const float* x, int64_t n, float* out) = 0;
    // x [n] = cap * tanh(x / cap) in place (Gemma 2's final logit soft-capping).
    virtual core::Status softcap(float* x, int64_t n, float cap) = 0;
};

}  // namespace kiln::ops
