// GPTQ's calibration for `kiln quantize` (quant/gptq.h): the factor of the Hessian H = X^T X / n of
// every projection input of every layer on calibration text (one per input: q/k/v share one, gate/up
// another), for the writer to quantize each weight under its input's factor.
//
// Sequential (gptq.py's default, and the default here): layer l's inputs come from the model with
// layers 0 .. l-1 already replaced by their GPTQ weights (quantized under their own factors and
// dequantized back to f32), so each layer's rounding compensates for what the earlier layers' rounding
// did to its inputs; the residual stream of each calibration chunk is carried from layer to layer
// (CalibrationOptions::resume): layer l runs once with its own weights to give its inputs, and once
// with its GPTQ weights to move the stream on, so the passes cost two runs of each layer (the same
// numbers as re-running layers 0..l for every l, bit for bit, at a fraction of the cost). Otherwise
// one pass of the unquantized model gives every layer's inputs. Weights for which `skipped` is true
// stay f32 in the passes (they are not quantized in the output either). This is gptq.py's
// sequential mode without --true-sequential (AutoGPTQ's default also re-runs the layer between
// q/k/v, o, gate/up and down, so that o sees quantized q/k/v, and so on).
// Cost: two runs of each layer over the calibration tokens, and a new CpuModel per layer (packing
// included); each weight is GPTQ-quantized here and again by the writer. Memory: besides the factors (one [in, in] double matrix per input and layer, held
// until the write), sequential mode holds an f32 copy of every quantized projection of the layers
// done, about one more f32 copy of the model's projections at the end.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant_tools/calibration.h"
#include "loader/checkpoint.h"
#include "quant/gptq.h"

namespace kiln::quant_tools {

// Mixture of experts: each expert's gate/up and down inputs are the rows routed to it (calibration.h),
// the shared expert's gate/up input the layer's MLP input.
// Keyed by kiln weight name ("blk.3.attn_q.weight"); weights of one input share the factor.
using GptqFactors = std::map<std::string, std::shared_ptr<const quant::GptqFactor>>;

struct GptqCalibrateOptions {
    quant::GptqOptions gptq;         // group size and mode the passes quantize with
    CalibrationOptions calibration;  // max_samples: the Hessians' rows per input
    bool sequential = true;
    bool act_order = false;  // quant/gptq.h: columns in decreasing order of diag H, static groups
    std::function<bool(const std::string& kiln_name)> skipped;  // null: none
    // Mixture of experts: an expert input with fewer calibration rows than this (the tokens routed to
    // it) gets no factor, and the writer rounds its weights to nearest instead.
    int64_t min_expert_rows = 32;
    std::function<void(const char* stage, int64_t done, int64_t total)> progress;
};

// `checkpoint` holds f32 weights (to_f32_checkpoint); tokens are the calibration text's ids.
// kInvalidArgument when a layer's input got no calibration rows or the options are bad.
core::Result<GptqFactors> gptq_calibrate(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                                         const GptqCalibrateOptions& options, core::ThreadPool* pool);

}  // namespace kiln::quant_tools
