// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers"; the reference implementation's gptq.py fasterquant) for groupwise INT4: the columns
// of W [rows, cols] are quantized in order, and each column's rounding error is spread over the
// columns not yet quantized, weighted by the inverse Hessian of the layer's squared output error on
// calibration inputs, H = X^T X. The quantizer is quant/int_quant.h's (the same group parameters,
// codes and layout as quantize_int4), so the result is an ordinary Int4Matrix: the same checkpoint
// layout and kernels as round-to-nearest.
//
// Steps (gptq.py, without act-order, static_groups off): dead columns (H_ii = 0) get H_ii = 1 and
// W[:, i] = 0; H += damp * mean(diag H) * I; U = the upper Cholesky factor of H^-1 (H^-1 = U^T U);
// for each column i in order: at a group's first column its parameters come from the group's
// current (already updated) weights; q = quantize(w_i); err = (w_i - q) / U_ii; w_j -= err * U_ij for
// j > i. Rows are independent (one row per task, deterministic for any thread count). H and U in
// double. With H = I (U = I) it is exactly round-to-nearest.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/int_quant.h"

namespace kiln::quant {

struct GptqOptions {
    int64_t group_size = 128;  // 32, 64 or 128
    Int4Mode mode = Int4Mode::kSymmetric;
    double damp = 0.01;  // times the mean of diag(H), added to the diagonal (raised tenfold, up to 3 times,
                         // when H is not numerically positive definite)
};

// H [cols, cols] = sum over the n rows of x [n, cols] of x^T x, divided by n.
std::vector<double> gptq_hessian(std::span<const float> x, int64_t n, int64_t cols, core::ThreadPool* pool);

// W [rows, cols] quantized with GPTQ under H [cols, cols]. kInvalidArgument for bad sizes, a bad
// group size or non-finite weights; kInternal when H stays indefinite after the damping retries.
core::Result<Int4Matrix> gptq_quantize_int4(std::span<const float> w, int64_t rows, int64_t cols,
                                            std::span<const double> hessian, const GptqOptions& options,
                                            core::ThreadPool* pool);

}  // namespace kiln::quant
