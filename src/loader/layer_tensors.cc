// The canonical tensor list (see layer_tensors.h): one row per LayerTensor says its name, its shape in
// terms of the config's sizes, and when it exists.
#include "loader/layer_tensors.h"

#include "core/check.h"

namespace kiln::loader {
namespace {

enum class Dim { kNone, kHidden, kInter, kQ, kKv, kHeadDim };
enum class When { kAlways, kAttentionBias, kOutputBias, kQkNorm, kSandwichNorms };

struct Row {
    LayerTensor t;
    const char* suffix;
    Dim rows, cols;  // cols kNone: a vector [rows]
    When when;
};
// In LayerTensor order.
constexpr Row kRows[] = {
    {LayerTensor::kAttnNorm, "attn_norm.weight", Dim::kHidden, Dim::kNone, When::kAlways},
    {LayerTensor::kQ, "attn_q.weight", Dim::kQ, Dim::kHidden, When::kAlways},
    {LayerTensor::kK, "attn_k.weight", Dim::kKv, Dim::kHidden, When::kAlways},
    {LayerTensor::kV, "attn_v.weight", Dim::kKv, Dim::kHidden, When::kAlways},
    {LayerTensor::kO, "attn_output.weight", Dim::kHidden, Dim::kQ, When::kAlways},
    {LayerTensor::kFfnNorm, "ffn_norm.weight", Dim::kHidden, Dim::kNone, When::kAlways},
    {LayerTensor::kGate, "ffn_gate.weight", Dim::kInter, Dim::kHidden, When::kAlways},
    {LayerTensor::kUp, "ffn_up.weight", Dim::kInter, Dim::kHidden, When::kAlways},
    {LayerTensor::kDown, "ffn_down.weight", Dim::kHidden, Dim::kInter, When::kAlways},
    {LayerTensor::kQBias, "attn_q.bias", Dim::kQ, Dim::kNone, When::kAttentionBias},
    {LayerTensor::kKBias, "attn_k.bias", Dim::kKv, Dim::kNone, When::kAttentionBias},
    {LayerTensor::kVBias, "attn_v.bias", Dim::kKv, Dim::kNone, When::kAttentionBias},
    {LayerTensor::kOBias, "attn_output.bias", Dim::kHidden, Dim::kNone, When::kOutputBias},
    {LayerTensor::kQNorm, "attn_q_norm.weight", Dim::kHeadDim, Dim::kNone, When::kQkNorm},
    {LayerTensor::kKNorm, "attn_k_norm.weight", Dim::kHeadDim, Dim::kNone, When::kQkNorm},
    {LayerTensor::kPostAttnNorm, "post_attention_norm.weight", Dim::kHidden, Dim::kNone, When::kSandwichNorms},
    {LayerTensor::kPostFfnNorm, "post_ffw_norm.weight", Dim::kHidden, Dim::kNone, When::kSandwichNorms},
};

const Row& row(LayerTensor t) {
    const Row& r = kRows[static_cast<int>(t)];
    KILN_CHECK(r.t == t) << "kRows out of LayerTensor order";
    return r;
}

uint64_t size_of(const ModelConfig& c, Dim d) {
    switch (d) {
        case Dim::kHidden:
            return uint64_t(c.hidden_size);
        case Dim::kInter:
            return uint64_t(c.intermediate_size);
        case Dim::kQ:
            return uint64_t(c.q_dim());
        case Dim::kKv:
            return uint64_t(c.kv_dim());
        case Dim::kHeadDim:
            return uint64_t(c.head_dim);
        case Dim::kNone:
            break;
    }
    return 0;
}

}  // namespace

std::string layer_tensor_name(int64_t layer, LayerTensor t) {
    return "blk." + std::to_string(layer) + "." + row(t).suffix;
}

bool layer_tensor_present(const ModelConfig& c, LayerTensor t) {
    switch (row(t).when) {
        case When::kAttentionBias:
            return c.attention_bias;
        case When::kOutputBias:
            return c.has_output_bias();
        case When::kQkNorm:
            return c.qk_norm;
        case When::kSandwichNorms:
            return c.sandwich_norms;
        case When::kAlways:
            break;
    }
    return true;
}

TensorSpec layer_tensor(const ModelConfig& c, int64_t layer, LayerTensor t) {
    const Row& r = row(t);
    if (r.cols == Dim::kNone) return {layer_tensor_name(layer, t), {size_of(c, r.rows)}, false};
    return {layer_tensor_name(layer, t), {size_of(c, r.rows), size_of(c, r.cols)}, true};
}

std::vector<TensorSpec> checkpoint_tensors(const ModelConfig& c) {
    const uint64_t hidden = uint64_t(c.hidden_size), vocab = uint64_t(c.vocab_size);
    std::vector<TensorSpec> out = {{"token_embd.weight", {vocab, hidden}, true}, {"output_norm.weight", {hidden}, false}};
    if (!c.tie_word_embeddings) out.push_back({"output.weight", {vocab, hidden}, true});
    for (int64_t l = 0; l < c.num_layers; ++l)
        for (const Row& r : kRows)
            if (layer_tensor_present(c, r.t)) out.push_back(layer_tensor(c, l, r.t));
    return out;
}

}  // namespace kiln::loader
