// ops::Backend on the CPU: the threaded ops of ops/linear.h, ops/transformer_ops.h and
// ops/batch_attention.h over host memory. Every op splits its work by shape only, so a step's
// results are bit-identical for any thread count and every row's arithmetic is independent of the
// rest of the batch (the engine's batch invariance).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "ops/backend.h"
#include "ops/batch_attention.h"
#include "ops/linear.h"
#include "ops/moe.h"

namespace kiln::ops {

// A CPU weight: one Linear (possibly several matrices fused at load by fuse_linears), or parts whose
// types kept them apart, multiplied side by side (linear_group; for a gated MLP, gate then up); or
// a table whose rows embed() reads.
class CpuWeight final : public Weight {
public:
    // One matrix, or parts fused by fuse_linears(.., interleave, ..) into `fused` (interleave: 0 or
    // kSwigluBlock, as fused).
    static std::unique_ptr<CpuWeight> of(Linear fused);
    // Parts kept apart: out holds their products side by side.
    static std::unique_ptr<CpuWeight> of_parts(std::vector<Linear> parts);
    // Matrices that read the same input (Q, K, V; gate, up): one fused, repacked matrix when their
    // types allow (fuse_linears, interleave as it says), else the parts side by side.
    static core::Result<std::unique_ptr<CpuWeight>> fuse(std::span<const kernels::WeightView> parts,
                                                         int64_t interleave, const LinearOptions& options);
    // An embedding table read row by row.
    static std::unique_ptr<CpuWeight> table(const kernels::WeightView& rows);
    // A gated MLP's gate and up biases ([F] each) in this [gate; up] weight's output order (fused:
    // blocks of kSwigluBlock in turn; parts: [gate | up]), for a linear of it with a bias.
    std::vector<float> gate_up_order(std::span<const float> gate, std::span<const float> up) const;

    std::vector<Linear> parts;  // one: a single (fused) matrix
    kernels::WeightView rows_view;  // the table of embed()
};

class CpuBackend final : public Backend {
public:
    // attention_isa picks batch_attention's kernel (the Linears carry their own).
    CpuBackend(core::ThreadPool* pool, kernels::cpu::Isa attention_isa) : pool_(pool), isa_(attention_isa) {}

    // The step's batch, set by the runner before each step (the spans must stay valid through it).
    struct Step {
        std::span<const int32_t> tokens;     // [T]
        std::span<const int32_t> positions;  // [T]
        std::span<const int64_t> slots;      // [T] K/V row of each token in its layer's cache
        std::span<AttentionSeq> seqs;        // per sequence; kv.k / kv.v set per layer by attention()
        std::span<void* const> k, v;         // per layer: the K/V cache ([num_slots] rows)
        kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;  // the rows' format (kernels/kernel_params.h)
        std::span<const int64_t> logit_rows;  // the rows of x that want logits
    };
    void set_step(const Step& step) { step_ = step; }
    kernels::cpu::Isa attention_isa() const { return isa_; }

    core::Status embed(const Weight& table, float scale, float* x, int64_t first_id) override;
    core::Status add_rmsnorm(float* x, const float* add, const float* weight, float* y, int64_t rows, int64_t n,
                             float eps, const Weight* next) override;
    core::Status linear(const Weight& w, const float* in, int64_t rows, const float* bias, float* out) override;
    core::Status qkv_rope_kv_write(int64_t layer, float* qkv, float* q_out, const QkvRope& p) override;
    core::Status attention(int64_t layer, const float* q, float* out, const AttentionParams& p) override;
    core::Status gated_mlp_up(const Weight& gate_up, const float* in, int64_t rows, GatedAct f, float* gate_up_out,
                              float* act, const Weight* next) override;
    core::Status moe_mlp(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                         float* out) override;
    core::Status moe_router(const MoeWeights& w, const MoeParams& p, const float* in, int64_t first, int64_t count,
                            MoeSlots& slots) override;
    core::Status moe_experts(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                             MoeSlots& slots) override;
    core::Status moe_combine(const MoeWeights& w, const MoeParams& p, const float* in, int64_t first, int64_t count,
                             const MoeSlots& slots, float* out) override;
    core::Status gather_logit_rows(const float* x, int64_t n, float* out) override;
    core::Status softcap(float* x, int64_t n, float cap) override;

private:
    core::ThreadPool* pool_;
    kernels::cpu::Isa isa_;
    Step step_;
    std::vector<uint8_t> scratch_;  // quantized activations, reused across calls
    // moe_mlp's parts (cpu_backend.cc): the experts side by side for a few tokens, the shared expert.
    core::Status moe_experts_side_by_side(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                                          float* out);
    core::Status moe_shared_expert(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows, float* out);
    core::Status run_expert(const MoeWeights& w, const MoeParams& p, int64_t e, const float* in, const int64_t* entries,
                            int64_t n);
    // moe_mlp's buffers, grown to the largest step and reused.
    struct MoeScratch {
        std::vector<float> logits, weights, x, y, gate_up, act, shared_gate;
        std::vector<int32_t> ids;
        std::vector<int64_t> active;       // experts that got tokens, ascending
        std::vector<core::Status> status;  // per active expert (side by side)
        MoeGroups groups;
    } moe_;
};

}  // namespace kiln::ops
