// SmoothQuant (Xiao et al. 2023, "SmoothQuant: Accurate and Efficient Post-Training Quantization for
// Large Language Models"): per-input-channel scales that move activation outliers into the weights
// before INT8 W8A8 quantization. For the Linears W_k [out_k, in] that read one input x:
//   s_j = max(act_max_j^alpha / w_max_j^(1 - alpha), 1e-5)      (the reference smooth.py clamps the same)
// with act_max_j = max |x[:, j]| over the calibration tokens and w_max_j = max over all rows of all
// W_k of |W[r, j]|; a channel whose act_max or w_max is 0 (or not finite) gets s_j = 1. alpha is the
// migration strength in [0, 1] (0.5 in the paper; 0 leaves the activations alone: s = 1 / w_max^1).
// The caller folds s like AWQ's scales (quant/awq.h "Folding contract"): x / s into the producer of
// x (a norm's weight), every W_k column j times s_j.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kiln::quant {

// Per-channel max |x| over the rows of x [n, in] (0 for an empty x). NaN entries are ignored.
std::vector<float> channel_abs_max(std::span<const float> x, int64_t n, int64_t in);

// The scales above. kInvalidArgument for alpha outside [0, 1], act_max.size() != in, or a weight whose
// size is not a multiple of in.
core::Result<std::vector<float>> smoothquant_scales(std::span<const float> act_max,
                                                    std::span<const std::span<const float>> weights, int64_t in,
                                                    double alpha);

}  // namespace kiln::quant
