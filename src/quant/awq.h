// AWQ activation-aware per-input-channel scale search, scalar reference (Lin et al. 2023, "AWQ:
// Activation-aware Weight Quantization for LLM Compression and Acceleration"; the grid search follows
// AutoAWQ's auto_scale). It picks scales s [in] for one or more Linear weights W_k [out_k, in] that
// read the same input x, so that quantizing W_k * diag(s) to INT4 (int_quant.h) loses less of the
// output x W_k^T than quantizing W_k itself.
//
// Search: x_mean[j] = mean_i |x[i, j]| over all n calibration rows; for alpha = a / grid, a = 0 ..
// grid - 1, the candidate scales are
//   activation-only (the paper): s = max(x_mean^alpha, 1e-4);
//   duo (AutoAWQ's default):     s = max(x_mean^alpha / (w_mean^(1 - alpha) + 1e-4), 1e-4), where
//     w_mean[j] = mean over all rows of all W_k of |W[r, j]| / (max_{j' in group(j)} |W[r, j']| + 1e-6)
//     (each weight normalized by the amax of its own quantization group; awq_weight_mean);
// then s /= sqrt(max(s) * min(s)). W'_k = dequant(quant_int4(W_k * diag(s))) * diag(1/s);
// error(s) = sum over k, i, o of (x W_k^T - x W'_k^T)[i, o]^2 divided by n_used * sum_k out_k (the
// mean over the concatenated outputs), on n_used = min(n, max_samples) rows of x taken evenly strided
// (row i * n / n_used). Plain RTN (s = 1) is always a candidate too, tried first; the smallest error
// wins (the first on ties), so awq_error <= rtn_error always holds. Activation-only alpha = 0 is s = 1
// itself; duo alpha = 0 is not (it is s ~ 1 / w_mean).
//
// Folding contract (what the caller must do with the scales): the model must keep computing the
// same function, so the caller
//   1. divides the operation that produces x by s: x'[:, j] = x[:, j] / s[j]. For an input that
//      comes out of RMSNorm/LayerNorm this is weight[j] /= s[j] (and bias[j] /= s[j]); for an input
//      that is the output of a previous Linear W_prev [in, in_prev] it is row j of W_prev (and its
//      bias) divided by s[j];
//   2. quantizes every W_k * diag(s) (column j multiplied by s[j]): quantize_int4_scaled below does
//      this without the caller making a scaled copy; all W_k that share x must use the same s.
// Then x' (W_k diag(s))^T = x W_k^T before quantization. The scales are positive and finite.
//
// Invariants: deterministic (the result does not depend on the thread count: each output row's error
// is a separate double, summed in row order); inputs are validated and errors returned as Status,
// never aborts on caller data. The weight clipping search (AutoAWQ auto_clip) is in awq_clip.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/int_quant.h"

namespace kiln::quant {

struct AwqOptions {
    int64_t group_size = 128;               // INT4 group along the input dimension: 32, 64 or 128
    Int4Mode mode = Int4Mode::kAsymmetric;  // the INT4 variant the scales are searched for
    int grid = 20;                          // alphas tried: 0, 1/grid, ..., (grid-1)/grid
    int64_t max_samples = 512;              // at most this many rows of x, evenly strided
    bool duo_scaling = false;               // s from x_mean and w_mean (AutoAWQ) instead of x_mean alone
};

struct AwqResult {
    std::vector<float> scales;  // [in], s_j > 0; all 1 when !scaled
    bool scaled = false;        // false: plain RTN (s = 1) won, there is nothing to fold
    float best_alpha = 0;       // the winning alpha (0 when !scaled)
    double rtn_error = 0;       // mean squared output error for alpha = 0 (plain RTN)
    double awq_error = 0;       // the same for best_alpha; <= rtn_error
    int64_t num_samples = 0;    // rows of x actually used
};

// Searches one s for all the weights. weights[k] is W_k, row-major [out_rows[k], in]; x is the
// calibration input [n, in] of these Linears (rows are tokens). pool may be null (runs serially);
// with a pool the output rows are split across its threads.
core::Result<AwqResult> awq_search(std::span<const std::span<const float>> weights, std::span<const int64_t> out_rows,
                                   int64_t in, std::span<const float> x, int64_t n, const AwqOptions& options,
                                   core::ThreadPool* pool = nullptr);

// The loss of one candidate s [in] for awq_search_loss: any non-negative measure of the output error
// that quantizing the scaled weights causes (e.g. a whole block's output, quant_tools/awq_block.h); +inf
// when the scaled weights cannot be quantized. It must be a pure function of s.
using AwqLoss = std::function<double(std::span<const float> scales)>;

// The same search as awq_search (the candidates of the top of this file, plain RTN first, the first
// smallest loss wins) with a caller-supplied loss: x_mean [in] is the activation statistic
// (channel_mean_abs), w_mean [in] the weight statistic (only read with duo_scaling). num_samples is
// left 0 for the caller to fill in. kInvalidArgument when the RTN loss is not finite, or for bad
// options or sizes.
core::Result<AwqResult> awq_search_loss(std::span<const float> x_mean, std::span<const float> w_mean,
                                        const AwqOptions& options, const AwqLoss& loss);

// The per-channel mean of |x| over the rows of x [n, in], accumulated in double: AWQ's activation
// statistic. Sizes are the caller's to get right (KILN_CHECK); an empty x gives zeros.
std::vector<float> channel_mean_abs(std::span<const float> x, int64_t n, int64_t in);

// AutoAWQ's duo-scaling weight statistic over the rows of all weights [out_rows[k], in]: w_mean[j] =
// mean over rows r of |W[r, j]| / (amax of the quantization group of (r, j) + 1e-6), in double. The
// last group of a row may be short (in % group_size). Sizes are the caller's to get right (KILN_CHECK).
std::vector<float> awq_weight_mean(std::span<const std::span<const float>> weights, std::span<const int64_t> out_rows,
                                   int64_t in, int64_t group_size);

// The candidate scales for one alpha (see the top of this file); w_mean is ignored unless duo.
std::vector<float> awq_scales(std::span<const float> x_mean, std::span<const float> w_mean, double alpha, bool duo);

// The error awq_search minimizes, for given scales: the mean over
// samples and outputs of (x W^T - x W'^T)^2 with W' = dequant(quant_int4(W * diag(s))) * diag(1/s),
// summed over the rows of all weights and divided by n_used * sum(out_rows). Uses the same sample
// rows (max_samples, evenly strided) as awq_search, so awq_error == awq_output_error(scales).
core::Result<double> awq_output_error(std::span<const std::span<const float>> weights,
                                      std::span<const int64_t> out_rows, int64_t in, std::span<const float> x,
                                      int64_t n, std::span<const float> scales, const AwqOptions& options,
                                      core::ThreadPool* pool = nullptr);

// quantize_int4(W * diag(scales)) for W [rows, cols] and scales [cols], without the caller making the
// scaled copy. Scales must be positive and finite.
core::Result<Int4Matrix> quantize_int4_scaled(std::span<const float> w, int64_t rows, int64_t cols,
                                              std::span<const float> scales, int64_t group_size, Int4Mode mode);

}  // namespace kiln::quant
