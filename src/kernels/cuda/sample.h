// Sampling on the GPU: kernels/ref/sample.h's pipeline (logit bias, repetition / frequency /
// presence penalties from sparse entries, temperature, top-k, top-p, min-p, the draw u taken on the
// host) for every logits row of a step, so that a sampling step copies one int32 per sequence back
// instead of a row of vocab floats. One block of 1024 threads per row; top-k and top-p find their
// thresholds by radix selection (four 8-bit passes over order-preserving keys, counts or fixed-point
// masses in a shared histogram, ties to the lower ids by a selection over ids) instead of sorting;
// the draw sums each thread's run of ids, scans the runs and walks the one that holds u. Plain C++
// header over the CUDA runtime API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/kernel_params.h"

namespace kiln::kernels::cuda {

// ids [rows] = the token sampled from each row of logits [rows, vocab] (overwritten: scratch) with
// rows [rows] (device) and the adjustment entries they point into (adjust [num_adjust], device;
// may be null when num_adjust is 0). Every row's entry range must lie in [0, num_adjust) (checked by
// the kernel: a row whose range does not gets id -1). kInvalidArgument for bad sizes (vocab
// outside [1, 2^24]) or null pointers.
core::Status sample_rows(float* logits, int64_t rows, int64_t vocab, const kernels::SampleRow* row_params,
                         const kernels::LogitAdjustment* adjust, int64_t num_adjust, int32_t* ids,
                         cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
