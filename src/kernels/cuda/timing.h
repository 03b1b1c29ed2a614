// Timing and floors on the GPU, for benchmarks (never tests): the median time of a launch sequence
// measured with CUDA events after a warm-up, and the device's memory read bandwidth measured by a
// plain streaming-read kernel (the floor decode kernels are judged against, as kernels/roofline
// measures the CPU's). Callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/function_ref.h"
#include "core/status.h"

namespace kiln::kernels::cuda {

// Median milliseconds of `launch` (enqueueing work on `stream`) over `reps` timed runs after
// `warmup` untimed ones; launch's own Status errors are returned.
core::Result<double> median_ms(core::FunctionRef<core::Status()> launch, int reps = 20, int warmup = 3,
                               cudaStream_t stream = nullptr);

// Best-of-`reps` GB/s of a kernel reading `bytes` of device memory (16-byte loads, grid-stride,
// every SM busy); bytes should exceed the L2 several times (default 4 GiB).
core::Result<double> read_bandwidth_gbps(size_t bytes = size_t(4) << 30, int reps = 10);

}  // namespace kiln::kernels::cuda
