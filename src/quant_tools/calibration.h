// Calibration for quantization: runs a model over calibration tokens (fp32 activations, the
// reference path) and keeps a sample of the inputs of every layer's projection groups (LinearInput
// in llama.h), e.g. for the AWQ scale search. Samples are token rows taken at an even stride over
// all tokens, so every part of the text is represented; the same inputs serve every matrix of a
// group (q/k/v share one input, gate/up another). For losses that need whole sequences (AWQ's
// attention-block loss, quant_tools/awq_block.h) it also keeps the q/k/v input of a few whole chunks: the
// first tokens of chunks picked at an even stride, each a sequence starting at position 0 (every
// chunk starts a fresh context), at most max_seq_tokens rows in all.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"

namespace kiln::quant_tools {

// The pipelines run the model (model::CpuModel) over checkpoints from the loader.
using loader::Checkpoint;
using loader::ModelConfig;
using loader::TensorRef;
using model::KvCache;
using model::LinearInput;
using model::CpuModel;

struct CalibrationOptions {
    int64_t max_samples = 512;   // token rows kept per projection input
    int64_t chunk_tokens = 512;  // tokens per forward pass (each chunk starts a fresh context)
    int64_t max_seq_tokens = 0;  // q/k/v input rows of whole sequences kept per layer (0 = none)
    int64_t layer = -1;          // keep only this layer's inputs (the others stay empty); -1 = every layer
    // With layer >= 0: run that layer alone, from each chunk's residual stream entering it
    // ((*resume)[chunk], [chunk tokens, hidden]; an empty entry: from the embeddings, for layer 0),
    // and leave the stream leaving it in its place. Sequential GPTQ carries the stream from layer to
    // layer this way instead of re-running the earlier layers (model/transformer.h StepOptions::resid).
    std::vector<std::vector<float>>* resume = nullptr;
};

// Per layer: for each LinearInput (kQkv, kAttnOut, kGateUp, kDown in that order) a [rows, cols] sample.
struct LayerActivations {
    std::array<std::vector<float>, 4> x;
    std::array<int64_t, 4> rows{}, cols{};
    // Per input: max |x[:, j]| over every calibration token (not only the samples), for SmoothQuant.
    std::array<std::vector<float>, 4> abs_max;
    // The kQkv input of whole sequences: [sum(seq_lens), cols[kQkv]], sequence after sequence, row
    // p of a sequence at position p.
    std::vector<float> qkv_seq;
    std::vector<int64_t> seq_lens;
    // Mixture of experts: per expert (index e + 1; 0 is the shared expert, down input only) and input
    // (0: gate/up, 1: down), a sample of the rows routed to it, at most 2 * max_samples taken at an
    // even stride over every row it got (the stride doubles as rows come); `seen` counts them all.
    struct ExpertSample {
        std::vector<float> x;
        int64_t rows = 0, cols = 0, seen = 0, stride = 1;
    };
    std::vector<std::array<ExpertSample, 2>> experts;
};

// `checkpoint` should hold float weights (to_f32_checkpoint in convert.h), so that the activations
// are the reference ones and the f32 kernels run (quantized weights would quantize activations).
// `tokens`: the calibration text's ids (BOS included where the tokenizer adds one; non-empty).
// progress(done, total) is called after each chunk when set.
core::Result<std::vector<LayerActivations>> collect_activations(
    const Checkpoint& checkpoint, const std::vector<int32_t>& tokens, core::ThreadPool* pool,
    const CalibrationOptions& options, const std::function<void(int64_t, int64_t)>& progress = {});
// The same over a model already made (from such a checkpoint); its hooks and layer settings are
// replaced.
core::Result<std::vector<LayerActivations>> collect_activations(
    CpuModel& model, const std::vector<int32_t>& tokens, const CalibrationOptions& options,
    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kiln::quant_tools
