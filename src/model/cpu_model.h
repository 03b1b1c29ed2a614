// CpuModel: every architecture kiln runs (formats/architectures.h: the Llama family — Llama 2/3,
// Mistral, Qwen2 with q/k/v biases, Qwen3 with per-head q/k RMSNorm, SmolLM — Gemma 2 / 3 and
// Phi-3, and the mixture-of-experts Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE) on the CPU, configured
// entirely by ModelConfig: the runner of model/transformer.h's step
// over an ops::CpuBackend. Weights are used as stored in the Checkpoint
// (mmap'd, any dtype kernels::ref::dequantize_row reads, one row at a time) or repacked at load;
// activations are fp32. Norm weights and biases (small) are copied to fp32 at load.
// forward_batch runs a ragged batch (new tokens of many sequences: prompt chunks on top of a cached
// prefix, decode tokens) as one matrix-matrix pass per weight, with K/V in a paged pool (the
// serving engine) or one sequence's contiguous KvCache (forward, for the single-prompt tools).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "kernels/ref/transformer.h"
#include "loader/checkpoint.h"
#include "model/transformer.h"
#include "ops/cpu_backend.h"
#include "ops/linear.h"

namespace kiln::model {

// The loader's vocabulary the forward pass speaks: a model is built from a Checkpoint (its tensors as
// TensorRefs) and its ModelConfig.
using loader::Checkpoint;
using loader::ModelConfig;
using loader::TensorRef;

// Where the K/V of a batch live, per layer: a paged pool [num_blocks, block_size] rows shared by
// every sequence of the batch (each has a block table), or, with block_size 0, one sequence's
// contiguous [num_slots] rows (position p in row p). Rows are of dtype (kernels/kernel_params.h
// KvDtype: f32, or f16 / int8 / fp8 computed in f32 and stored once).
struct KvLayers {
    std::vector<void*> k, v;  // [num_layers]
    int64_t block_size = 0;   // tokens per block; 0 = contiguous, one sequence
    int64_t num_slots = 0;    // rows of each k[l] / v[l] (num_blocks * block_size when paged)
    kernels::KvDtype dtype = kernels::KvDtype::kF32;
};

// One sequence's keys and values, contiguous per layer: k/v of layer l are [len] rows of dtype
// (kv_dim = num_kv_heads * head_dim elements each), row r = position r. All max_len rows are taken at
// the first forward (size it to the run: 2 * layers * max_len * row bytes are committed then), so a
// step never copies or first-touches the cache.
class KvCache {
public:
    KvCache(const ModelConfig& config, int64_t max_len, kernels::KvDtype dtype = kernels::KvDtype::kF32);
    int64_t size() const { return len_; }  // tokens cached
    int64_t max_len() const { return max_len_; }
    void clear() { len_ = 0; }

private:
    friend class CpuModel;
    int64_t num_layers_, kv_dim_, row_bytes_, max_len_, len_ = 0;
    // per layer: [capacity] rows of row_bytes_; large ones on huge pages (decode walks a KV head's
    // slice of every row: one TLB miss per key on 4 KiB pages)
    using Rows = std::vector<uint8_t, core::HugePageAllocator<uint8_t>>;
    std::vector<Rows> k_, v_;
    KvLayers view_;                            // k_ / v_ as forward_batch takes them, rebuilt when they grow
};

// One sequence of a forward batch.
struct BatchSeq {
    int64_t start = 0;                     // tokens already cached = position of its first new token
    int64_t num_tokens = 0;                // new tokens: the next contiguous run of the batch's tokens
    std::span<const int32_t> block_table;  // paged: physical block of each logical block, >= start + num_tokens tokens
    int64_t num_logits = 0;                // logits wanted for its last num_logits new tokens (0..num_tokens)
};

// The checks every forward pass makes on a batch (kInvalidArgument naming the problem): tokens and
// sequences agree, token ids lie in the vocabulary, num_logits fits; paged (block_size > 0): each
// block table covers its sequence with blocks in [0, num_slots / block_size); contiguous
// (block_size 0): one sequence within num_slots.
core::Status check_forward_batch(const ModelConfig& config, std::span<const int32_t> tokens,
                                 std::span<const BatchSeq> seqs, int64_t block_size, int64_t num_slots);

// The RoPE parameters of `config` (theta, and linear or llama3 scaling); kUnsupported for other
// scaling types (`path` names the model in the message).
core::Result<kernels::ref::RopeParams> rope_params(const ModelConfig& config, const std::string& path);
// LongRoPE's second table (rope_scaling type longrope): the frequencies divided by long_factor, for
// positions >= original_max_position_embeddings (each key and query rotated by its own position's
// table, as vLLM does; transformers switches every position to it once a sequence is that long).
std::vector<double> longrope_inv_freq(const ModelConfig& config);

class CpuModel {
public:
    // The architectures this class runs.
    static const std::vector<std::string>& supported_architectures();
    // kUnsupported for other architectures or RoPE scaling types; the checkpoint must outlive the model.
    // `linear` picks the matmul kernels (ISA, int8 or f32 activations) once for every weight.
    static core::Result<std::unique_ptr<CpuModel>> create(const Checkpoint& checkpoint, core::ThreadPool* pool,
                                                            const ops::LinearOptions& linear = {});

    // The weight matrices that create() with these options reads only through repacked copies
    // (ops::plan_linear picks a packed kernel): their original bytes are not needed once the model
    // exists (copy_to_anonymous need not copy them; release_tensor_bytes can drop them). Never the
    // token embedding, whose rows the lookup reads. Missing or unusable tensors are left out (create
    // reports them).
    static std::vector<std::string> packed_only_matrices(const Checkpoint& checkpoint,
                                                         const ops::LinearOptions& linear = {});

    const ModelConfig& config() const { return config_; }
    core::ThreadPool& pool() const { return *pool_; }

    // Another model over this one's weights, neither loaded nor copied again: its own step buffers
    // and backend on `pool`, so both can run passes at once (data-parallel replicas; the weights are
    // only read). Not its parallel groups or hooks. This model must outlive it.
    std::unique_ptr<CpuModel> replica(core::ThreadPool* pool) const;

    // Runs `tokens` at positions cache.size() .. and appends them to the cache. Returns logits
    // [num_tokens, vocab] when all_logits, else [1, vocab] for the last token. kInvalidArgument for
    // an empty batch, a token id outside the vocabulary or a cache that would overflow.
    core::Result<std::vector<float>> forward(const std::vector<int32_t>& tokens, KvCache& cache, bool all_logits);
    // The same into `logits` (resized), allocating nothing once the cache's capacity, the model's
    // buffers and `logits` have grown to the step's size: the decode loop of the tools.
    core::Status forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits, std::vector<float>& logits);

    // A ragged batch of sequences in one pass: tokens [num_tokens] holds each sequence's new tokens
    // in turn; their K/V are written to kv (at the slots their block tables give) and attention runs
    // over each sequence's own cache. logits is resized to [sum of num_logits, vocab], rows in
    // sequence order. Every row's arithmetic is independent of the rest of the batch (batch
    // invariance: the same logits bit for bit alone, batched or chunked). kInvalidArgument for bad
    // token ids, counts, block tables or slots outside kv.
    core::Status forward_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, const KvLayers& kv,
                               std::vector<float>& logits);
    // forward_batch in two halves, for a pipeline's world rank 0 when the last stage is another
    // rank: this rank's part of the pass runs now and the receive of the logits is posted into
    // `logits` (resized here; leave it alone until the wait), and the returned receive's wait()
    // brings them, so rank 0 can start the next pass while the later stages run this one (several
    // passes in flight: wait in the order they started). Null where the pass is done already (one
    // stage, or any other rank).
    core::Result<std::unique_ptr<dist::Pending>> start_batch(std::span<const int32_t> tokens,
                                                                 std::span<const BatchSeq> seqs, const KvLayers& kv,
                                                                 std::vector<float>& logits);

    // Called (on the calling thread) with the input of every projection group during forward passes;
    // an empty function turns it off.
    void set_linear_input_hook(LinearInputHook hook) { hook_ = std::move(hook); }
    // The same for a mixture of experts' experts (model/transformer.h ExpertInputHook).
    void set_expert_input_hook(ExpertInputHook hook) { expert_hook_ = std::move(hook); }
    // Calibration only: forward passes stop after layer `last` (0-based) and return no logits; the
    // cache still counts the tokens while the K/V of later layers stay unwritten, so a cache used
    // that way is good for nothing else. -1 (the default) runs the whole model.
    void set_last_layer(int64_t last) { last_layer_ = last; }
    // Calibration only, with set_last_layer: the next passes start at layer `first` from the residual
    // stream in resid_in [tokens, hidden] (null: from the embeddings, first 0) and leave the stream
    // after the last layer in resid_out (null: nowhere; it may be resid_in). StepOptions::resid_in.
    void set_resume(int64_t first, const float* resid_in, float* resid_out) {
        first_layer_ = first;
        resid_in_ = resid_in;
        resid_out_ = resid_out;
    }
    // Tensor parallelism: this model holds rank tp->rank()'s slices (loader::tp_slice) and every
    // forward pass sums the partial outputs across the group (model/transformer.h StepOptions::tp), so
    // every rank of the group must run the same passes in the same order. Null (the default): one rank.
    // A mixture-of-experts model's slice holds only its experts (loader::tp_slice, expert parallelism)
    // and its MoE layers exchange the experts' outputs over the same group.
    void set_tensor_parallel(dist::Communicator* tp) { tp_ = tp; }
    dist::Communicator* tensor_parallel() const { return tp_; }
    // Pipeline parallelism: this model holds one stage's layers (loader::pp_slice,
    // config().stage_begin) and `world` holds every rank of the job, stage s's tensor-parallel ranks
    // (set_tensor_parallel's group, or one rank) at world ranks s * tp + 0 .. s * tp + tp - 1. A
    // forward pass cuts the batch's tokens into one micro-batch per stage (a sequence may straddle
    // two: its pieces run in order), runs its layers on each in turn and passes each one's residual
    // stream [tokens, hidden] to the same tensor-parallel rank of the next stage, so the stages work
    // on different micro-batches at once; the last stage sends every logit row to world rank 0 at the
    // end of the pass. Logits come back on world rank 0 only (empty elsewhere). Every rank of the
    // world runs the same passes in the same order. Null (the default): one stage.
    void set_pipeline(dist::Communicator* world) { pp_ = world; }
    dist::Communicator* pipeline() const { return pp_; }
    // The ranks that run every forward pass together: the pipeline's world, else the
    // tensor-parallel group; null for one rank.
    dist::Communicator* step_group() const { return pp_ ? pp_ : tp_; }

private:
    // One layer's weights (model/transformer.h LayerWeights points into them).
    struct Layer {
        // Q/K/V and gate/up: each one fused, repacked matrix (ops::fuse_linears) when their types
        // allow, else the parts side by side.
        std::unique_ptr<ops::CpuWeight> qkv, o, gate_up, down;
        std::vector<float> attn_norm, ffn_norm;  // [hidden]
        std::vector<float> bqkv, bo;             // [q_dim + 2 kv_dim], [hidden]; empty if none
        std::vector<float> q_norm, k_norm;       // [head_dim]; empty if none
        std::vector<float> post_attn_norm, post_ffn_norm;  // [hidden] with sandwich_norms; else empty
        // Mixture of experts (else empty / null): the router, each expert's gate/up and down, the
        // shared expert and its gate ([1, hidden]), and the step's view of them.
        std::unique_ptr<ops::CpuWeight> router, shared_gate_up, shared_down, shared_gate;
        std::vector<std::unique_ptr<ops::CpuWeight>> expert_gate_up, expert_down;
        std::vector<const ops::Weight*> expert_gate_up_view, expert_down_view;
        // gpt-oss: attention sinks [heads], the router's bias [E], each expert's biases (gate/up in
        // its weight's output order, down) and views of them.
        std::vector<float> sinks, router_bias;
        std::vector<std::vector<float>> expert_gate_up_bias, expert_down_bias;
        std::vector<const float*> expert_gate_up_bias_view, expert_down_bias_view;
        ops::MoeWeights moe;
    };
    CpuModel() = default;
    core::Status check_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, const KvLayers& kv) const;
    // The step's expert parallelism: null unless a mixture-of-experts model runs under tp_.
    ExpertParallel* expert_parallel();
    // Gives the backend this batch's step (positions, K/V slots, attention sequences, logit rows);
    // returns its number of logit rows.
    int64_t set_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, const KvLayers& kv);
    // World rank 0 posts the logits' receive into *pending (left null when there are none to receive).
    core::Status forward_pipeline(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                  const KvLayers& kv, std::vector<float>& logits,
                                  std::unique_ptr<dist::Pending>* pending);

    ModelConfig config_;
    core::ThreadPool* pool_ = nullptr;
    std::unique_ptr<ops::CpuBackend> backend_;
    std::unique_ptr<ops::CpuWeight> embed_, output_;  // [vocab, hidden] each
    std::vector<float> output_norm_;                  // [hidden]
    std::vector<Layer> layers_;
    std::vector<double> inv_freq_;        // [head_dim / 2]
    std::vector<double> inv_freq_local_;  // [head_dim / 2] the sliding layers' (rope_local_theta), if any
    std::vector<double> inv_freq_long_;   // [head_dim / 2] LongRoPE's long table, if any
    ModelWeights weights_;          // the step's view of all the above
    // The step's buffers, grown to the largest batch seen and reused.
    struct Workspace {
        std::vector<float> x, xn, qkv, q, att, o, gate_up, act;  // x: the residual stream [T, H]
        std::vector<int32_t> positions;                          // [T]
        std::vector<int64_t> slots;                              // [T] K/V row of each new token
        std::vector<ops::AttentionSeq> attn;                     // [num seqs]
        std::vector<int64_t> logit_rows;                         // [num logits]
        std::vector<float> stream;      // pipeline: a micro-batch's residual stream [T, H], passed on
        std::vector<float> out_logits;  // pipeline, last stage: the pass's logits [num logits, V]
        std::vector<BatchSeq> pieces;   // pipeline: a micro-batch's sequences
        void reserve(const ModelConfig& c, int64_t num_tokens);
    };
    Workspace work_;
    LinearInputHook hook_;
    ExpertInputHook expert_hook_;
    int64_t last_layer_ = -1;
    int64_t first_layer_ = 0;
    const float* resid_in_ = nullptr;
    float* resid_out_ = nullptr;
    dist::Communicator* tp_ = nullptr;
    dist::Communicator* pp_ = nullptr;
    ExpertParallel ep_;
};

// Where a model's weights live while it runs.
enum class WeightMemory {
    kFileMapping,  // read from the file mapping (fast start; the OS may page them out and back in)
    kAnonymous,    // copied into anonymous memory (huge pages advised) first: steady speed
};

// CpuModel::create over `checkpoint` with the weights placed as `memory` says, each resident once:
// the matrices the model reads only through repacked copies (packed_only_matrices) are packed
// straight from the file mapping and their file pages released afterwards, never copied. The
// checkpoint must outlive the model.
core::Result<std::unique_ptr<CpuModel>> create_model(Checkpoint& checkpoint, core::ThreadPool* pool,
                                                       const ops::LinearOptions& linear, WeightMemory memory);

}  // namespace kiln::model
