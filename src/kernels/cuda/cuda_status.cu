// cuda_status.h: CUDA errors to Status.
#include "kernels/cuda/cuda_status.h"

namespace kiln::kernels::cuda {

core::Status cuda_status(cudaError_t error, const char* what) {
    if (error == cudaSuccess) return core::Status::ok();
    core::StatusCode code = core::StatusCode::kInternal;
    if (error == cudaErrorMemoryAllocation) code = core::StatusCode::kOutOfMemory;
    if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver || error == cudaErrorInvalidDevice ||
        error == cudaErrorNoKernelImageForDevice || error == cudaErrorUnsupportedPtxVersion)
        code = core::StatusCode::kUnsupported;
    return core::error(code) << "CUDA: " << what << ": " << cudaGetErrorName(error) << " (" << cudaGetErrorString(error)
                             << ")";
}

core::Status launch_status(const char* kernel) {
    return cuda_status(cudaGetLastError(), kernel);
}

}  // namespace kiln::kernels::cuda
