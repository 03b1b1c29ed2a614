// The transformer step (see transformer.h). Shapes: T = tokens of the step, H = hidden size,
// Q = num_heads * head_dim, KV = num_kv_heads * head_dim, F = intermediate size.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>

namespace kiln::model {

using core::Status;

core::Status attention_heads(ops::Backend& be, const LayerWeights& L, int64_t layer, const ops::AttentionParams& shape,
                             float eps, float q_scale, const StepBuffers& b, int64_t T) {
    KILN_RETURN_IF_ERROR(be.linear(*L.qkv, b.xn, T, L.bqkv, b.qkv));  // [T, Q + 2 KV]
    ops::QkvRope rope;
    rope.num_heads = shape.num_heads;
    rope.num_kv_heads = shape.num_kv_heads;
    rope.head_dim = shape.head_dim;
    rope.q_norm = L.q_norm;
    rope.k_norm = L.k_norm;
    rope.norm_full = L.qk_norm_full;
    rope.eps = eps;
    rope.inv_freq = L.inv_freq;
    rope.inv_freq_long = L.inv_freq_long;
    rope.long_from = L.long_from;
    rope.q_scale = q_scale;
    KILN_RETURN_IF_ERROR(be.qkv_rope_kv_write(layer, b.qkv, b.q, rope));
    return be.attention(layer, b.q, b.att, shape);
}

core::Status mlp_activations(ops::Backend& be, const LayerWeights& L, ops::GatedAct f, const StepBuffers& b,
                             int64_t T) {
    return be.gated_mlp_up(*L.gate_up, b.xn, T, f, b.gate_up, b.act, L.down);
}

float attention_q_scale(const loader::ModelConfig& c) {
    double s = 1.0;
    if (c.query_pre_attn_scalar > 0 && c.query_pre_attn_scalar != double(c.head_dim))
        s = std::sqrt(double(c.head_dim) / c.query_pre_attn_scalar);
    if (c.rope_scaling.type == "longrope" && c.rope_scaling.attention_factor)
        s *= *c.rope_scaling.attention_factor * *c.rope_scaling.attention_factor;
    if (c.rope_scaling.type == "yarn") {  // transformers: attention_factor, else 0.1 ln(factor) + 1
        const double f = c.rope_scaling.factor;
        const double a = c.rope_scaling.attention_factor ? *c.rope_scaling.attention_factor
                         : f > 1                         ? 0.1 * std::log(f) + 1.0
                                                         : 1.0;
        s *= a * a;
    }
    return float(s);
}

namespace {

// Tensor parallelism: logits [rows, V] from every rank's [rows, output_rows] share, which its output
// layer wrote at the front of the same buffer. Rank r's share is vocabulary rows [r per, (r + 1) per)
// with per = ceil(V / ranks), the last one shorter (loader::tp_share); host memory.
Status gather_vocab(dist::Communicator& tp, const loader::ModelConfig& c, float* logits, int64_t rows) {
    const int64_t n = tp.size(), V = c.vocab_size, per = (V + n - 1) / n, mine = c.output_rows;
    if (mine > per || c.output_row_begin != tp.rank() * per)
        return core::error(core::StatusCode::kInvalidArgument)
               << "rank " << tp.rank() << "'s output rows [" << c.output_row_begin << ", +" << mine
               << ") are not its share of " << V;
    std::vector<float> send = std::vector<float>(size_t(rows * per), 0.0f), all = std::vector<float>(size_t(n * rows * per));
    for (int64_t t = 0; t < rows; ++t) std::copy_n(logits + t * mine, mine, send.data() + t * per);
    KILN_RETURN_IF_ERROR(tp.all_gather(send.data(), rows * per * int64_t(sizeof(float)), all.data()));
    for (int64_t r = 0; r < n; ++r) {
        const int64_t begin = r * per, count = std::min(per, V - begin);
        for (int64_t t = 0; t < rows; ++t) std::copy_n(all.data() + (r * rows + t) * per, count, logits + t * V + begin);
    }
    return Status::ok();
}

// The mixture-of-experts MLP over expert-parallel ranks (ExpertParallel): out [T, H] on every rank.
Status expert_parallel_moe(ops::Backend& be, const ops::MoeWeights& w, const ops::MoeParams& p, ExpertParallel& ep,
                           const float* in, int64_t T, int64_t H, float* out) {
    dist::Communicator& comm = *ep.comm;
    const int n = comm.size(), me = comm.rank();
    const int64_t k = p.top_k, most = (T + n - 1) / n;  // most: the largest share of tokens
    auto first_row = [&](int r) { return T * r / n; };
    const int64_t r0 = first_row(me), rows = first_row(me + 1) - r0;
    ops::MoeSlots& s = ep.slots;
    // Each token is routed by its owner alone and the choices all-gathered, so every rank works from
    // the same routing whatever its own arithmetic would have chosen.
    KILN_RETURN_IF_ERROR(be.moe_router(w, p, in, r0, rows, s));
    ep.route_send.assign(size_t(most * k), {});
    for (int64_t i = 0; i < rows * k; ++i) ep.route_send[size_t(i)] = {s.ids[size_t(r0 * k + i)], s.weights[size_t(r0 * k + i)]};
    ep.route_recv.resize(size_t(n * most * k));
    KILN_RETURN_IF_ERROR(comm.all_gather(ep.route_send.data(), most * k * int64_t(sizeof(ExpertParallel::Route)),
                                         ep.route_recv.data()));
    if (int64_t(s.ids.size()) < T * k) {
        s.ids.resize(size_t(T * k));
        s.weights.resize(size_t(T * k));
    }
    const int64_t E = int64_t(ep.expert_begin.back());
    for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < (first_row(r + 1) - first_row(r)) * k; ++i) {
            const ExpertParallel::Route& got = ep.route_recv[size_t(r * most * k + i)];
            if (got.id < 0 || got.id >= E)
                return core::error(core::StatusCode::kInternal) << "expert parallelism: rank " << r << " routed to expert " << got.id;
            s.ids[size_t(first_row(r) * k + i)] = got.id;
            s.weights[size_t(first_row(r) * k + i)] = got.weight;
        }
    KILN_RETURN_IF_ERROR(be.moe_experts(w, p, in, T, s));
    const int32_t* ids = s.ids.data();
    auto owner = [&](int32_t e) {  // the rank holding expert e
        return int(std::upper_bound(ep.expert_begin.begin(), ep.expert_begin.end(), int64_t(e)) -
                   ep.expert_begin.begin()) - 1;
    };
    // Every rank knows every block's size: the largest (rank q's experts' slots of rank r's tokens)
    // sizes them all.
    int64_t block = 0;
    ep.count.assign(size_t(n) * size_t(n), 0);  // [q, r]
    for (int r = 0; r < n; ++r)
        for (int64_t t = first_row(r); t < first_row(r + 1); ++t)
            for (int64_t j = 0; j < k; ++j)
                block = std::max(block, ++ep.count[size_t(owner(ids[t * k + j]) * n + r)]);
    const size_t slot_floats = size_t(block * H);
    ep.send.resize(size_t(n) * slot_floats);
    ep.recv.resize(size_t(n) * slot_floats);
    // To rank r: the outputs of this rank's experts for r's tokens, in (token, slot) order.
    for (int r = 0; r < n; ++r) {
        float* dst = ep.send.data() + size_t(r) * slot_floats;
        for (int64_t t = first_row(r); t < first_row(r + 1); ++t)
            for (int64_t j = 0; j < k; ++j)
                if (owner(ids[t * k + j]) == me) {
                    std::copy_n(s.y.data() + (t * k + j) * H, H, dst);
                    dst += H;
                }
    }
    KILN_RETURN_IF_ERROR(comm.all_to_all(ep.send.data(), block * H * int64_t(sizeof(float)), ep.recv.data()));
    // This rank's tokens' slots from their experts' ranks, in the same order.
    ep.taken.assign(size_t(n), 0);
    for (int64_t t = r0; t < r0 + rows; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int q = owner(ids[t * k + j]);
            std::copy_n(ep.recv.data() + size_t(q) * slot_floats + size_t(ep.taken[size_t(q)]++ * H), H,
                        s.y.data() + (t * k + j) * H);
        }
    // Sum this rank's tokens, then every rank gets every token's row.
    ep.rows_send.resize(size_t(most * H));
    KILN_RETURN_IF_ERROR(be.moe_combine(w, p, in, r0, rows, s, ep.rows_send.data()));
    ep.rows_recv.resize(size_t(n * most * H));
    KILN_RETURN_IF_ERROR(comm.all_gather(ep.rows_send.data(), most * H * int64_t(sizeof(float)), ep.rows_recv.data()));
    for (int r = 0; r < n; ++r)
        std::copy_n(ep.rows_recv.data() + size_t(r) * size_t(most * H), size_t((first_row(r + 1) - first_row(r)) * H),
                    out + first_row(r) * H);
    return Status::ok();
}

}  // namespace

core::Status run_step(ops::Backend& be, const loader::ModelConfig& c, const ModelWeights& w, const StepBuffers& b,
                      int64_t T, int64_t num_logits, const StepOptions& options) {
    const int64_t H = c.hidden_size, Q = c.q_dim(), F = c.intermediate_size;
    const float eps = float(c.rms_norm_eps);
    auto observe = [&](int64_t l, LinearInput which, const float* in, int64_t cols) {
        if (options.hook && *options.hook)
            (*options.hook)(l, which, std::span<const float>(in, size_t(T * cols)), T, cols);
    };
    const float embed_scale = c.scale_embeddings ? float(std::sqrt(double(H))) : 1.0f;
    const ops::GatedAct act = c.gelu_mlp ? ops::GatedAct::kGeluTanh : ops::GatedAct::kSilu;
    const float q_scale = attention_q_scale(c);
    ops::MoeParams moe{c.num_experts_used, c.norm_topk_prob, act};
    if (c.swiglu_limit > 0) {  // gpt-oss
        moe.act = ops::GatedAct::kSwigluClamped;
        moe.alpha = float(c.swiglu_alpha);
        moe.limit = float(c.swiglu_limit);
    }
    const int64_t num_layers = options.num_layers >= 0 ? std::min(options.num_layers, c.num_layers) : c.num_layers;
    const int64_t first = options.first_layer;
    if ((first != 0 || options.resid_out) && (options.num_layers < 0 || first < 0 || first >= num_layers))
        return core::error(core::StatusCode::kInvalidArgument)
               << "a pass from layer " << first << " to " << num_layers << " (num_layers set?)";
    if (first > 0 && !options.resid_in)
        return core::error(core::StatusCode::kInvalidArgument) << "no residual stream to start layer " << first << " from";
    if (options.resid_in) {
        std::copy_n(options.resid_in, size_t(T * H), b.x);  // host memory: calibration runs on the CPU
    } else {
        KILN_RETURN_IF_ERROR(be.embed(*w.embed, embed_scale, b.x, c.embed_row_begin));
        if (options.tp && c.embed_rows > 0) KILN_RETURN_IF_ERROR(options.tp->all_reduce_sum(b.x, T * H));
    }
    for (int64_t l = first; l < num_layers; ++l) {
        const LayerWeights& L = w.layers[size_t(l)];
        // The previous layer's MLP output (b.o) is added here, fused with this layer's norm.
        KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, l == first ? nullptr : b.o, L.attn_norm, b.xn, T, H, eps, L.qkv));
        observe(l, LinearInput::kQkv, b.xn, H);
        const ops::AttentionParams shape{c.num_heads, c.num_kv_heads, c.head_dim, c.window_for_layer(l),
                                         float(c.attn_softcap), L.attn_sinks};
        KILN_RETURN_IF_ERROR(attention_heads(be, L, l, shape, eps, q_scale, b, T));
        observe(l, LinearInput::kAttnOut, b.att, Q);
        KILN_RETURN_IF_ERROR(be.linear(*L.o, b.att, T, L.bo, b.o));  // [T, H]
        if (options.tp) KILN_RETURN_IF_ERROR(options.tp->all_reduce_sum(b.o, T * H));
        if (L.post_attn_norm) KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.o, nullptr, L.post_attn_norm, b.o, T, H, eps, nullptr));
        KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, b.o, L.ffn_norm, b.xn, T, H, eps, L.gate_up));
        observe(l, LinearInput::kGateUp, b.xn, H);
        // b.o = the MLP output, added to x by the next layer's norm (or the final one).
        if (L.moe) {
            ops::MoeInputObserver observe_experts;
            ops::MoeParams mp = moe;
            if (options.expert_hook && *options.expert_hook) {
                observe_experts = [&](int64_t e, bool down, const float* x, int64_t rows, int64_t cols) {
                    (*options.expert_hook)(l, e, down ? LinearInput::kDown : LinearInput::kGateUp,
                                           std::span<const float>(x, size_t(rows * cols)), rows, cols);
                };
                mp.observe = &observe_experts;
            }
            if (options.ep && options.ep->comm && options.ep->comm->size() > 1) {
                if (mp.observe) return core::error(core::StatusCode::kUnsupported) << "calibration under expert parallelism";
                KILN_RETURN_IF_ERROR(expert_parallel_moe(be, *L.moe, mp, *options.ep, b.xn, T, H, b.o));
            } else {
                KILN_RETURN_IF_ERROR(be.moe_mlp(*L.moe, mp, b.xn, T, b.o));
            }
        } else {
            KILN_RETURN_IF_ERROR(mlp_activations(be, L, act, b, T));
            observe(l, LinearInput::kDown, b.act, F);
            KILN_RETURN_IF_ERROR(be.linear(*L.down, b.act, T, nullptr, b.o));
            if (options.tp) KILN_RETURN_IF_ERROR(options.tp->all_reduce_sum(b.o, T * H));
        }
        if (L.post_ffn_norm) KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.o, nullptr, L.post_ffn_norm, b.o, T, H, eps, nullptr));
    }
    if (options.resid_out) {  // x += the last layer's MLP output (the norm into xn is not wanted)
        KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, b.o, w.output_norm, b.xn, T, H, eps, nullptr));
        std::copy_n(b.x, size_t(T * H), options.resid_out);
        return Status::ok();
    }
    if (num_layers < c.num_layers || num_logits == 0) return Status::ok();
    // x += the last MLP output, normed; the rows that want logits gathered into o and projected.
    KILN_RETURN_IF_ERROR(be.add_rmsnorm(b.x, b.o, w.output_norm, b.xn, T, H, eps, nullptr));
    KILN_RETURN_IF_ERROR(be.gather_logit_rows(b.xn, H, b.o));
    KILN_RETURN_IF_ERROR(be.linear(*w.lm_head, b.o, num_logits, nullptr, b.logits));
    if (options.tp && c.output_rows > 0) KILN_RETURN_IF_ERROR(gather_vocab(*options.tp, c, b.logits, num_logits));
    if (c.final_softcap > 0) return be.softcap(b.logits, num_logits * c.vocab_size, float(c.final_softcap));
    return Status::ok();
}

}  // namespace kiln::model
