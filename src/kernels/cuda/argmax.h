// Greedy sampling on the GPU: the index of each logits row's maximum, so that a greedy decode step
// copies one int32 per sequence back to the host instead of a row of vocab floats. Same rule as
// sampling::argmax_lowest_id on the host: NaN entries are skipped, the lowest id wins ties, a row
// of only NaN gives 0. Callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

// ids [rows] = argmax of each row of logits [rows, n] (device pointers). kInvalidArgument for bad
// sizes (n outside [1, 2^31)) or null pointers.
core::Status argmax_rows(const float* logits, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
