// kiln quantize: any checkpoint kiln loads -> a compressed-tensors safetensors folder
// (compressed_tensors.h) that kiln loads back. The source is first dequantized to f32
// (to_f32_checkpoint), which is also the accuracy reference. Quantized: every layer's q/k/v/o and
// gate/up/down projections not named in `skip`; embeddings, norms, biases and the output layer stay
// f32. With awq (INT4 only), calibration activations pick per-input-channel scales per projection
// group (quant/awq.h), folded into the producer of each input so the f32 model is unchanged:
// q/k/v -> the attention norm, gate/up -> the FFN norm, down -> the up projection's rows, o -> the
// v projection's rows (only when q and v have the same width, i.e. without grouped-query attention).
// Then (awq_clip) each layer's v, o, gate, up and down weights, as they will be quantized, are
// clamped to per-group ranges searched on their (scaled) calibration inputs (quant/awq_clip.h).
// The scale search's loss is per group: the Linears' own output error (quant/awq.h), or AutoAWQ's
// block-output error (quant_tools/awq_block.h): the whole MLP's output for gate/up (awq_mlp_loss), the
// whole attention block's output for q/k/v (awq_attn_loss, on whole calibration sequences). By
// default q/k/v use the block loss and gate/up, o and down their own outputs (docs/quantization.md).
// With smoothquant_alpha >= 0 (INT8 only), SmoothQuant scales (quant/smoothquant.h) from the
// calibration activations' per-channel maxima are folded the same way into q/k/v (attention norm)
// and gate/up (FFN norm), as the reference implementation does for Llama-like models.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant_tools/calibration.h"
#include "loader/checkpoint.h"
#include "loader/compressed_tensors.h"

namespace kiln::quant_tools {

struct QuantizeOptions {
    loader::QuantScheme scheme;
    bool awq = false;                   // INT4 (kPackedInt) only; needs calib_tokens
    bool awq_duo_scaling = false;       // AWQ scales from activations and weights (quant/awq.h)
    bool awq_clip = true;               // AWQ weight clipping search after the scales (quant/awq_clip.h)
    bool awq_attn_loss = true;          // q/k/v scales by the attention block's output error (awq_block.h)
    bool awq_mlp_loss = false;          // gate/up scales by the MLP's output error (measured worse at g32)
    int64_t awq_attn_tokens = 2048;     // calibration rows of whole sequences for awq_attn_loss
    double smoothquant_alpha = -1;      // kInt8 only, needs calib_tokens: SmoothQuant with this alpha (< 0: off)
    bool gptq = false;                  // INT4 (kPackedInt) only; needs calib_tokens: GPTQ codes (quant/gptq.h), after AWQ if both
    int64_t gptq_samples = 4096;        // calibration rows per projection input for GPTQ's Hessians
    bool gptq_sequential = true;        // layer l's Hessians with layers < l already GPTQ-quantized
    bool gptq_act_order = false;        // GPTQ in decreasing order of diag H, groups fixed up front (quant/gptq.h)
    std::vector<int32_t> calib_tokens;  // calibration text, tokenized
    CalibrationOptions calibration;
    std::vector<std::string> skip;  // HF module names kept in f32 (e.g. model.layers.0.mlp.down_proj)
    std::string tokenizer_path;  // llama2.c sources: tokenizer .bin to embed ("" = tok512.bin / tokenizer.bin beside)
    // stage ("calibrate", "awq", "write"), done, total; called as work progresses.
    std::function<void(const char* stage, int64_t done, int64_t total)> progress;
};

struct AwqGroupReport {
    int64_t layer = 0;
    std::string group;  // "qkv", "o", "gate_up", "down"
    float alpha = 0;
    double rtn_error = 0, awq_error = 0;  // in the group's loss: Linear outputs, or the block's output
};

struct AwqClipReport {
    std::string weight;  // kiln name
    double base_error = 0, clip_error = 0;
};

struct QuantizeReport {
    int64_t quantized = 0, kept = 0;  // projection matrices quantized / kept in f32 by --skip
    // GPTQ on a mixture of experts: (layer, expert) pairs that got too few calibration tokens for a
    // Hessian (GptqCalibrateOptions::min_expert_rows) and were rounded to nearest instead.
    int64_t rtn_experts = 0;
    std::vector<AwqGroupReport> awq;
    std::vector<AwqClipReport> clip;
};

core::Result<QuantizeReport> quantize_checkpoint(const Checkpoint& source, const std::string& out_dir,
                                                 const QuantizeOptions& options, core::ThreadPool* pool);

}  // namespace kiln::quant_tools
