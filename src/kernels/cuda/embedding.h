// Token embedding lookup on the GPU: out [n, hidden] = table [ids[t], :] for each of n token ids
// (device int32), f32 or bf16 rows copied as stored. Ids must lie in [0, vocab): the caller checks
// them on the host before the step (model::CpuModel::check_batch does); an id outside that range
// gives a zero row, never an out-of-bounds read. Callable from plain C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

core::Status embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n, float* out,
                       cudaStream_t stream = nullptr);
core::Status embedding(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
                       __nv_bfloat16* out, cudaStream_t stream = nullptr);
// A bf16 table into f32 rows (exact): the GPU model keeps its residual stream in f32.
core::Status embedding(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
                       float* out, cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
