// Row sampling as the GPU does it (kernels/cuda/sample.h): the plain structs a step hands the
// device and the scalar reference of the kernel, its test oracle.
//
// The pipeline is sampling::Sampler's (sampling/sampler.h: logit bias, repetition penalty,
// frequency/presence penalties, temperature, top-k, top-p, min-p, a draw) with three differences
// that make it a one-pass-per-step GPU algorithm:
// - the history enters as a sparse list of LogitAdjustment entries built on the host
//   (Sampler::plan_row), not as the token ids;
// - the uniform draw `u` is taken on the host before the step (Sampler::plan_row draws it for every
//   non-greedy row, also for a row that turns out to be all -inf, where the Sampler draws nothing);
// - the draw walks the kept tokens' cumulative probability in ascending id order (the Sampler walks
//   them by descending probability when top-k or top-p ran): the same distribution, so seeded
//   requests are reproducible on one device but draw different tokens on the CPU and the GPU.
// Top-p compares masses in fixed point (each probability truncated to a multiple of 2^-40: within
// 2^-40 * vocab of the Sampler's double sums, far inside its 1e-6 slack).
// Ties are broken as the Sampler breaks them: equal logits (top-k) or probabilities (top-p) keep the
// lower ids; -0 and +0 are equal. Logits are finite, -inf or NaN (NaN counts as -inf); a +inf logit
// (which no model emits and validated biases cannot make) has no defined result here, as in the
// Sampler.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernel_params.h"

namespace kiln::kernels::ref {

using kernels::LogitAdjustment;  // the shared structs live in the neutral kernels header
using kernels::SampleRow;

using kernels::kSampleGreedyTemperature;  // the sampling contract's constants (kernel_params.h)
using kernels::kTopPFixedScale;
using kernels::kExpBlock;
using kernels::kTopPSlack;
using kernels::top_p_mass;
using kernels::top_p_target;

// Applies a row's adjustments (biases and penalties) to logits [vocab] in place.
void apply_adjustments(std::span<float> logits, const SampleRow& row, std::span<const LogitAdjustment> adjust);

// The pipeline up to the draw on logits [vocab] (scratch). Returns the token when no draw is needed
// (greedy, or every logit -inf or NaN: the Sampler's lowest-id fallback); otherwise -1, with
// logits[i] = token i's probability after top-k, top-p and min-p (0 for the dropped ones; not yet
// renormalized) and *kept_mass = their sum.
int32_t sample_row_filter(std::span<float> logits, const SampleRow& row, std::span<const LogitAdjustment> adjust,
                          double* kept_mass);

// The CPU sampler's softmax (kernels/cpu/softmax.h's references): scale_max: x [n] *= s (NaN: -inf),
// returns the largest (-inf when all are); exp_shift: p [n] = exp(x [n] - m) (0 for -inf or NaN x),
// block_sums [ceil(n / kExpBlock)] = each block's sum of p, in double, in order.
float scale_max(float* x, float s, int64_t n);
void exp_shift(const float* x, float m, float* p, double* block_sums, int64_t n);

// The whole pipeline: the sampled token. logits [vocab] is scratch.
int32_t sample_row(std::span<float> logits, const SampleRow& row, std::span<const LogitAdjustment> adjust);

}  // namespace kiln::kernels::ref
