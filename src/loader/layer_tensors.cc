// The canonical tensor list (see layer_tensors.h): one row per LayerTensor says its name ('*': the
// expert's index), its shape in terms of the config's sizes, and when it exists.
#include "loader/layer_tensors.h"

#include "core/check.h"

namespace kiln::loader {
namespace {

enum class Dim { kNone, kHidden, kInter, kQ, kKv, kQNorm, kKNorm, kExperts, kExpertInter, kSharedInter, kHeads };
enum class When {
    kAlways, kDense, kAttentionBias, kOutputBias, kQkNorm, kSandwichNorms, kMoe, kSharedExpert, kSinks, kMoeBiases
};

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
    {LayerTensor::kGate, "ffn_gate.weight", Dim::kInter, Dim::kHidden, When::kDense},
    {LayerTensor::kUp, "ffn_up.weight", Dim::kInter, Dim::kHidden, When::kDense},
    {LayerTensor::kDown, "ffn_down.weight", Dim::kHidden, Dim::kInter, When::kDense},
    {LayerTensor::kQBias, "attn_q.bias", Dim::kQ, Dim::kNone, When::kAttentionBias},
    {LayerTensor::kKBias, "attn_k.bias", Dim::kKv, Dim::kNone, When::kAttentionBias},
    {LayerTensor::kVBias, "attn_v.bias", Dim::kKv, Dim::kNone, When::kAttentionBias},
    {LayerTensor::kOBias, "attn_output.bias", Dim::kHidden, Dim::kNone, When::kOutputBias},
    {LayerTensor::kQNorm, "attn_q_norm.weight", Dim::kQNorm, Dim::kNone, When::kQkNorm},
    {LayerTensor::kKNorm, "attn_k_norm.weight", Dim::kKNorm, Dim::kNone, When::kQkNorm},
    {LayerTensor::kPostAttnNorm, "post_attention_norm.weight", Dim::kHidden, Dim::kNone, When::kSandwichNorms},
    {LayerTensor::kPostFfnNorm, "post_ffw_norm.weight", Dim::kHidden, Dim::kNone, When::kSandwichNorms},
    {LayerTensor::kRouter, "ffn_gate_inp.weight", Dim::kExperts, Dim::kHidden, When::kMoe},
    {LayerTensor::kExpertGate, "ffn_gate.*.weight", Dim::kExpertInter, Dim::kHidden, When::kMoe},
    {LayerTensor::kExpertUp, "ffn_up.*.weight", Dim::kExpertInter, Dim::kHidden, When::kMoe},
    {LayerTensor::kExpertDown, "ffn_down.*.weight", Dim::kHidden, Dim::kExpertInter, When::kMoe},
    {LayerTensor::kSharedGate, "ffn_gate_shexp.weight", Dim::kSharedInter, Dim::kHidden, When::kSharedExpert},
    {LayerTensor::kSharedUp, "ffn_up_shexp.weight", Dim::kSharedInter, Dim::kHidden, When::kSharedExpert},
    {LayerTensor::kSharedDown, "ffn_down_shexp.weight", Dim::kHidden, Dim::kSharedInter, When::kSharedExpert},
    {LayerTensor::kSharedRouter, "ffn_gate_inp_shexp.weight", Dim::kHidden, Dim::kNone, When::kSharedExpert},
    {LayerTensor::kAttnSinks, "attn_sinks.weight", Dim::kHeads, Dim::kNone, When::kSinks},
    {LayerTensor::kRouterBias, "ffn_gate_inp.bias", Dim::kExperts, Dim::kNone, When::kMoeBiases},
    {LayerTensor::kExpertGateBias, "ffn_gate.*.bias", Dim::kExpertInter, Dim::kNone, When::kMoeBiases},
    {LayerTensor::kExpertUpBias, "ffn_up.*.bias", Dim::kExpertInter, Dim::kNone, When::kMoeBiases},
    {LayerTensor::kExpertDownBias, "ffn_down.*.bias", Dim::kHidden, Dim::kNone, When::kMoeBiases},
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
        case Dim::kQNorm:
            return uint64_t(c.qk_norm_full ? c.q_dim() : c.head_dim);
        case Dim::kKNorm:
            return uint64_t(c.qk_norm_full ? c.kv_dim() : c.head_dim);
        case Dim::kExperts:
            return uint64_t(c.num_experts);
        case Dim::kExpertInter:
            return uint64_t(c.expert_intermediate_size);
        case Dim::kSharedInter:
            return uint64_t(c.shared_expert_intermediate_size);
        case Dim::kHeads:
            return uint64_t(c.num_heads);
        case Dim::kNone:
            break;
    }
    return 0;
}

}  // namespace

std::string layer_tensor_name(int64_t layer, LayerTensor t, int64_t expert) {
    std::string suffix = row(t).suffix;
    if (const size_t star = suffix.find('*'); star != std::string::npos) suffix.replace(star, 1, std::to_string(expert));
    return "blk." + std::to_string(layer) + "." + suffix;
}

bool is_expert_tensor(LayerTensor t) {
    return t == LayerTensor::kExpertGate || t == LayerTensor::kExpertUp || t == LayerTensor::kExpertDown ||
           t == LayerTensor::kExpertGateBias || t == LayerTensor::kExpertUpBias || t == LayerTensor::kExpertDownBias;
}

std::optional<ExpertTensorName> parse_expert_tensor_name(const std::string& name) {
    ExpertTensorName out;
    out.bias = name.ends_with(".bias");
    const size_t dot_w = name.rfind(out.bias ? ".bias" : ".weight");
    if (!name.starts_with("blk.") || dot_w == std::string::npos || dot_w == 0 ||
        name.size() != dot_w + (out.bias ? 5 : 7))
        return std::nullopt;
    const size_t dot_e = name.rfind('.', dot_w - 1);
    if (dot_e == std::string::npos) return std::nullopt;
    out.stem = name.substr(0, dot_e);
    if (!out.stem.ends_with(".ffn_gate") && !out.stem.ends_with(".ffn_up") && !out.stem.ends_with(".ffn_down"))
        return std::nullopt;
    const std::string idx = name.substr(dot_e + 1, dot_w - dot_e - 1);
    if (idx.empty() || idx.size() > 6 || idx.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    out.expert = std::stoll(idx);
    return out;
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
        case When::kDense:
            return !c.moe();
        case When::kMoe:
            return c.moe();
        case When::kSharedExpert:
            return c.moe() && c.shared_expert_intermediate_size > 0;
        case When::kSinks:
            return c.attn_sinks;
        case When::kMoeBiases:
            return c.moe() && c.moe_biases;
        case When::kAlways:
            break;
    }
    return true;
}

TensorSpec layer_tensor(const ModelConfig& c, int64_t layer, LayerTensor t, int64_t expert) {
    const Row& r = row(t);
    if (r.cols == Dim::kNone) return {layer_tensor_name(layer, t, expert), {size_of(c, r.rows)}, false};
    return {layer_tensor_name(layer, t, expert), {size_of(c, r.rows), size_of(c, r.cols)}, true};
}

std::vector<TensorSpec> checkpoint_tensors(const ModelConfig& c) {
    const uint64_t hidden = uint64_t(c.hidden_size);
    std::vector<TensorSpec> out;
    if (c.has_token_embeddings()) out.push_back({"token_embd.weight", {uint64_t(c.embed_table_rows()), hidden}, true});
    out.push_back({"output_norm.weight", {hidden}, false});
    if (!c.tie_word_embeddings && c.last_stage())
        out.push_back({"output.weight", {uint64_t(c.output_layer_rows()), hidden}, true});
    for (int64_t l = c.stage_begin; l < c.stage_end(); ++l)
        for (const Row& r : kRows) {
            if (!layer_tensor_present(c, r.t)) continue;
            if (!is_expert_tensor(r.t)) {
                out.push_back(layer_tensor(c, l, r.t));
                continue;
            }
            for (int64_t e = c.expert_begin; e < c.expert_end(); ++e) out.push_back(layer_tensor(c, l, r.t, e));
        }
    return out;
}

}  // namespace kiln::loader
