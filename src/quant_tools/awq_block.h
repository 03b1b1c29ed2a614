// AWQ scale search with AutoAWQ's block-output losses (auto_scale in AutoAWQ measures the output of
// the module that holds the scaled Linears, not the Linears' own outputs): for gate/up, the output of
// the whole SwiGLU MLP down(silu(gate x) * up x); for q/k/v, the output of the whole attention block
// o_proj(attention(q, k, v)) with causal attention over each calibration sequence, RoPE at the true
// positions, the model's GQA, q/k/v biases and per-head q/k norms, and its sliding window. Only the
// searched weights are replaced by their scaled, INT4-quantized, dequantized versions W' =
// dequant(quant_int4(W diag(s))) diag(1/s); down and o_proj stay fp32. The candidates and the rule
// are those of quant/awq.h (awq_search_loss: plain RTN first, alpha = a / grid, first smallest error
// wins), so only the loss differs. Folding is as in quant/awq.h.
//
// The blocks run through the model's own step code (model/transformer.h: attention_heads for q/k/v
// with causal attention, RoPE, GQA, biases, q/k norms and window as the model has them;
// mlp_activations for gate/up) on an ops::CpuBackend with f32 weights and activations, so the loss
// measures what the model computes. Error = mean over the used tokens and the block's hidden outputs
// of (y - y')^2, y the block output with fp32 weights, y' with the quantized ones. Both go through
// the same code, so zero weight error gives exactly zero. The error of down / o is linear in the
// difference of their inputs and is computed as W_down (h - h') (no cancellation of two nearly equal
// outputs).
//
// Samples: the MLP uses min(n, max_samples) rows of x evenly strided (row i * n / m), as quant/awq.h.
// The attention block computes every row of the sequences it is given (so every query sees its true
// causal context; calibration.h keeps at most max_seq_tokens rows) and measures the output of
// m = min(T, max_samples) query rows, evenly strided over all T rows (row i * T / m).
// Cost per candidate: MLP m * 2 * hidden * inter multiply-adds (+ m * hidden * inter for the error);
// attention T * (q_dim + 2 * kv_dim) * hidden + T * mean context * 2 * q_dim (+ m * q_dim * hidden).
//
// Invariants: deterministic for any thread count (the ops split work by shape only; each sampled
// token's error is its own double, summed in order).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "loader/model_config.h"
#include "quant/awq.h"

namespace kiln::quant_tools {

// A SwiGLU MLP: gate and up are searched (quantized when their flag is set; a skipped one stays fp32
// in the loss), down is fp32.
struct AwqMlpBlock {
    std::span<const float> gate;  // [inter, hidden]
    std::span<const float> up;    // [inter, hidden]
    std::span<const float> down;  // [hidden, inter]
    int64_t hidden = 0, inter = 0;
    bool quantize_gate = true, quantize_up = true;
    bool gelu = false;  // GeGLU (Gemma: gelu_tanh(gate x) * up x) instead of SwiGLU
};

// An attention block: q/k/v are searched (quantized when their flag is set), o_proj is fp32. Q/K rows
// are in kiln's canonical interleaved-pair RoPE order (kernels/ref/transformer.h).
struct AwqAttnBlock {
    std::span<const float> q;               // [num_heads * head_dim, hidden]
    std::span<const float> k, v;            // [num_kv_heads * head_dim, hidden]
    std::span<const float> o;               // [hidden, num_heads * head_dim]
    std::span<const float> bq;              // empty or [num_heads * head_dim]
    std::span<const float> bk, bv;          // empty or [num_kv_heads * head_dim]
    std::span<const float> q_norm, k_norm;  // empty or [head_dim]: per-head RMSNorm before RoPE (Qwen3)
    int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int64_t window = 0;            // sliding window (pos - window < j <= pos); 0 = full causal
    float norm_eps = 1e-6f;        // of q_norm / k_norm
    std::vector<double> inv_freq;  // [head_dim / 2] RoPE frequencies (kernels::ref::rope_inv_freqs)
    float q_scale = 1.0f;          // q times this after RoPE (model/transformer.h: query_pre_attn_scalar)
    float softcap = 0.0f;          // attention-score soft-capping (Gemma 2); 0 = none
    bool quantize_q = true, quantize_k = true, quantize_v = true;
};

// The MLP output error for scales [hidden] on x [n, hidden] (min(n, max_samples) rows, evenly strided).
core::Result<double> awq_mlp_error(const AwqMlpBlock& block, std::span<const float> x, int64_t n,
                                   std::span<const float> scales, const quant::AwqOptions& options,
                                   core::ThreadPool* pool = nullptr);
// The scale search with that loss; x_mean = channel_mean_abs over all n rows of x, as awq_search.
core::Result<quant::AwqResult> awq_search_mlp(const AwqMlpBlock& block, std::span<const float> x, int64_t n,
                                              const quant::AwqOptions& options, core::ThreadPool* pool = nullptr);

// The attention block's output error for scales [hidden] on the sequences x [sum(seq_lens), hidden]
// (sequence after sequence, row p of a sequence at position p); min(T, max_samples) query rows.
core::Result<double> awq_attn_error(const AwqAttnBlock& block, std::span<const float> x,
                                    std::span<const int64_t> seq_lens, std::span<const float> scales,
                                    const quant::AwqOptions& options, core::ThreadPool* pool = nullptr);
// The scale search with that loss. x_mean [hidden] is the activation statistic the candidates come
// from (the caller's choice: usually channel_mean_abs of a sample of all calibration tokens).
core::Result<quant::AwqResult> awq_search_attn(const AwqAttnBlock& block, std::span<const float> x,
                                               std::span<const int64_t> seq_lens, std::span<const float> x_mean,
                                               const quant::AwqOptions& options, core::ThreadPool* pool = nullptr);

// The attention output (before o_proj) with the fp32 weights for every row of the sequences:
// [sum(seq_lens), num_heads * head_dim], as CpuModel's o_proj input (kAttnOut) for the same tokens.
core::Result<std::vector<float>> awq_attn_output(const AwqAttnBlock& block, std::span<const float> x,
                                                 std::span<const int64_t> seq_lens, core::ThreadPool* pool = nullptr);

// RoPE frequencies of a model as CpuModel uses them (theta, linear / llama3 scaling);
// kUnsupported for other scaling types.
core::Result<std::vector<double>> awq_rope_inv_freq(const loader::ModelConfig& config);

}  // namespace kiln::quant_tools
