// Hyper-parameter checks every model configuration must pass, whichever file it came from (HF
// config.json, GGUF metadata, a llama2.c header). They live here, once, so that parse_hf_config and
// loader::ModelConfig::validate agree; errors spell each field the way the source does (config.json
// names for HF files, kiln's ModelConfig names otherwise).
// Checks: every size positive and under a cap; num_heads a multiple of num_kv_heads; head_dim even
// (RoPE rotates pairs); eps and theta positive and finite; sliding_window and max_window_layers not
// negative; RoPE scaling factor positive, and for "llama3" (transformers
// _compute_llama3_parameters) original_max_position_embeddings > 0 and low/high frequency factors
// positive and different (it divides by their difference); bos/eos ids in [0, vocab_size); with
// experts: at most 4096 of them, 1 <= num_experts_used <= num_experts, expert sizes in range.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::formats {

// rope_scaling / rope_parameters. `type` is "" when absent or "default".
struct RopeScaling {
    std::string type;  // "llama3", "linear", "yarn", "dynamic", "longrope", ...
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;  // 0 when not given
    double low_freq_factor = 1.0;                  // llama3
    double high_freq_factor = 4.0;                 // llama3
    double beta_fast = 32.0;                       // yarn
    double beta_slow = 1.0;                        // yarn
    bool truncate = true;                          // yarn: the ramp's ends rounded to whole dimensions
    std::optional<double> attention_factor;        // yarn, longrope (mscale of the attention logits)
    // longrope (Phi-3): per-frequency divisors of the RoPE frequencies [head_dim / 2], short_factor
    // for positions < original_max_position_embeddings, long_factor from there on.
    std::vector<double> short_factor, long_factor;
    bool operator==(const RopeScaling&) const = default;
};

struct HyperParams {
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    int64_t max_seq_len = 0;
    double rms_norm_eps = 0;
    double rope_theta = 0;
    int64_t sliding_window = 0;
    int64_t max_window_layers = 0;
    RopeScaling rope_scaling;
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;
    // Mixture of experts (num_experts 0: a dense MLP). A token's MLP output is the weighted sum of
    // the num_experts_used experts its router picks: softmax over the num_experts router logits,
    // the num_experts_used largest (ties to the lower expert id), renormalized to sum 1 when
    // norm_topk_prob; plus, with shared_expert_intermediate_size > 0, a shared expert whose output
    // is scaled by sigmoid(x . shared gate). Each expert is a gated MLP of expert_intermediate_size.
    int64_t num_experts = 0;
    int64_t num_experts_used = 0;
    int64_t expert_intermediate_size = 0;
    int64_t shared_expert_intermediate_size = 0;
    bool norm_topk_prob = false;
};

enum class FieldNames { kHf, kKiln };

// kCorrupt "<where>: <field> ..." for the first check that fails.
core::Status check_hyper_params(const HyperParams& p, FieldNames names, const std::string& where);

}  // namespace kiln::formats
