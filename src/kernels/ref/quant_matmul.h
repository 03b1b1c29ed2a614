// Scalar reference of the cpu matmul kernels (kernels/cpu/matmul.h), registered as Isa::kRef: the
// oracle every SIMD variant is tested against and the portable fallback. It performs exactly the
// integer arithmetic the SIMD kernels do (per weight block: exact integer dot of the quantized
// values, then fp32 scaling by d_w * d_x; E2M1 weights (MXFP4, NVFP4) use their codes doubled to
// exact integers and d_w * (d_x / 2)); FP8 weights (E4M3_B32, MXFP8) take f32 activations and sum
// e4m3 * x per block in double, times the block scale; and sums the per-block fp32 terms in double so that the
// oracle itself adds no accumulation error. Float weights (F32/F16/BF16) are summed in double.
// Quantization of activations follows ggml quantize_row_q8_0 / quantize_row_q8_K with
// round-half-to-even (see matmul.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/kernel_params.h"

namespace kiln::kernels::ref {

// x [k] -> k / 32 ActQ8 blocks. k a multiple of 32.
void quantize_row_q8(const float* x, ActQ8* dst, int64_t k);
// x [k] -> k / 256 ActQ8K blocks. k a multiple of 256.
void quantize_row_q8k(const float* x, ActQ8K* dst, int64_t k);

// x [k] -> one kI8Row activation row (matmul.h): ActI8Row header, then i8_row_padded(k) int8.
// dst needs no alignment.
void quantize_row_i8row(const float* x, void* dst, int64_t k);

// The kRef kernel for weight_type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, MXFP4, NVFP4, E4M3_B32, MXFP8, I8); nullptr for other types. Q8 kernels need k % 32 == 0 (NVFP4 too: two of
// its 16-element blocks per activation block; ops::make_linear checks this).
const MatmulKernel* ref_matmul_kernel(core::DType weight_type);

}  // namespace kiln::kernels::ref
