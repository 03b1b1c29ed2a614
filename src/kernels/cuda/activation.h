// SwiGLU on the GPU: act = silu(gate) * up over rows laid out as the gate/up projection writes them
// (kernels/ref silu_mul; gate_up [rows, 2F] = [gate | up]). f32 or bf16 activations, f32
// arithmetic (expf, so within a few ulp of the reference's std::exp). Callable from plain C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::kernels::cuda {

// act [rows, F] = silu(gate_up[:, :F]) * gate_up[:, F:]; device pointers. kInvalidArgument on bad
// sizes or null pointers.
core::Status silu_mul_rows(const float* gate_up, float* act, int64_t rows, int64_t F, cudaStream_t stream = nullptr);
core::Status silu_mul_rows(const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t rows, int64_t F,
                           cudaStream_t stream = nullptr);
// f32 gate/up, act rounded once to the 16-bit input type of the down projection.
core::Status silu_mul_rows(const float* gate_up, __nv_bfloat16* act, int64_t rows, int64_t F,
                           cudaStream_t stream = nullptr);
core::Status silu_mul_rows(const float* gate_up, __half* act, int64_t rows, int64_t F, cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
