// The model on a GPU for the commands that run one sequence at a time (perplexity): a thin handle
// over model::CudaModel. It exists only in a kiln built with the CUDA backend (the cuda-release
// preset); elsewhere opening one says so.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/kernel_params.h"
#include "loader/checkpoint.h"

namespace kiln::tools {

// "cpu" -> -1, "cuda" -> 0, "cuda:N" -> N; nullopt for anything else.
std::optional<int> parse_device(const std::string& device);

struct GpuSequenceOptions {
    int device = 0;
    double gpu_memory_utilization = 0.9;
    int64_t max_seq_len = 0;   // 0: the model's context
    int64_t max_tokens = 512;  // tokens (and rows of logits) of one forward
    kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;  // as the CPU's cache by default
};

class GpuSequence {
public:
    virtual ~GpuSequence() = default;
    virtual std::string describe() const = 0;
    // `tokens` at positions start.. of the one sequence (K/V as options.kv_dtype); logits as
    // model::CudaModel::forward.
    virtual core::Status forward(std::span<const int32_t> tokens, int64_t start, bool all_logits,
                                 std::vector<float>& logits) = 0;
};

// kUnsupported in a build without CUDA or without a device; the model's own errors otherwise.
core::Result<std::unique_ptr<GpuSequence>> open_gpu_sequence(const loader::Checkpoint& checkpoint,
                                                             const GpuSequenceOptions& options);

}  // namespace kiln::tools
