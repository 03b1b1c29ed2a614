// NCCL ranks (GPU; a KILN_CUDA build with NCCL): the Communicator of dist/communicator.h over
// ncclComm_t, one GPU per rank. Built only with -DKILN_CUDA=ON where CMake finds NCCL
// (kiln_dist_cuda); the only file that includes nccl.h.
//
// Differences from the host communicators' contract:
// - Buffers are device memory on the communicator's device.
// - Each collective is enqueued on the communicator's own stream and the call returns once it has
//   completed (the host polls the stream). Work that writes the buffers must be complete before the
//   call (the GPU model, when it takes ranks, will want its stream here instead).
// - A collective that does not complete within timeout_seconds(), or that NCCL reports an error
//   for, aborts the NCCL communicator (ncclCommAbort) and returns kInternal naming the operation; the
//   communicator is then unusable (every later call fails). Ending the job is the caller's choice
//   (the bootstrap's abort under MPI).
// - send and recv are blocking as NCCL's are: a rank must not send to itself.
#pragma once

#include <memory>

#include "core/status.h"
#include "dist/communicator.h"

namespace kiln::dist {

// The NCCL communicator of the ranks of `bootstrap` (MPI ranks, threads of one process, or one rank
// alone), this rank on CUDA device `device`: rank 0's ncclUniqueId goes to the others through
// bootstrap.broadcast, then ncclCommInitRank. The ranks and their order are the bootstrap's.
// kUnsupported in a build without NCCL; kInternal when CUDA or NCCL fails (the message says which).
core::Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap, int device);

// Whether this build has NCCL.
bool nccl_available();

}  // namespace kiln::dist
