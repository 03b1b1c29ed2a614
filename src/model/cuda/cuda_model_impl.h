// Private to model/cuda: CudaModel's state, shared by cuda_model.cc (the forward step) and
// cuda_model_load.cc (create: uploads, the arena, the KV pool). Shapes as in cuda_model.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "model/cuda/cuda_model.h"
#include "model/step_indices.h"
#include "model/transformer.h"
#include "ops/backend.h"

namespace kiln::model {

namespace kc = kernels::cuda;

namespace cuda_detail {
// kBlocks: GGML blocks as the checkpoint stores them (DevMatrix::blocks: Q8_0, Q4_0 or Q4_1).
enum class WType { kF32, kBf16, kF16, kBlocks };

// A matrix on the device (ops::Weight's rows and cols).
struct DevMatrix : ops::Weight {
    kc::DeviceBuffer buf;  // [rows, cols] of `type`
    WType type = WType::kF32;
    core::DType blocks = core::DType::kF32;  // with kBlocks
};

inline std::string wtype_name(const DevMatrix& m) {
    return m.type == WType::kF32    ? "f32"
           : m.type == WType::kBf16 ? "bf16"
           : m.type == WType::kF16  ? "f16"
                                    : std::string(core::dtype_name(m.blocks));
}

inline const float* fptr(const kc::DeviceBuffer& b) {
    return b.bytes() ? b.as<float>() : nullptr;
}

inline size_t align16(size_t n) {
    return (n + 15) / 16 * 16;
}

// Arena buffers start 256-byte aligned: cuBLASLt's heuristic assumes that of its operands unless
// told otherwise.
inline size_t align256(size_t n) {
    return (n + 255) / 256 * 256;
}

// A mixture-of-experts layer on the device: the router [E, H], every expert's gate/up stacked
// ([E 2 Fe, H]: expert e's gate rows, then its up rows) and down ([E H, Fe]), one type across the
// experts (kernels/cuda/moe.h's grouped products), and the shared expert with its gate [1, H] when
// the model has one. The ops::MoeWeights base is the step's view: router and the shared expert
// point at the matrices here, gate_up / down at per-expert shapes (rows and cols only: the grouped
// launch reads the stacked matrices).
struct DevMoe : ops::MoeWeights {
    DevMatrix router_m, experts_gate_up, experts_down, shared_gate_up_m, shared_down_m, shared_gate_m;
    std::vector<ops::Weight> gate_up_shapes, down_shapes;
    std::vector<const ops::Weight*> gate_up_views, down_views;
    // Once the matrices are in place (the object does not move after: held by unique_ptr).
    void set_views(int64_t num_experts) {
        gate_up_shapes.assign(size_t(num_experts), ops::Weight());
        down_shapes.assign(size_t(num_experts), ops::Weight());
        for (int64_t e = 0; e < num_experts; ++e) {
            gate_up_shapes[size_t(e)].rows = experts_gate_up.rows / num_experts;
            gate_up_shapes[size_t(e)].cols = experts_gate_up.cols;
            down_shapes[size_t(e)].rows = experts_down.rows / num_experts;
            down_shapes[size_t(e)].cols = experts_down.cols;
            gate_up_views.push_back(&gate_up_shapes[size_t(e)]);
            down_views.push_back(&down_shapes[size_t(e)]);
        }
        router = &router_m;
        gate_up = gate_up_views;
        down = down_views;
        if (shared_gate_up_m.rows) {
            shared_gate_up = &shared_gate_up_m;
            shared_down = &shared_down_m;
            shared_gate = &shared_gate_m;
        }
    }
};

constexpr size_t kAttnWorkspaceBudget = size_t(256) << 20;  // bytes; more keys run in more launches

}  // namespace cuda_detail

// The model's state and its ops::Backend: model/transformer.h's step runs over it (enqueue).
struct CudaModel::Impl final : ops::Backend {
    struct Layer {
        cuda_detail::DevMatrix wqkv, wo, w_gate_up,
            w_down;                            // [Q + 2 KV, H], [H, Q], [2 F, H] (gate rows, then up), [H, F]
        kc::DeviceBuffer attn_norm, ffn_norm;  // [H]
        kc::DeviceBuffer bqkv, bo;             // [Q + 2 KV], [H]; empty when absent
        kc::DeviceBuffer q_norm, k_norm;       // [head_dim]; empty when absent
        std::unique_ptr<cuda_detail::DevMoe> moe;  // set: a mixture of experts (w_gate_up, w_down empty)
    };
    // One step's indices (model/step_indices.h) and where they are on the device (inside stage_dev).
    struct Step {
        StepIndices ix;
        const uint8_t* dev = nullptr;
        int64_t num_splits = 0;  // split-KV splits per query; 0: from the step's longest sequence
        const int32_t* i32(size_t off) const { return reinterpret_cast<const int32_t*>(dev + off); }
    };

    ModelConfig config;
    CudaModelOptions options;
    std::string device_name;
    kc::Stream stream;
    std::unique_ptr<kc::Gemm> gemm;
    cuda_detail::DevMatrix embed_table, output;  // output empty when tied to embed_table
    kc::DeviceBuffer output_norm, inv_freq;
    std::vector<Layer> layers;
    ModelWeights weights;  // the step's view of embed, output, output_norm, layers (set once at create)
    uint64_t weight_bytes = 0;
    kc::DeviceBuffer kv;  // per layer K then V: [num_blocks, block_size, KV] each
    std::vector<void*> k, v;
    int64_t blocks_per_seq = 0;  // ceil(max_seq_len / block_size)
    // The activation arena and the pointers into it.
    kc::DeviceBuffer arena;
    float *x = nullptr, *xn = nullptr, *qkv = nullptr, *q = nullptr, *att = nullptr, *o = nullptr;
    float *gate_up = nullptr, *act = nullptr, *logits = nullptr, *attn_ws = nullptr;
    float* decoded = nullptr;  // a block-quantized layer matrix decoded to f32, for steps of > 8 tokens
    int64_t decoded_floats = 0;
    void* x16 = nullptr;  // activations rounded to a 16-bit weight type before its GEMM
    int32_t* ids = nullptr;
    // A mixture-of-experts layer's scratch (null without experts), N = T top_k entries: router logits
    // [T, E], the routing ids / weights [N], the grouping (offsets [E + 1], entries [N], slot_pos
    // [N]), the experts' gate/up products [N, 2 Fe] (and the shared expert's [T, 2 S]), activations
    // [N, Fe] ([T, S]), outputs [N, H] ([T, H]).
    float *moe_logits = nullptr, *moe_weights = nullptr, *moe_gate_up = nullptr, *moe_act = nullptr, *moe_y = nullptr;
    int32_t *moe_ids = nullptr, *moe_offsets = nullptr, *moe_entries = nullptr, *moe_slot_pos = nullptr;
    uint8_t* stage_dev = nullptr;
    int64_t tile_queries = 0;  // prefill_attention's tile when prompt chunks can take it (f16 K/V), else 0
    size_t attn_ws_rows = 0;   // of num_heads * (head_dim + 1) floats
    kc::PinnedBuffer stage_host, ids_host;
    // forward_batch_sample's rows and entries: pinned staging and its device copy, grown on demand.
    kc::PinnedBuffer sample_host;
    kc::DeviceBuffer sample_dev;
    std::vector<int32_t> own_table;  // 0, 1, 2, ...: forward()'s one sequence

    // CUDA graphs of decode steps (every sequence one new token and its logits), one per batch-size
    // bucket and output kind, captured on first use; the batch is padded to its bucket with
    // sequences of one token in the pool's scratch block (num_kv_blocks, past the caller's blocks).
    std::map<std::pair<int64_t, bool>, cudaGraphExec_t> graphs;  // (bucket, greedy)
    std::set<std::pair<int64_t, bool>> graphs_seen;              // run eagerly once before capture
    int64_t graph_splits = 0;  // split-KV splits in the graphs: min(ceil(max_seq_len / 256), 64)
    std::vector<int64_t> buckets;                                // ascending, the last = the largest decode batch
    bool graphs_off = false;                                     // a capture failed: eager from then on
    std::string graph_error;
    std::vector<int32_t> pad_tokens;  // the padded batch, reused
    std::vector<BatchSeq> pad_seqs;
    int32_t scratch_block = 0;

    ~Impl() {
        (void)cudaSetDevice(options.device);  // the members free their memory on that device
        for (auto& [key, exec] : graphs) (void)cudaGraphExecDestroy(exec);
    }
    const cuda_detail::DevMatrix& lm_head() const { return output.rows ? output : embed_table; }
    core::Status plan_arena();
    core::Status plan_kv();
    core::Status gemm_prepared(const cuda_detail::DevMatrix& w, const float* in, int64_t m, float* out);
    core::Status gemm_run(const cuda_detail::DevMatrix& w, const float* in, int64_t m, float* out);
    void set_weights();  // weights from embed, output, output_norm, layers

    // ops::Backend over the step being enqueued (step_). A norm or activation whose reader is a
    // 16-bit matrix writes x16 (rounded to that type) instead of its f32 output; the next linear()
    // of that output and type reads x16 (prepared_).
    core::Status embed(const ops::Weight& table, float scale, float* x, int64_t first_id) override;
    core::Status add_rmsnorm(float* x, const float* add, const float* weight, float* y, int64_t rows, int64_t n,
                             float eps, const ops::Weight* next) override;
    core::Status linear(const ops::Weight& w, const float* in, int64_t rows, const float* bias, float* out) override;
    core::Status qkv_rope_kv_write(int64_t layer, float* qkv, float* q_out, const ops::QkvRope& p) override;
    core::Status attention(int64_t layer, const float* q, float* out, const ops::AttentionParams& p) override;
    core::Status gated_mlp_up(const ops::Weight& gate_up, const float* in, int64_t rows, ops::GatedAct f,
                              float* gate_up_out, float* act, const ops::Weight* next) override;
    core::Status moe_mlp(const ops::MoeWeights& w, const ops::MoeParams& p, const float* in, int64_t rows,
                         float* out) override;
    core::Status gather_logit_rows(const float* x, int64_t n, float* out) override;
    core::Status softcap(float* x, int64_t n, float cap) override;
    const Step* step_ = nullptr;
    struct Prepared {
        const float* of = nullptr;  // the f32 output x16 stands for
        cuda_detail::WType type = cuda_detail::WType::kF32;
    } prepared_;
    core::Status enqueue(const Step& st, bool greedy);
    int64_t graph_bucket(std::span<const BatchSeq> seqs) const;
    core::Result<cudaGraphExec_t> graph_for(int64_t bucket, bool greedy, const Step& st);
    // A step's device sampling: its rows (one per logits row) and their entries.
    struct SamplePlan {
        std::span<const kernels::ref::SampleRow> rows;
        std::span<const kernels::ref::LogitAdjustment> adjust;
    };
    core::Status sample_on_device(const SamplePlan& plan, int64_t num_logits);
    // Exactly one of logits_out and ids_out; ids come from argmax_rows, or with `sample` from
    // sample_rows.
    core::Status run(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, std::vector<float>* logits_out,
                     std::vector<int32_t>* ids_out, const SamplePlan* sample = nullptr);
};

}  // namespace kiln::model
