// kiln::Engine's tensor parallelism (EngineOptions::tensor_parallel, docs/parallel.md): the group of
// MPI ranks, checked and self-tested, and the worker ranks' side.
#pragma once

#include <memory>

#include "core/status.h"
#include "dist/communicator.h"
#include "kiln/engine.h"
#include "ops/linear.h"

namespace kiln::api {

// The --isa / --f32-activations choice of the kernels, checked against this CPU.
core::Result<ops::LinearOptions> linear_options(const EngineOptions& options);

// nullptr for tensor_parallel 1. Otherwise MPI_COMM_WORLD, which must have exactly tensor_parallel
// ranks (kInvalidArgument with the mpirun command line that would), after the collective self-test,
// with options.collective_timeout on every collective.
core::Result<std::unique_ptr<dist::Communicator>> open_tensor_parallel(const EngineOptions& options);

// Engine::run_worker.
core::Status run_worker(const EngineOptions& options);

}  // namespace kiln::api
