// kiln::Engine's parallelism across MPI ranks (EngineOptions::tensor_parallel / pipeline_parallel,
// docs/parallel.md): the groups of ranks, checked and self-tested, each rank's share of the
// checkpoint, and the worker ranks' side.
#pragma once

#include <memory>

#include "core/status.h"
#include "dist/communicator.h"
#include "kiln/engine.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "ops/linear.h"

namespace kiln::api {

// The --isa / --f32-activations choice of the kernels, checked against this CPU.
core::Result<ops::LinearOptions> linear_options(const EngineOptions& options);

// The ranks of a job of tp x pp processes: world rank r is pipeline stage r / tp, tensor-parallel
// rank r % tp within it.
struct ParallelGroups {
    std::unique_ptr<dist::Communicator> world;     // every rank; null: one process
    std::unique_ptr<dist::Communicator> stage_tp;  // pp > 1 and tp > 1: this stage's tensor-parallel ranks
    int tp = 1, pp = 1, ep = 1;  // ep: 1, or tp (a mixture of experts' experts over the tp ranks)
    int rank() const { return world ? world->rank() : 0; }
    int stage() const { return rank() / tp; }
    int tp_rank() const { return rank() % tp; }
    // The model's groups (CpuModel::set_tensor_parallel / set_pipeline); null where that size is 1.
    dist::Communicator* tensor_group() const { return tp == 1 ? nullptr : pp > 1 ? stage_tp.get() : world.get(); }
    dist::Communicator* pipeline_group() const { return pp > 1 ? world.get() : nullptr; }
    // Every group's counters, summed.
    dist::CommStats stats() const;
};

// Empty groups for tensor_parallel = pipeline_parallel = expert_parallel = 1 (expert_parallel E
// stands for tensor_parallel E). Otherwise MPI_COMM_WORLD, which must have exactly tp x pp ranks (kInvalidArgument with the mpirun command line that would), and, with
// both above 1, each stage's subgroup; after the collective self-test, with
// options.collective_timeout on every collective.
core::Result<ParallelGroups> open_parallel(const EngineOptions& options);

// This rank's part of `ck`: its pipeline stage's layers (loader::pp_slice), then its share of those
// (loader::tp_slice: heads, MLP units or experts). ck as it is for one process; kInvalidArgument for
// expert parallelism over a model without experts.
core::Result<loader::Checkpoint> rank_checkpoint(const loader::Checkpoint& ck, const ParallelGroups& groups);

// The model runs as this rank of the groups.
void attach(model::CpuModel& model, const ParallelGroups& groups);

// Engine::run_worker.
core::Status run_worker(const EngineOptions& options);

}  // namespace kiln::api
