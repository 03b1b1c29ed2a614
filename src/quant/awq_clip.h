// AWQ weight clipping search, scalar reference (AutoAWQ's auto_clip, after Lin et al. 2023, "AWQ:
// Activation-aware Weight Quantization for LLM Compression and Acceleration"). Round-to-nearest INT4
// spends its 16 levels on a group's full range; a group with one large weight rounds all the others
// coarsely. Clamping the group to a shrunk range first trades a large error on the few clamped
// weights for a finer grid on the rest; the shrink is chosen per (output row, group) by the error it
// causes in the group's share of the output on calibration inputs.
//
// Search, for W [rows, in] (the final weights that will be quantized, after any AWQ scale folding)
// and its input x [n, in] (the input those weights see, i.e. already divided by the folded scales):
//   for each row r and group g (columns [g * group_size, min(in, (g + 1) * group_size))), and each
//   ratio c = 1 - i / grid for i = 0, 1, .. while i < max_shrink * grid (AutoAWQ: 1.0 down to 0.55):
//     range: kSymmetric [-c * amax, c * amax]; kAsymmetric [c * min(min, 0), c * max(max, 0)] (the
//     zero-including range int_quant.h quantizes, both ends shrunk toward 0);
//     W'_rg = dequant(quant_int4(clamp(W_rg, range)));
//     err(r, g, c) = sum over the sampled rows i of (x_ig . (W_rg - W'_rg))^2,
//   and keeps the ratio with the smallest err (the first on ties; c = 1 is plain RTN). Groups are
//   quantized independently (a group's INT4 scale depends only on its own weights), so each (r, g) is
//   its own one-dimensional search. The sampled rows are min(n, max_samples), evenly strided (row
//   i * n / m), as in awq.h.
// Reported errors are sum over (r, g) of err / (m * rows): the searched per-group error, which
// ignores the cross terms between groups of one row; clip_error <= base_error always.
//
// apply_awq_clip clamps W in place to the chosen ranges; quantizing the clamped W with the same group
// size and mode then uses exactly those ranges (the clamped extremes are attained).
//
// AutoAWQ skips q and k (their errors pass through the q.k product, where the output error of the
// projection alone is a poor proxy); the caller decides which weights to clip.
//
// Invariants: deterministic for any thread count (per-row work, no shared sums); caller data is
// validated and errors come back as Status.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/int_quant.h"

namespace kiln::quant {

struct AwqClipOptions {
    int64_t group_size = 128;               // INT4 group along the input dimension: 32, 64 or 128
    Int4Mode mode = Int4Mode::kAsymmetric;  // the INT4 variant that will quantize the clipped weights
    int grid = 20;                          // ratios 1 - i / grid ...
    double max_shrink = 0.5;                // ... for i < max_shrink * grid (in [0, 1))
    int64_t max_samples = 512;              // at most this many rows of x, evenly strided
};

struct AwqClipResult {
    int64_t rows = 0, cols = 0, group_size = 0;
    int64_t groups_per_row = 0;  // ceil(cols / group_size)
    std::vector<float> lo, hi;   // [rows, groups_per_row] clamp range; lo = -hi for kSymmetric
    std::vector<float> ratio;    // [rows, groups_per_row] the chosen shrink c (1 = not clipped)
    double base_error = 0;       // searched error without clipping (plain RTN)
    double clip_error = 0;       // the same with the chosen ranges; <= base_error
    int64_t num_samples = 0;     // rows of x actually used
};

// W is [rows, in] row-major, x is [n, in]. pool may be null (serial); with a pool the rows are split
// across its threads.
core::Result<AwqClipResult> awq_clip_search(std::span<const float> w, int64_t rows, int64_t in,
                                            std::span<const float> x, int64_t n, const AwqClipOptions& options,
                                            core::ThreadPool* pool = nullptr);

// Clamps W [rows, cols] in place to clip's per-group ranges; shapes must match the search's.
core::Status apply_awq_clip(std::span<float> w, int64_t rows, int64_t cols, const AwqClipResult& clip);

}  // namespace kiln::quant
