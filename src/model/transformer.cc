// The transformer step (see transformer.h). Shapes: T = tokens of the step, H = hidden size,
// Q = num_heads * head_dim, KV = num_kv_heads * head_dim, F = intermediate size.
#include "model/transformer.h"

#include <algorithm>

namespace kiln::model {

using core::Status;

core::Status attention_heads(ops::Backend& be, const LayerWeights& L, int64_t layer, const ops::AttentionParams& shape,
                             float eps, const StepBuffers& b, int64_t T) {
    KILN_RETURN_IF_ERROR(be.linear(*L.qkv, b.xn, T, L.bqkv, b.qkv));  // [T, Q + 2 KV]
    ops::QkvRope rope;
    rope.num_heads = shape.num_heads;
    rope.num_kv_heads = shape.num_kv_heads;
    rope.head_dim = shape.head_dim;
    rope.q_norm = L.q_norm;
    rope.k_norm = L.k_norm;
    rope.eps = eps;
    rope.inv_freq = L.inv_freq;
    KILN_RETURN_IF_ERROR(be.qkv_rope_kv_write(layer, b.qkv, b.q, rope));
    return be.attention(layer, b.q, b.att, shape);
}

core::Status mlp_activations(ops::Backend& be, const LayerWeights& L, const StepBuffers& b, int64_t T) {
    return be.gated_mlp_up(*L.gate_up, b.xn, T, ops::GatedAct::kSilu, b.gate_up, b.act, L.down);
}

core::Status run_step(ops::Backend& be, const loader::ModelConfig& c, const ModelWeights& w, const StepBuffers& b,
                      int64_t T, int64_t num_logits, const StepOptions& options) {
    const int64_t H = c.hidden_size, Q = c.q_dim(), F = c.intermediate_size;
    const float eps = float(c.rms_norm_eps);
    auto observe = [&](int64_t l, LinearInput which, const float* in, int64_t cols) {
        if (options.hook && *options.hook)
            (*options.hook)(l, which, std::span<const float>(in, size_t(T * cols)), T, cols);
    };
    KILN_RETURN_IF_ERROR(be.embed(*w.embed, b.x));
    const int64_t num_layers = options.num_layers >= 0 ? std::min(options.num_layers, c.num_layers) : c.num_layers;
    for (int64_t l = 0; l < num_layers; ++l) {
        const LayerWeights& L = w.layers[size_t(l)];
        // The previous layer's MLP output (b.o) is added here, fused with this layer's norm.
        KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, l == 0 ? nullptr : b.o, L.attn_norm, b.xn, T, H, eps, L.qkv));
        observe(l, LinearInput::kQkv, b.xn, H);
        const ops::AttentionParams shape{c.num_heads, c.num_kv_heads, c.head_dim, c.window_for_layer(l)};
        KILN_RETURN_IF_ERROR(attention_heads(be, L, l, shape, eps, b, T));
        observe(l, LinearInput::kAttnOut, b.att, Q);
        KILN_RETURN_IF_ERROR(be.linear(*L.o, b.att, T, L.bo, b.o));  // [T, H]
        KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, b.o, L.ffn_norm, b.xn, T, H, eps, L.gate_up));
        observe(l, LinearInput::kGateUp, b.xn, H);
        KILN_RETURN_IF_ERROR(mlp_activations(be, L, b, T));
        observe(l, LinearInput::kDown, b.act, F);
        // b.o = the MLP output, added to x by the next layer's norm (or the final one).
        KILN_RETURN_IF_ERROR(be.linear(*L.down, b.act, T, nullptr, b.o));
    }
    if (num_layers < c.num_layers || num_logits == 0) return Status::ok();
    // x += the last MLP output, normed; the rows that want logits gathered into o and projected.
    KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, b.o, w.output_norm, b.xn, T, H, eps, nullptr));
    KILN_RETURN_IF_ERROR(be.gather_logit_rows(b.xn, H, b.o));
    return be.linear(*w.lm_head, b.o, num_logits, nullptr, b.logits);
}

}  // namespace kiln::model
