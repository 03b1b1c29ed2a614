// CUDA runtime errors as kiln Status values. Every CUDA call and kernel launch in kiln goes through
// cuda_status / KILN_CUDA_RETURN_IF_ERROR / launch_status, so a failure comes back as a message that
// names the call and CUDA's own description (never silent corruption, never an abort on a user's
// mistake); code kUnsupported when there is no usable device or driver, kOutOfMemory for
// allocations, kInternal otherwise. Host code only (no kernels), usable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace kiln::kernels::cuda {

// Status::ok() for cudaSuccess; otherwise `what` and the error's name and text. The runtime's sticky
// error state is not cleared here (a sticky error means the context is unusable anyway).
core::Status cuda_status(cudaError_t error, const char* what);

// The launch error of the kernel just launched on this thread (a bad configuration, a missing
// image for this GPU's architecture), as cuda_status(cudaGetLastError(), kernel). Completion errors
// show up at the next synchronizing call.
core::Status launch_status(const char* kernel);

}  // namespace kiln::kernels::cuda

#define KILN_CUDA_RETURN_IF_ERROR(expr) KILN_RETURN_IF_ERROR(::kiln::kernels::cuda::cuda_status((expr), #expr))
