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
// current (already updated) weights (gptq.py, which updates lazily in blocks of 128 columns, reads
// them from the block's start for g < 128: a group inside a block does not see that block's earlier
// updates there); q = quantize(w_i); err = (w_i - q) / U_ii; w_j -= err * U_ij for j > i. Rows are
// independent (deterministic for any thread count). H and U in double, damp = 0.01 (times
// mean(diag H); tenfold, up to three times, when H is not numerically positive definite). With
// H = I (U = I / sqrt(1.01)) it is exactly round-to-nearest.
//
// Act-order (gptq.py's --act-order with --static-groups; llmcompressor's actorder="weight"): the
// columns are processed in decreasing order of diag H (the inputs with the most energy first; ties
// and dead columns, H_ii = 0, keep their index order, dead ones last), and U is the factor of H with
// rows and columns in that order. Groups stay runs of group_size consecutive columns of W, so the
// checkpoint needs no g_idx; each group's parameters are fixed up front from the original weights
// (once columns are processed out of order a group has no "first column" to take them at).
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
};

// H [cols, cols] = sum over the n rows of x [n, cols] of x^T x, divided by n (x holds n * cols values).
std::vector<double> gptq_hessian(std::span<const float> x, int64_t n, int64_t cols, core::ThreadPool* pool);

// What GPTQ needs of a Hessian, computed once for every weight that reads the same input: the dead
// columns and U [cols, cols], the upper Cholesky factor of the damped H^-1.
struct GptqFactor {
    int64_t cols = 0;
    std::vector<uint8_t> dead;   // [cols]: no calibration signal (H_ii = 0): weights zeroed
    std::vector<int64_t> order;  // act-order: the columns in processing order; empty: 0, 1, ..., cols - 1
    std::vector<double> u;       // [cols, cols], upper triangular, rows and columns in processing order
};
// kInvalidArgument for a Hessian of the wrong size; kInternal when it stays indefinite after the
// damping retries.
core::Result<GptqFactor> gptq_factor(std::span<const double> hessian, int64_t cols, double damp = 0.01,
                                     bool act_order = false);

// W [rows, cols] quantized with GPTQ under a factor of its input's Hessian. kInvalidArgument for bad
// sizes, a bad group size or non-finite weights.
core::Result<Int4Matrix> gptq_quantize_int4(std::span<const float> w, int64_t rows, int64_t cols,
                                            const GptqFactor& factor, const GptqOptions& options,
                                            core::ThreadPool* pool);

}  // namespace kiln::quant
