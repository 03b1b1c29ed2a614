// CudaModel: the Llama-family forward pass (model/cpu_model.h's CpuModel, same architectures and
// arithmetic order) on one CUDA device, for issue "CUDA backend". Weights are uploaded once at
// create: bf16 and f16 matrices as stored (cuBLASLt GEMMs on tensor cores, f32 accumulation); Q8_0,
// Q4_0, Q4_1 and Q4_K / Q5_K / Q6_K blocks as stored (a dequantizing GEMV for decode steps, a
// dequantizing tensor-core GEMM with f16 activations for longer ones); every other type dequantized to f32 (an f32 GEMM
// without TF32: the CPU's f32 numerics, for the greedy comparisons with the CPU). Q/K/V and gate/up are each one
// stacked matrix. Activations are f32 in one arena allocated at create for the largest step (max_batch_tokens tokens,
// max_seqs sequences, max_logits rows of logits): a step allocates nothing on the device. The paged KV pool lives on
// the device
// ([num_blocks, block_size, num_kv_heads, head_dim] per layer for K and V, f16 by default), sized from the memory left
// after weights and arena under gpu_memory_utilization of the device's total. A step copies its indices to the device
// in one transfer from pinned memory and waits once, for the logits (or with forward_batch_greedy only the argmax ids,
// with forward_batch_sample the ids it samples on the device). Attention: decode tokens through kernels/cuda
// decode_attention (split-KV), prompt chunks through prefill_attention (tensor cores) when the pool is f16, else as one
// split-KV query per token. The step's indices come from model/step_indices.h. Built only with KILN_CUDA; unverified on
// hardware until a device check has run it (docs/cuda.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/ref/sample.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"

namespace kiln::model {

struct CudaModelOptions {
    int device = 0;                       // CUDA device index
    double gpu_memory_utilization = 0.9;  // share of the device's total memory this model may use
    int64_t max_batch_tokens = 2048;      // tokens of one forward pass (sizes the activation arena)
    int64_t max_seqs = 256;               // sequences of one forward pass
    int64_t max_logits = 256;             // rows of logits one forward pass returns
    int64_t max_seq_len = 0;              // tokens one sequence may reach; 0: the model's context
    int64_t block_size = 16;              // tokens per KV block
    int64_t num_kv_blocks = 0;            // 0: as many as the memory budget holds
    kernels::KvDtype kv_dtype = kernels::KvDtype::kF16;  // K/V rows (kernels/kernel_params.h): f16 by default
    // Prompt chunks through kernels/cuda prefill_attention (tensor cores; f16 K/V and head_dim 64 or
    // 128 only), else one split-KV query per token (exact f32 arithmetic, any built head_dim).
    bool tensor_core_prefill = true;
    // Decode steps (every sequence one token and its logits) replayed as CUDA graphs, one per
    // batch-size bucket (1, 2, 4, .. 64, then steps of 32 up to the largest decode batch), captured
    // on a bucket's second step (the first runs eagerly); a failed capture turns them off and the
    // step runs eagerly.
    bool cuda_graphs = true;
    // Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K matrices stay in their blocks on the device
    // (kernels/cuda gemv_blocks for steps of up to 8 tokens, longer ones as quantized_gemm says);
    // false: every such matrix is decoded to f32 at load (4-7x the memory).
    bool quantized_weights = true;
    // Steps of more than 8 tokens multiply block weights on tensor cores (kernels/cuda/gemm_blocks:
    // activations rounded to f16, W4A16 / W8A16; values past f16's range clamp to +-65504, where
    // the f32 path would keep them); false: one decoded f32 copy of the matrix at a
    // time and an f32 GEMM (the exact path: the CPU's --f32-activations numerics, for comparisons).
    bool quantized_gemm = true;
    // Called during the upload with the bytes uploaded so far and the total (weights only).
    std::function<void(uint64_t done, uint64_t total)> progress;
};

class CudaModel {
public:
    // kUnsupported without a device or for what CpuModel does not run; kOutOfMemory (saying how
    // much was needed) when weights, arena and at least one sequence's KV do not fit the budget;
    // kInvalidArgument for bad options. The checkpoint is only read during create.
    static core::Result<std::unique_ptr<CudaModel>> create(const Checkpoint& checkpoint,
                                                                const CudaModelOptions& options);
    ~CudaModel();
    CudaModel(const CudaModel&) = delete;
    CudaModel& operator=(const CudaModel&) = delete;

    const ModelConfig& config() const;
    const CudaModelOptions& options() const;  // as resolved at create (max_seq_len, num_kv_blocks set)
    std::string describe() const;             // device, weight and KV sizes, for the tools' stderr
    uint64_t weight_bytes() const;            // on the device
    int64_t num_graphs() const;               // decode-step CUDA graphs captured so far
    // What one decode step reads of the weights: every layer matrix (of a mixture of experts, the
    // router, the shared expert and top_k experts' share: one token's), the output matrix and one
    // embedding row (norms and biases left out: under 0.1%).
    uint64_t step_weight_bytes() const;

    // CpuModel::forward_batch's contract over this model's device KV pool: block tables hold
    // block ids in [0, options().num_kv_blocks). logits is resized to [sum of num_logits, vocab].
    // kInvalidArgument also for a batch over the create-time limits.
    core::Status forward_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                               std::vector<float>& logits);
    // The same, but only the argmax of each logits row comes back (greedy decoding:
    // sampling::argmax_lowest_id's rule), ids resized to [sum of num_logits].
    core::Status forward_batch_greedy(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                      std::vector<int32_t>& ids);

    // The same, but each logits row is sampled on the device (kernels/cuda/sample.h) by the row
    // of `rows` at its index (rows.size() == sum of num_logits; Sampler::plan_row builds them, with
    // their bias / penalty entries in `adjust`): ids resized to [sum of num_logits]. The rows and
    // entries go to the device after the forward pass (a buffer that grows when a step needs more).
    core::Status forward_batch_sample(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                      std::span<const kernels::ref::SampleRow> rows,
                                      std::span<const kernels::ref::LogitAdjustment> adjust, std::vector<int32_t>& ids);

    // One sequence kept in blocks 0, 1, 2, ... of the pool (the single-prompt tools): `tokens` at
    // positions start ..; longer inputs run in chunks of max_batch_tokens. logits: [num_tokens, vocab]
    // with all_logits, else [1, vocab].
    core::Status forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, std::vector<float>& logits);

private:
    struct Impl;
    explicit CudaModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::model
