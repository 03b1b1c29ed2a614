// The canonical tensor list (see layer_tensors.h).
#include "loader/layer_tensors.h"

#include "core/check.h"

namespace kiln::loader {
namespace {

struct Row {
    LayerTensor t;
    const char* suffix;
    bool matrix;
};
// In LayerTensor order.
constexpr Row kRows[] = {
    {LayerTensor::kAttnNorm, "attn_norm.weight", false},    {LayerTensor::kQ, "attn_q.weight", true},
    {LayerTensor::kK, "attn_k.weight", true},               {LayerTensor::kV, "attn_v.weight", true},
    {LayerTensor::kO, "attn_output.weight", true},          {LayerTensor::kFfnNorm, "ffn_norm.weight", false},
    {LayerTensor::kGate, "ffn_gate.weight", true},          {LayerTensor::kUp, "ffn_up.weight", true},
    {LayerTensor::kDown, "ffn_down.weight", true},          {LayerTensor::kQBias, "attn_q.bias", false},
    {LayerTensor::kKBias, "attn_k.bias", false},            {LayerTensor::kVBias, "attn_v.bias", false},
    {LayerTensor::kOBias, "attn_output.bias", false},       {LayerTensor::kQNorm, "attn_q_norm.weight", false},
    {LayerTensor::kKNorm, "attn_k_norm.weight", false},
};

const Row& row(LayerTensor t) {
    const Row& r = kRows[static_cast<int>(t)];
    KILN_CHECK(r.t == t) << "kRows out of LayerTensor order";
    return r;
}

}  // namespace

std::string layer_tensor_name(int64_t layer, LayerTensor t) {
    return "blk." + std::to_string(layer) + "." + row(t).suffix;
}

bool layer_tensor_present(const ModelConfig& c, LayerTensor t) {
    switch (t) {
        case LayerTensor::kQBias:
        case LayerTensor::kKBias:
        case LayerTensor::kVBias:
            return c.attention_bias;
        case LayerTensor::kOBias:
            return c.has_output_bias();
        case LayerTensor::kQNorm:
        case LayerTensor::kKNorm:
            return c.qk_norm;
        default:
            return true;
    }
}

TensorSpec layer_tensor(const ModelConfig& c, int64_t layer, LayerTensor t) {
    const uint64_t hidden = uint64_t(c.hidden_size), inter = uint64_t(c.intermediate_size);
    const uint64_t q = uint64_t(c.q_dim()), kv = uint64_t(c.kv_dim()), head_dim = uint64_t(c.head_dim);
    std::vector<uint64_t> shape;
    switch (t) {
        case LayerTensor::kAttnNorm:
        case LayerTensor::kFfnNorm:
        case LayerTensor::kOBias:
            shape = {hidden};
            break;
        case LayerTensor::kQ:
            shape = {q, hidden};
            break;
        case LayerTensor::kK:
        case LayerTensor::kV:
            shape = {kv, hidden};
            break;
        case LayerTensor::kO:
            shape = {hidden, q};
            break;
        case LayerTensor::kGate:
        case LayerTensor::kUp:
            shape = {inter, hidden};
            break;
        case LayerTensor::kDown:
            shape = {hidden, inter};
            break;
        case LayerTensor::kQBias:
            shape = {q};
            break;
        case LayerTensor::kKBias:
        case LayerTensor::kVBias:
            shape = {kv};
            break;
        case LayerTensor::kQNorm:
        case LayerTensor::kKNorm:
            shape = {head_dim};
            break;
    }
    return {layer_tensor_name(layer, t), std::move(shape), row(t).matrix};
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
