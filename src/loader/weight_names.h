// Tensor naming and Q/K row order across checkpoint formats.
// kiln's canonical names are GGUF's (llama.cpp gguf-py tensor_mapping: token_embd.weight,
// blk.N.attn_q.weight, ...); HF checkpoints use transformers' module paths
// (model.layers.N.self_attn.q_proj.weight, ...). kiln's canonical Q/K row order is Meta's: RoPE
// rotates interleaved pairs (2i, 2i+1) of each head. HF checkpoints store Q/K rows permuted for
// rotate-half RoPE (pairs (i, i + head_dim/2)); transformers' convert_llama_weights_to_hf.py does
// w.view(n_heads, dim1 / n_heads / 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2). A permutation
// moves whole rows, so it is bit-exact for every dtype, quantized ones included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "loader/model_config.h"

namespace kiln::loader {

// nullopt when the name is not one of the known per-architecture tensors. model_type (ModelConfig::arch)
// matters for Gemma 3, whose post_attention_layernorm is the attention output's norm
// (post_attention_norm) and pre_feedforward_layernorm the MLP input's (ffn_norm); "" = Llama family.
std::optional<std::string> hf_to_gguf_name(const std::string& hf_name, const std::string& model_type = "");
std::optional<std::string> gguf_to_hf_name(const std::string& gguf_name, const std::string& model_type = "");
// A GGUF file's tensor name as kiln's canonical one, and back: they differ where llama.cpp names a
// tensor by its family (gpt-oss: the MLP's input norm is blk.N.post_attention_norm.weight, kiln's
// ffn_norm); every other name is the same.
std::string gguf_to_canonical_name(const std::string& gguf_name, const ModelConfig& config);
std::string canonical_to_gguf_name(const std::string& name, const ModelConfig& config);
// Buffers HF checkpoints sometimes save that are not weights (rotary_emb.inv_freq).
bool is_hf_ignored_tensor(const std::string& hf_name);

// How many RoPE heads the rows (first dimension) of a canonical tensor split into, or 0 when the
// tensor's rows are not in RoPE order: attn_q.{weight,bias} -> num_heads,
// attn_k.{weight,bias} -> num_kv_heads, attn_q_norm/attn_k_norm.weight ([head_dim]) -> 1.
int64_t rope_permute_heads(const std::string& gguf_name, const ModelConfig& config);

enum class RopeOrder { kInterleaved, kRotateHalf };

// Copies `rows` rows of `row_bytes` bytes from src to dst, reordered into `to` order from the other
// one. rows must be num_heads * head_dim with head_dim even (kInvalidArgument otherwise).
// src and dst must not overlap.
core::Status permute_rope_rows(const uint8_t* src, uint8_t* dst, uint64_t rows, uint64_t row_bytes, uint64_t num_heads,
                               RopeOrder to);

}  // namespace kiln::loader
