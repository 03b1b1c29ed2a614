// Tensor parallelism in the engine (docs/parallel.md): rank 0 runs the whole engine (scheduler,
// sampling, the server); before each forward pass it sends the step's plan (token ids and the
// sequences with their block tables) to the other ranks, which run the same pass on their slices of
// the weights and their own K/V pools (the same blocks, their KV heads) and return nothing: the
// all-reduces inside the step keep every rank's hidden states equal, and rank 0 samples.
// Protocol, in broadcasts from rank 0: once, the pool (TpPool); then per step a header {kind,
// payload bytes} and the payload; kind kStop ends the followers' loop.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "kernels/kernel_params.h"
#include "model/cpu_model.h"

namespace kiln::engine {

struct TpPool {
    int64_t num_kv_blocks = 0;
    int64_t block_size = 0;
    int64_t kv_dtype = 0;  // kernels::KvDtype
};

// Rank 0: the pool every rank allocates (its own row size, these blocks); returns once every rank has
// its pool (no deadline: ranks may still be loading their weights).
core::Status tp_send_pool(dist::Communicator& comm, const TpPool& pool);
// Rank 0, before its own forward pass: the step's plan.
core::Status tp_send_step(dist::Communicator& comm, std::span<const int32_t> tokens,
                          std::span<const model::BatchSeq> seqs);
// Rank 0, when its engine goes away: the followers return.
core::Status tp_send_stop(dist::Communicator& comm);

// Ranks 1..n-1: receive the pool, allocate it, and run every step rank 0 sends until it sends stop.
// A step that fails here returns its error (the caller ends the job: the ranks' collectives can no
// longer be matched up); a collective that times out ends the job.
core::Status run_tp_follower(model::CpuModel& model, dist::Communicator& comm);

}  // namespace kiln::engine
