// Parallel ranks in the engine (docs/parallel.md): rank 0 runs the whole engine (scheduler,
// sampling, the server); before each forward pass it sends the step's plan (token ids and the
// sequences with their block tables) to the other ranks, which run the same pass with their own
// K/V pools (the same blocks: their KV heads under tensor parallelism, their layers under pipeline
// parallelism) and return nothing: rank 0 gets the logits (the all-reduces of a tensor-parallel
// step keep every rank's hidden states equal; the last pipeline stage sends them to rank 0).
// Protocol, over the model's step group (CpuModel::step_group): once, the pool (PoolPlan), broadcast
// from rank 0; then per step a header {kind, payload bytes} and the payload, sent by rank 0 to every
// other rank as posted sends (rank 0 goes on without waiting for a rank still running an earlier
// pass: pipeline lanes); kind kStop ends the followers' loop.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "kernels/kernel_params.h"
#include "kv/kv_storage.h"
#include "model/cpu_model.h"

namespace kiln::engine {

// A model's paged K/V pool for its layers (a pipeline stage's only; the others' entries null).
struct KvPool {
    std::unique_ptr<kv::KvStorage> storage;
    std::shared_ptr<model::KvLayers> layers;
};
// kInvalidArgument / kOutOfMemory as KvStorage::create says.
core::Result<KvPool> make_kv_pool(const loader::ModelConfig& config, int64_t num_blocks, int64_t block_size,
                                  kernels::KvDtype dtype);
// Bytes one block of that pool takes (the stage's layers, K and V).
int64_t kv_pool_block_bytes(const loader::ModelConfig& config, int64_t block_size, kernels::KvDtype dtype);

struct PoolPlan {
    int64_t num_kv_blocks = 0;
    int64_t block_size = 0;
    int64_t kv_dtype = 0;  // kernels::KvDtype
};

// Rank 0's side of the protocol.
class StepSender {
public:
    explicit StepSender(dist::Communicator& comm) : comm_(comm) {}
    ~StepSender();  // waits for the sends still in flight
    StepSender(const StepSender&) = delete;
    StepSender& operator=(const StepSender&) = delete;
    // The pool every rank allocates (its own row size, these blocks); returns once every rank has
    // its pool (no deadline: ranks may still be loading their weights).
    core::Status send_pool(const PoolPlan& pool);
    // Before rank 0's own forward pass: the step's plan.
    core::Status send_step(std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs);
    // When rank 0's engine goes away: the followers return (once they have it).
    core::Status send_stop();

private:
    core::Status post(int64_t kind, std::vector<uint8_t> payload);
    // A header and payload in flight to every other rank.
    struct Message {
        int64_t header[2] = {0, 0};
        std::vector<uint8_t> payload;
        std::vector<std::unique_ptr<dist::Pending>> sends;
    };
    dist::Communicator& comm_;
    std::deque<Message> in_flight_;
};

// One sequence at a time over a model outside the engine (kiln perplexity, kiln logits): a paged K/V
// pool of max_tokens that every rank of the model's step group allocates, and passes that every rank
// runs (ranks 1.. run run_follower). Without a step group: one process.
class SequenceRunner {
public:
    static core::Result<std::unique_ptr<SequenceRunner>> create(model::CpuModel& model, int64_t max_tokens,
                                                                kernels::KvDtype dtype);
    ~SequenceRunner();  // the other ranks stop
    // Runs tokens at positions [start, start + n) of the sequence (start 0 begins a new one; start
    // must be where the last pass ended) and returns logits [n, vocab] with all_logits, else [1,
    // vocab] for the last token. kInvalidArgument past max_tokens.
    core::Status forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, std::vector<float>& logits);

private:
    SequenceRunner(model::CpuModel& model, KvPool pool, int64_t max_tokens)
        : model_(model), pool_(std::move(pool)), max_tokens_(max_tokens) {}
    model::CpuModel& model_;
    KvPool pool_;
    int64_t max_tokens_ = 0, end_ = 0;
    std::vector<int32_t> table_;
    std::unique_ptr<StepSender> sender_;
};

// Ranks 1..n-1: receive the pool, allocate it, and run every step rank 0 sends until it sends stop.
// A step that fails here returns its error (the caller ends the job: the ranks' collectives can no
// longer be matched up); a collective that times out ends the job.
core::Status run_follower(model::CpuModel& model, dist::Communicator& comm);

}  // namespace kiln::engine
