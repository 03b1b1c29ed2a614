// Quantization numerics: how far each projection weight moves when kiln quantizes it with a given
// scheme, and (with calibration activations) how far each projection's output moves. What
// `kiln numerics` prints.
// The quantized weight W' is exactly the one kiln would run: W goes through compress_weight (what
// `kiln quantize` writes), decompress_weight (what the loader builds: I8 rows with row scales for
// int8, GGML blocks with fp16 scales for w4 when `in` is a multiple of 32, f32 otherwise) and
// loader::dequantize_tensor_to.
// Per tensor W [rows = out, cols = in] (sums over all elements, in double):
//   SQNR_dB          = 10 log10(sum W^2 / sum (W - W')^2)   (+inf when W' == W)
//   rel_error        = ||W - W'||_F / ||W||_F               (= 10^(-SQNR/20))
//   max_abs_error    = max |W - W'|
//   output_rel_error = ||X W^T - X W'^T||_F / ||X W^T||_F over the sampled inputs X of that
//                      projection (calibration.h); NaN without activations.
// Weights are measured in the row order `kiln quantize` writes (HF order: Q/K rows rotate-half);
// every figure is invariant to a consistent row permutation, so they equal those of kiln's order.
// The reference W is the checkpoint's weights as f32 (for a quantized GGUF, its dequantized
// weights: the figures are then the error added on top of that file's own quantization).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant_tools/calibration.h"
#include "loader/checkpoint.h"
#include "loader/compressed_tensors.h"

namespace kiln::quant_tools {

struct TensorNumerics {
    std::string name;  // kiln canonical name, e.g. blk.0.attn_q.weight
    int64_t rows = 0, cols = 0;
    double sqnr_db = 0;
    double rel_error = 0;
    double max_abs_error = 0;
    double output_rel_error = std::numeric_limits<double>::quiet_NaN();
};

struct NumericsSummary {
    int64_t num_tensors = 0;
    int64_t num_params = 0;    // elements of the measured projections
    double mean_sqnr_db = 0;   // parameter-weighted mean of the per-tensor SQNR (dB)
    double total_sqnr_db = 0;  // all measured weights as one signal: 10 log10(sum W^2 / sum (W-W')^2)
    double worst_sqnr_db = 0;  // the lowest per-tensor SQNR ...
    std::string worst_tensor;  // ... and its tensor
    double mean_output_rel_error = std::numeric_limits<double>::quiet_NaN();  // parameter-weighted; NaN without X
    double worst_output_rel_error = std::numeric_limits<double>::quiet_NaN();
    std::string worst_output_tensor;
};

struct NumericsReport {
    loader::QuantScheme scheme;
    std::vector<TensorNumerics> tensors;  // layer by layer: q, k, v, o, gate, up, down
    NumericsSummary summary;
};

// `checkpoint`: float weights (to_f32_checkpoint); a projection that is not F32 is kInvalidArgument.
// `activations`: collect_activations over the same checkpoint (one entry per layer), or null for
// weight figures only. Tensors are measured in parallel on `pool` (may be null: one thread).
// Errors from compress_weight / decompress_weight come back naming the tensor.
core::Result<NumericsReport> measure_quant_numerics(const Checkpoint& checkpoint, const loader::QuantScheme& scheme,
                                                    const std::vector<LayerActivations>* activations,
                                                    core::ThreadPool* pool);

}  // namespace kiln::quant_tools
