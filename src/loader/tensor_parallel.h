// Tensor-parallel slicing at load time (Megatron-LM's layout; docs/parallel.md): rank r of `size`
// keeps a share of the attention heads and of the MLP's hidden units, so that each layer needs one
// all-reduce after attn_output and one after ffn_down (model/transformer.cc):
// - column-parallel (output rows split): attn_q / attn_k / attn_v (and their biases, attention
//   sinks) by heads; ffn_gate / ffn_up by hidden units;
// - row-parallel (input columns split): attn_output by q heads, ffn_down by hidden units; their
//   outputs are partial sums. attn_output's bias stays on rank 0 (zeros elsewhere), so the all-reduce
//   adds it once;
// - the output layer (vocabulary-parallel): rank r keeps rows [r per, (r + 1) per) of it, per =
//   ceil(vocab / size), the last rank fewer; tied embeddings get an output.weight of their own (a view
//   of those rows of token_embd); the step all-gathers the logits;
// - the token embeddings (vocabulary-parallel): the same rows as the output layer; each rank looks
//   up the tokens in its rows (zeros for the others) and the step all-reduces the lookups;
// - everything else (norms, a mixture's router and shared expert) whole on every rank.
// Heads: with size <= num_kv_heads the KV heads are split into contiguous near-equal runs, the
// larger ones first, and each rank takes their query heads (SmolLM2's 3 KV heads at TP=2: 2 and 1;
// rank 0 holds the most, because its row size sizes every rank's KV pool); with more ranks than KV
// heads (size a multiple of num_kv_heads) each KV head is replicated on size / num_kv_heads ranks,
// which split its query heads. Hidden units are split at whole blocks of ffn_down's type (a 256-wide
// K-quant block stays on one rank). A row-parallel slice that cuts a quantized block (attn_output
// of a K-quant at head boundaries) is decoded to f32 for that rank. A mixture-of-experts model's
// attention is split the same way, and its experts by expert parallelism: rank r holds a contiguous
// run of whole experts (near-equal runs, the larger first; ModelConfig::expert_begin), the router and
// the shared expert whole, and the step exchanges the experts' outputs (model/transformer.cc). q/k
// norms over all heads are refused (OLMoE: each rank would norm over its own heads only).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "loader/checkpoint.h"

namespace kiln::loader {

struct TpShare {
    int64_t q_head_begin = 0, num_heads = 0;      // query heads [begin, begin + num)
    int64_t kv_head_begin = 0, num_kv_heads = 0;  // KV heads [begin, begin + num)
    int64_t ffn_begin = 0, ffn_size = 0;          // MLP hidden units [begin, begin + size)
    int64_t vocab_begin = 0, vocab_size = 0;      // output layer rows [begin, begin + size)
    int64_t expert_begin = 0, num_experts = 0;    // mixture of experts: experts [begin, begin + num)
};

// Rank `rank`'s share of config c at tensor-parallel size `size`. kInvalidArgument when the model
// cannot be split that way (more ranks than query heads, size not a multiple of the KV heads when
// larger, too few blocks of ffn_down per rank, more ranks than experts). `ffn_block` is ffn_down's block width
// (1 for float weights).
core::Result<TpShare> tp_share(const ModelConfig& c, int rank, int size, int64_t ffn_block = 1);

// Expert parallelism over `size` ranks: the first expert rank `rank` holds (rank `size`: num_experts).
int64_t ep_expert_begin(int64_t num_experts, int rank, int size);

// The checkpoint rank `rank` of `size` runs: its config has the rank's num_heads, num_kv_heads and
// intermediate_size; its tensors are views of ck's bytes where rows are split and copies (owned by the
// result) where columns are. size 1 returns ck as it is.
core::Result<Checkpoint> tp_slice(const Checkpoint& ck, int rank, int size);

}  // namespace kiln::loader
