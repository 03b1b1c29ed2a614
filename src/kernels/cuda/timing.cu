// timing.h: event timing and the read-bandwidth probe.
#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/timing.h"

namespace kiln::kernels::cuda {
namespace {

__global__ void read_kernel(const float4* p, size_t n, float* sink) {
    float acc = 0.0f;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const float4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) sink[0] = acc;  // keeps the loads; practically never taken
}

// Owns two events; destroys them however the caller returns.
struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
        if (start) (void)cudaEventDestroy(start);
        if (stop) (void)cudaEventDestroy(stop);
    }
};

}  // namespace

core::Result<double> median_ms(core::FunctionRef<core::Status()> launch, int reps, int warmup, cudaStream_t stream) {
    if (reps < 1 || warmup < 0) return core::error(core::StatusCode::kInvalidArgument) << "median_ms: reps " << reps;
    Events ev;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev.start));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev.stop));
    for (int i = 0; i < warmup; ++i) KILN_RETURN_IF_ERROR(launch());
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
        KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.start, stream));
        KILN_RETURN_IF_ERROR(launch());
        KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.stop, stream));
        KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ev.stop));
        float ms = 0;
        KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ev.start, ev.stop));
        times.push_back(ms);
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
}

core::Result<double> read_bandwidth_gbps(size_t bytes, int reps) {
    bytes -= bytes % 16;
    if (bytes == 0 || reps < 1) return core::error(core::StatusCode::kInvalidArgument) << "read_bandwidth_gbps: bytes";
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(bytes));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer sink, DeviceBuffer::allocate(sizeof(float)));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemset(buf.data(), 0, bytes));
    int sms = 0, device = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const size_t n = bytes / 16;
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        KILN_ASSIGN_OR_RETURN(const double ms, median_ms(
                                                   [&]() -> core::Status {
                                                       read_kernel<<<unsigned(sms * 8), 512>>>(buf.as<const float4>(),
                                                                                               n, sink.as<float>());
                                                       return launch_status("read_kernel");
                                                   },
                                                   1, r == 0 ? 2 : 0));
        best = std::max(best, double(bytes) / (ms * 1e6));
    }
    return best;
}

}  // namespace kiln::kernels::cuda
