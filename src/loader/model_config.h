// ModelConfig: kiln's architecture-neutral hyper-parameters of a decoder-only transformer, built from
// whichever file described the model (HF config.json, GGUF metadata, a llama2.c header) and written
// back out as GGUF metadata or an HF config.json.
// GGUF keys follow llama.cpp (gguf-py constants: {arch}.context_length, {arch}.embedding_length,
// {arch}.attention.head_count, ...). Mistral is stored as GGUF architecture "llama", as llama.cpp
// does; a "llama" GGUF with {arch}.attention.sliding_window reads back as mistral (Llama has no
// sliding window). Three keys are kiln extensions: {arch}.rope.scaling.low_freq_factor /
// high_freq_factor (Llama-3 RoPE scaling) and {arch}.attention.max_window_layers (Qwen2/Qwen3: the
// first layer that uses the sliding window; absent means every layer, llama.cpp's meaning of
// sliding_window). llama.cpp instead stores Llama-3 RoPE scaling as precomputed frequency factors in
// a rope_freqs.weight tensor: without a {arch}.rope.scaling.type key kiln reads them into
// rope_freq_factors (each RoPE frequency is divided by its factor, as llama.cpp does). Gemma 3
// (GGUF arch gemma3) adds three kiln keys, each defaulting to what llama.cpp hard-codes:
// {arch}.attention.sliding_window_pattern (6), {arch}.rope.local_freq_base (10000) and
// {arch}.attention.query_pre_attn_scalar (head_dim). Mixture-of-experts files carry llama.cpp's
// {arch}.expert_count, expert_used_count, expert_feed_forward_length (default feed_forward_length),
// expert_shared_feed_forward_length (Qwen2-MoE) and expert_weights_norm (norm_topk_prob; llama.cpp
// reads it only for DeepSeek and hard-codes the others, which is the default here:
// formats::ArchNames::moe_norm_topk). Mixtral is a "llama" GGUF with an expert_count. gpt-oss adds
// kiln keys {arch}.swiglu_oai_alpha / swiglu_oai_limit (default 1.702 / 7.0, what llama.cpp
// hard-codes) and {arch}.rope.scaling.yarn_truncate (default false for gpt-oss, true otherwise);
// its MLP input norm is llama.cpp's blk.N.post_attention_norm (weight_names.h).
// Invariants after validate(): the architecture is in formats/architectures.h and the checks of
// formats/hyper_params.h hold (sizes positive and capped, num_heads a multiple of num_kv_heads,
// head_dim even, eps and theta positive, RoPE scaling coherent, bos/eos ids inside the vocabulary);
// llama has no sliding window, mistral no attention biases, qwen2 always q/k/v biases.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/llama2c.h"

namespace kiln::loader {

// The sizes, RoPE and token-id fields (formats::HyperParams, checked by check_hyper_params) plus
// what decides the architecture's tensors.
struct ModelConfig : formats::HyperParams {
    ModelConfig() {
        rms_norm_eps = 1e-5;
        rope_theta = 10000.0;
    }
    std::string arch = "llama";  // "llama", "mistral", "qwen2", "qwen3", "gemma3_text"
    std::string name;            // human-readable (general.name); may be empty
    // HyperParams notes: rope_scaling.type "" = none; sliding_window 0 = full attention;
    // layers >= max_window_layers use sliding_window (Qwen2/Qwen3); 0: all (Mistral).
    bool tie_word_embeddings = false;   // no output.weight: the classifier is token_embd
    bool attention_bias = false;        // attn_q/k/v have .bias (Qwen2), and attn_output too (has_output_bias)
    bool qk_norm = false;               // per-head RMSNorm of q and k before RoPE (Qwen3)
    std::string torch_dtype;            // from HF config; "" if unknown
    // llama.cpp's rope_freqs.weight ([head_dim / 2] f32, how Llama 3.1 / 3.2 GGUF files carry their
    // RoPE scaling): RoPE frequency i is divided by factor i. Empty when the file has none.
    std::vector<float> rope_freq_factors;
    // Gemma 3 (all off / 0 for the Llama family): the MLP's gate activation is GELU (tanh form)
    // instead of SiLU; the attention and MLP outputs are RMS-normed before their residual add
    // (post_attention_norm, post_ffw_norm: "sandwich" norms); the token embeddings are multiplied
    // by sqrt(hidden_size); attention scores are scaled by query_pre_attn_scalar^-0.5 (0: head_dim);
    // layer l slides unless (l + 1) % sliding_window_pattern == 0 (0: max_window_layers decides);
    // sliding layers rotate with base rope_local_theta and no scaling (0: as the others).
    // Norm weights are stored with Gemma's +1 already added (as llama.cpp's GGUF files hold them;
    // the HF loader adds it), so every family's RMSNorm is x / rms(x) * w.
    bool gelu_mlp = false;
    bool sandwich_norms = false;
    bool scale_embeddings = false;
    double query_pre_attn_scalar = 0;
    int64_t sliding_window_pattern = 0;
    double rope_local_theta = 0;
    // Gemma 2: attention scores and final logits soft-capped, x -> cap * tanh(x / cap); 0 = none.
    double attn_softcap = 0, final_softcap = 0;
    // OLMoE: the q and k RMSNorms span a token's whole projection (weights [q_dim] / [kv_dim]), not
    // each head ([head_dim]).
    bool qk_norm_full = false;
    // Mixture of experts: HyperParams' num_experts (> 0: every layer's MLP is a router over experts),
    // num_experts_used, expert_intermediate_size, shared_expert_intermediate_size, norm_topk_prob.
    bool moe() const { return num_experts > 0; }
    // gpt-oss: attention sinks (attn_sinks.weight [num_heads]); a biased router and experts whose
    // activation is the clamped SwiGLU, (u + 1) * g * sigmoid(swiglu_alpha * g) with g <= swiglu_limit
    // and |u| <= swiglu_limit (swiglu_limit 0: plain SwiGLU).
    bool attn_sinks = false;
    bool moe_biases = false;
    double swiglu_alpha = 0, swiglu_limit = 0;

    // Tensor parallelism (loader/tensor_parallel.h): this rank's output layer holds the vocabulary
    // rows [output_row_begin, output_row_begin + output_rows) (an output.weight of its own, tied
    // embeddings or not); 0 rows: all of them.
    int64_t output_row_begin = 0, output_rows = 0;
    int64_t output_layer_rows() const { return output_rows > 0 ? output_rows : vocab_size; }
    // The same for the token embeddings (vocabulary-parallel): this rank's token_embd holds the rows
    // of token ids [embed_row_begin, embed_row_begin + embed_rows); the step sums the ranks' lookups.
    int64_t embed_row_begin = 0, embed_rows = 0;
    int64_t embed_table_rows() const { return embed_rows > 0 ? embed_rows : vocab_size; }
    // Pipeline parallelism (loader/pipeline_parallel.h): this stage runs layers [stage_begin,
    // stage_end()) and holds only their tensors, the token embeddings only on the first stage (and on
    // the last when tied) and the output layer only on the last; the norms everywhere. Layer indices
    // stay the model's. stage_end_layer 0: to the last layer.
    int64_t stage_begin = 0, stage_end_layer = 0;
    int64_t stage_end() const { return stage_end_layer > 0 ? stage_end_layer : num_layers; }
    int64_t stage_layers() const { return stage_end() - stage_begin; }
    bool first_stage() const { return stage_begin == 0; }
    bool last_stage() const { return stage_end() == num_layers; }
    bool has_layer(int64_t l) const { return l >= stage_begin && l < stage_end(); }
    bool has_token_embeddings() const { return first_stage() || (last_stage() && tie_word_embeddings); }
    // Expert parallelism (loader/tensor_parallel.h): this rank holds experts [expert_begin,
    // expert_end()) of every mixture-of-experts layer; expert_end_id 0: all of them.
    int64_t expert_begin = 0, expert_end_id = 0;
    int64_t expert_end() const { return expert_end_id > 0 ? expert_end_id : num_experts; }
    bool has_expert(int64_t e) const { return e >= expert_begin && e < expert_end(); }

    int64_t q_dim() const { return num_heads * head_dim; }
    int64_t kv_dim() const { return num_kv_heads * head_dim; }
    // o_proj / attn_output bias: Llama and Qwen3 with attention_bias; Qwen2's output has none.
    bool has_output_bias() const { return attention_bias && arch != "qwen2" && arch != "qwen2_moe"; }
    // The attention window of one layer; 0 for full attention.
    int64_t window_for_layer(int64_t layer_idx) const {
        if (sliding_window_pattern > 0) return (layer_idx + 1) % sliding_window_pattern != 0 ? sliding_window : 0;
        return sliding_window > 0 && layer_idx >= max_window_layers ? sliding_window : 0;
    }
    // Whether layer l rotates with rope_local_theta (a sliding layer of a model that has one).
    bool local_rope_layer(int64_t layer_idx) const {
        return rope_local_theta > 0 && window_for_layer(layer_idx) > 0;
    }
    core::Status validate() const;
};

core::Result<ModelConfig> config_from_hf(const formats::HfConfig& hf);
// Reads general.architecture and the {arch}.* keys; tensor presence decides tied embeddings and
// attention biases, rope_freqs.weight the frequency factors. Unknown architecture -> kUnsupported; a
// rope_freqs.weight that is not [head_dim / 2] positive f32 factors -> kCorrupt.
core::Result<ModelConfig> config_from_gguf(const formats::GgufFile& gguf);
// llama2.c: RoPE theta 10000, RMSNorm eps 1e-5, BOS 1, EOS 2.
core::Result<ModelConfig> config_from_llama2c(const formats::Llama2cHeader& header);

// GGUF architecture string for a config ("llama" for mistral too).
std::string gguf_arch(const ModelConfig& config);
// Whether GGUF files of this architecture hold Q/K rows in rotate-half (NEOX) order, as llama.cpp's
// qwen2/qwen3 files do; llama files hold Meta's interleaved-pair order.
bool gguf_arch_uses_neox_rope(const std::string& gguf_arch_name);

// general.architecture plus the {arch}.* hyper-parameters, in a stable order.
std::vector<std::pair<std::string, formats::GgufValue>> config_to_gguf_metadata(const ModelConfig& config);
// HF config.json text. `torch_dtype` overrides config.torch_dtype when non-empty.
std::string config_to_hf_json(const ModelConfig& config, const std::string& torch_dtype = "");

}  // namespace kiln::loader
