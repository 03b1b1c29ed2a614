// ops::Backend on the CPU (see cpu_backend.h).
#include "ops/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "core/numeric.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/ref/transformer.h"
#include "ops/transformer_ops.h"

namespace kiln::ops {

using core::Status;
using core::StatusCode;

std::unique_ptr<CpuWeight> CpuWeight::of(Linear fused) {
    auto w = std::make_unique<CpuWeight>();
    w->rows = fused.w.rows;
    w->cols = fused.w.cols;
    w->parts.push_back(std::move(fused));
    return w;
}

std::unique_ptr<CpuWeight> CpuWeight::of_parts(std::vector<Linear> parts) {
    auto w = std::make_unique<CpuWeight>();
    for (const Linear& p : parts) w->rows += p.w.rows;
    w->cols = parts.empty() ? 0 : parts[0].w.cols;
    w->parts = std::move(parts);
    return w;
}

core::Result<std::unique_ptr<CpuWeight>> CpuWeight::fuse(std::span<const kernels::WeightView> parts,
                                                         int64_t interleave, const LinearOptions& options) {
    KILN_ASSIGN_OR_RETURN(std::optional<Linear> fused, fuse_linears(parts, interleave, options));
    if (fused) return of(std::move(*fused));
    std::vector<Linear> apart;
    for (const kernels::WeightView& p : parts) {
        KILN_ASSIGN_OR_RETURN(Linear l, make_linear(p, options));
        apart.push_back(std::move(l));
    }
    return of_parts(std::move(apart));
}

std::unique_ptr<CpuWeight> CpuWeight::table(const kernels::WeightView& rows) {
    auto w = std::make_unique<CpuWeight>();
    w->rows = rows.rows;
    w->cols = rows.cols;
    w->rows_view = rows;
    return w;
}

static const CpuWeight& cpu(const Weight& w) {
    return static_cast<const CpuWeight&>(w);  // a CpuBackend only ever gets CpuWeights
}

Status CpuBackend::embed(const Weight& table, float scale, float* x, int64_t first_id) {
    const kernels::WeightView& t = cpu(table).rows_view;
    if (!t.data) return core::error(StatusCode::kInternal) << "embed: the weight is not a table";
    const std::span<const int32_t> tokens = step_.tokens;
    pool_->parallel_for(int64_t(tokens.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            float* row = x + i * t.cols;
            const int64_t r = int64_t(tokens[size_t(i)]) - first_id;
            if (r < 0 || r >= t.rows) {  // another rank's share of the vocabulary
                std::fill_n(row, t.cols, 0.0f);
                continue;
            }
            kernels::ref::weight_row(t, r, row);
            if (scale != 1.0f)
                for (int64_t j = 0; j < t.cols; ++j) row[j] *= scale;
        }
    });
    return Status::ok();
}

Status CpuBackend::add_rmsnorm(float* x, const float* add, const float* weight, float* y, int64_t rows, int64_t n,
                               float eps, const Weight* /*next*/) {
    if (!add) return ops::rmsnorm(*pool_, x, weight, y, rows, n, eps);
    return ops::add_rmsnorm(*pool_, x, add, weight, y, rows, n, eps);
}

// CpuBackend::linear with the quantized-activation scratch given (the experts run side by side use
// one each).
static Status linear_with(core::ThreadPool& pool, const CpuWeight& w, const float* in, int64_t rows, const float* bias,
                          float* out, std::vector<uint8_t>& scratch) {
    if (w.parts.size() == 1) return ops::linear(pool, in, rows, w.parts[0], bias, out, scratch);
    // Parts side by side, each with its slice of the bias.
    LinearPart parts[4];
    if (w.parts.size() > 4) return core::error(StatusCode::kInternal) << "linear: more than 4 parts";
    int64_t off = 0;
    for (size_t i = 0; i < w.parts.size(); ++i) {
        parts[i] = {&w.parts[i], bias ? bias + off : nullptr};
        off += w.parts[i].w.rows;
    }
    return ops::linear_group(pool, in, rows, std::span<const LinearPart>(parts, w.parts.size()), out, scratch);
}

Status CpuBackend::linear(const Weight& weight, const float* in, int64_t rows, const float* bias, float* out) {
    return linear_with(*pool_, cpu(weight), in, rows, bias, out, scratch_);
}

Status CpuBackend::qkv_rope_kv_write(int64_t layer, float* qkv, float* q_out, const QkvRope& p) {
    const int64_t D = p.head_dim, Q = p.num_heads * D, KV = p.num_kv_heads * D;
    const int64_t T = int64_t(step_.tokens.size());
    auto* const kc = static_cast<uint8_t*>(step_.k[size_t(layer)]);  // [num_slots] rows
    auto* const vc = static_cast<uint8_t*>(step_.v[size_t(layer)]);
    const kernels::KvDtype dtype = step_.kv_dtype;
    const bool f32 = dtype == kernels::KvDtype::kF32;
    const int64_t row_bytes = kernels::kv_row_bytes(dtype, p.num_kv_heads, D);
    const std::span<const double> inv_freq(p.inv_freq, size_t(D / 2));
    const std::span<const double> inv_freq_long(p.inv_freq_long ? p.inv_freq_long : p.inv_freq, size_t(D / 2));
    // Per token in one pass: q to its own buffer, k and v straight to their cache slots, with the
    // q/k norms and RoPE applied in place there (the key of a cache other than f32 is normed and
    // rotated in its qkv row, then stored once by kernels/ref kv_store_row: rounded or quantized).
    pool_->parallel_for(T, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float* row = qkv + t * (Q + 2 * KV);  // [Q | KV | KV]
            float* qt = q_out + t * Q;
            const int64_t slot = step_.slots[size_t(t)];
            float* kt = f32 ? reinterpret_cast<float*>(kc + slot * row_bytes) : row + Q;
            std::copy_n(row, Q, qt);
            if (f32) std::copy_n(row + Q, KV, kt);
            kernels::ref::kv_store_row(dtype, row + Q + KV, p.num_kv_heads, D, vc + slot * row_bytes);
            const int64_t nd = p.norm_full ? Q : D, nk = p.norm_full ? KV : D;  // norm width: all heads, or one
            if (p.q_norm)
                for (int64_t h = 0; h < Q / nd; ++h) kernels::ref::rmsnorm(qt + h * nd, p.q_norm, qt + h * nd, nd, p.eps);
            if (p.k_norm)
                for (int64_t h = 0; h < KV / nk; ++h) kernels::ref::rmsnorm(kt + h * nk, p.k_norm, kt + h * nk, nk, p.eps);
            const int32_t* pos = &step_.positions[size_t(t)];
            const std::span<const double> freqs = *pos >= p.long_from ? inv_freq_long : inv_freq;
            kernels::ref::rope(qt, 1, p.num_heads, D, pos, freqs);
            if (p.q_scale != 1.0f)
                for (int64_t i = 0; i < Q; ++i) qt[i] *= p.q_scale;
            kernels::ref::rope(kt, 1, p.num_kv_heads, D, pos, freqs);
            if (!f32) kernels::ref::kv_store_row(dtype, kt, p.num_kv_heads, D, kc + slot * row_bytes);
        }
    });
    return Status::ok();
}

Status CpuBackend::attention(int64_t layer, const float* q, float* out, const AttentionParams& p) {
    for (AttentionSeq& a : step_.seqs) {
        a.kv.k = step_.k[size_t(layer)];
        a.kv.v = step_.v[size_t(layer)];
    }
    const AttentionHeads heads{p.num_heads, p.num_kv_heads, p.head_dim, p.window, p.softcap, p.sinks};
    return batch_attention(*pool_, q, int64_t(step_.tokens.size()), step_.seqs, heads, out, isa_);
}

// gelu(g) * u in float, GELU's tanh form as torch's gelu(approximate="tanh") computes it.
static float gelu_tanh_mul(float g, float u) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    const float inner = kBeta * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + std::tanh(inner)) * u;
}

// act [rows, F] = f(gate, up) over the products gate_up_out [rows, 2 F] of w: a fused matrix's
// output holds blocks of kSwigluBlock gate then up columns in turn, parts' [gate | up].
template <class Fn>
static void gated_rows(core::ThreadPool& pool, const CpuWeight& w, const float* gate_up_out, int64_t rows, float* act,
                       Fn f) {
    const int64_t F = w.rows / 2, B = kSwigluBlock;
    const bool interleaved = w.parts.size() == 1;
    pool.parallel_for(rows, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const float* row = gate_up_out + t * 2 * F;
            for (int64_t i = 0; i < F; ++i) {
                const int64_t g = interleaved ? (i / B) * 2 * B + i % B : i;
                act[t * F + i] = f(row[g], row[interleaved ? g + B : F + i]);
            }
        }
    });
}

std::vector<float> CpuWeight::gate_up_order(std::span<const float> gate, std::span<const float> up) const {
    std::vector<float> out(gate.size() + up.size());
    const int64_t F = int64_t(gate.size()), B = kSwigluBlock;
    for (int64_t i = 0; i < F; ++i) {
        const int64_t g = parts.size() == 1 ? (i / B) * 2 * B + i % B : i;
        out[size_t(g)] = gate[size_t(i)];
        out[size_t(parts.size() == 1 ? g + B : F + i)] = up[size_t(i)];
    }
    return out;
}

// CpuBackend::gated_mlp_up with the scratch given; also MoE experts' biased and clamped variants
// (bias [2 F] in the weight's output order, or null).
static Status gated_with(core::ThreadPool& pool, const CpuWeight& w, const float* in, int64_t rows, GatedAct f,
                         const float* bias, float alpha, float limit, float* gate_up_out, float* act,
                         std::vector<uint8_t>& scratch) {
    if (f == GatedAct::kSilu && !bias) {
        if (w.parts.size() == 1)  // fused: 32-column blocks of gate and up in turn
            return linear_swiglu_fused(pool, in, rows, w.parts[0], gate_up_out, act, scratch);
        if (w.parts.size() != 2) return core::error(StatusCode::kInternal) << "gated_mlp_up: expected gate and up";
        return linear_swiglu(pool, in, rows, w.parts[0], w.parts[1], gate_up_out, act, scratch);
    }
    // The products (+ bias), then the activation row by row.
    KILN_RETURN_IF_ERROR(linear_with(pool, w, in, rows, bias, gate_up_out, scratch));
    if (f == GatedAct::kSwigluClamped) {  // gpt-oss: the gate clamped above, up on both sides
        gated_rows(pool, w, gate_up_out, rows, act, [alpha, limit](float g, float u) {
            g = std::min(g, limit);
            u = std::clamp(u, -limit, limit);
            return (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
        });
    } else if (f == GatedAct::kGeluTanh) {
        gated_rows(pool, w, gate_up_out, rows, act, gelu_tanh_mul);
    } else {
        gated_rows(pool, w, gate_up_out, rows, act, [](float g, float u) { return g / (1.0f + std::exp(-g)) * u; });
    }
    return Status::ok();
}

Status CpuBackend::gated_mlp_up(const Weight& gate_up, const float* in, int64_t rows, GatedAct f, float* gate_up_out,
                                float* act, const Weight* /*next*/) {
    if (f == GatedAct::kSwigluClamped)
        return core::error(StatusCode::kInternal) << "gated_mlp_up: the clamped SwiGLU is for MoE experts only";
    return gated_with(*pool_, cpu(gate_up), in, rows, f, nullptr, 0, 0, gate_up_out, act, scratch_);
}

// v grown to at least n elements (buffers reused from step to step).
template <class V>
static void grow(V& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
}

// A thread's buffers for the experts it runs side by side with the others'.
struct MoeWorker {
    std::vector<float> x, y, gate_up, act;
    std::vector<uint8_t> scratch;
};

// One expert's MLP over its n gathered rows x [n, H]: act [n, F] (and the products in gate_up
// [n, 2 F]), y [n, H].
static Status expert_mlp(core::ThreadPool& pool, const MoeWeights& w, const MoeParams& p, int64_t e, const float* x,
                         int64_t n, float* gate_up, float* act, float* y, std::vector<uint8_t>& scratch) {
    const float* bias = w.gate_up_bias.empty() ? nullptr : w.gate_up_bias[size_t(e)];
    KILN_RETURN_IF_ERROR(
        gated_with(pool, cpu(*w.gate_up[size_t(e)]), x, n, p.act, bias, p.alpha, p.limit, gate_up, act, scratch));
    const float* down_bias = w.down_bias.empty() ? nullptr : w.down_bias[size_t(e)];
    return linear_with(pool, cpu(*w.down[size_t(e)]), act, n, down_bias, y, scratch);
}

// o [H] += each of a row's top_k slots y [k, H] times its weight, in ascending expert id (ids [k]):
// the one order every path of moe_mlp sums in.
static void add_slots_in_expert_order(const int32_t* ids, const float* weights, const float* y, int64_t k, int64_t H,
                                      float* o) {
    for (int64_t done = 0, last = -1; done < k; ++done) {
        int64_t j = -1;
        for (int64_t s = 0; s < k; ++s)
            if (ids[s] > last && (j < 0 || ids[s] < ids[j])) j = s;
        last = ids[j];
        const float wj = weights[j];
        const float* yj = y + j * H;
        for (int64_t c = 0; c < H; ++c) o[c] += wj * yj[c];
    }
}

// Expert e over the n (row, slot) entries routed to it (entry / top_k = the row of in): its rows
// gathered into moe_.x, its output in moe_.y [n, H].
Status CpuBackend::run_expert(const MoeWeights& w, const MoeParams& p, int64_t e, const float* in,
                              const int64_t* entries, int64_t n) {
    MoeScratch& m = moe_;
    const int64_t H = w.router->cols, F = w.down[size_t(e)]->cols;
    grow(m.x, n * H);
    grow(m.y, n * H);
    grow(m.gate_up, n * 2 * F);
    grow(m.act, n * F);
    for (int64_t i = 0; i < n; ++i) std::copy_n(in + (entries[i] / p.top_k) * H, H, m.x.data() + i * H);
    return expert_mlp(*pool_, w, p, e, m.x.data(), n, m.gate_up.data(), m.act.data(), m.y.data(), scratch_);
}

Status CpuBackend::moe_mlp(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows, float* out) {
    const int64_t E = w.router->rows, H = w.router->cols, k = p.top_k;
    if (int64_t(w.gate_up.size()) != E || int64_t(w.down.size()) != E || k < 1 || k > E)
        return core::error(StatusCode::kInternal) << "moe_mlp: " << w.gate_up.size() << " / " << w.down.size()
                                                  << " expert weights for " << E << " experts, top " << k;
    MoeScratch& m = moe_;
    grow(m.logits, rows * E);
    grow(m.ids, rows * k);
    grow(m.weights, rows * k);
    KILN_RETURN_IF_ERROR(linear(*w.router, in, rows, w.router_bias, m.logits.data()));
    moe_route(m.logits.data(), rows, E, k, p.norm_topk, m.ids.data(), m.weights.data());
    m.groups.build(m.ids.data(), rows, k, E);
    std::fill_n(out, rows * H, 0.0f);
    std::vector<int64_t>& active = m.active;  // the experts that got tokens: only their weights are read
    active.clear();
    for (int64_t e = 0; e < E; ++e)
        if (m.groups.count(e) > 0) {
            if (!w.gate_up[size_t(e)])
                return core::error(StatusCode::kInternal)
                       << "moe_mlp: expert " << e << " is on another rank (expert parallelism runs moe_experts)";
            active.push_back(e);
        }
    const bool observing = p.observe && *p.observe;
    if (!observing && pool_->num_threads() > 1 && int64_t(active.size()) >= pool_->num_threads() &&
        rows * k <= 16 * pool_->num_threads())
        return moe_experts_side_by_side(w, p, in, rows, out);
    // Each expert over its tokens, gathered in row order, its weighted output added to theirs: a
    // row's sum runs over its experts in ascending id whatever else is in the batch.
    for (const int64_t e : active) {
        const int64_t n = m.groups.count(e);
        const int64_t* entries = m.groups.entries.data() + m.groups.offsets[size_t(e)];
        KILN_RETURN_IF_ERROR(run_expert(w, p, e, in, entries, n));
        if (observing) {
            (*p.observe)(e, false, m.x.data(), n, H);
            (*p.observe)(e, true, m.act.data(), n, w.down[size_t(e)]->cols);
        }
        pool_->parallel_for(n, [&](int64_t b, int64_t end) {  // rows of one expert are distinct
            for (int64_t i = b; i < end; ++i) {
                const float wi = m.weights[size_t(entries[i])];
                const float* y = m.y.data() + i * H;
                float* o = out + (entries[i] / k) * H;
                for (int64_t c = 0; c < H; ++c) o[c] += wi * y[c];
            }
        });
    }
    return moe_shared_expert(w, p, in, rows, out);
}

// Few tokens (decode), as many experts as threads or more: the experts run side by side, each on
// one thread (the kernels' nested calls run serially there) with its own buffers, into the slots
// m.y [rows * k, H]; then each row adds its slots in ascending expert id, exactly the sum the
// expert-by-expert path makes, so the two give the same bits.
Status CpuBackend::moe_experts_side_by_side(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                                            float* out) {
    const int64_t H = w.router->cols, k = p.top_k;
    MoeScratch& m = moe_;
    grow(m.y, rows * k * H);
    const int64_t num_active = int64_t(m.active.size());
    std::vector<Status>& status = m.status;
    status.assign(size_t(num_active), Status::ok());
    pool_->parallel_for(num_active, [&](int64_t b, int64_t end) {
        thread_local MoeWorker t;
        for (int64_t a = b; a < end; ++a) {
            const int64_t e = m.active[size_t(a)], n = m.groups.count(e), F = w.down[size_t(e)]->cols;
            grow(t.x, n * H);
            grow(t.y, n * H);
            grow(t.gate_up, n * 2 * F);
            grow(t.act, n * F);
            const int64_t* entries = m.groups.entries.data() + m.groups.offsets[size_t(e)];
            for (int64_t i = 0; i < n; ++i) std::copy_n(in + (entries[i] / k) * H, H, t.x.data() + i * H);
            status[size_t(a)] = expert_mlp(*pool_, w, p, e, t.x.data(), n, t.gate_up.data(), t.act.data(),
                                           t.y.data(), t.scratch);
            for (int64_t i = 0; i < n; ++i) std::copy_n(t.y.data() + i * H, H, m.y.data() + entries[i] * H);
        }
    });
    for (const Status& st : status) KILN_RETURN_IF_ERROR(st);
    pool_->parallel_for(rows, [&](int64_t b, int64_t end) {
        for (int64_t r = b; r < end; ++r)
            add_slots_in_expert_order(m.ids.data() + r * k, m.weights.data() + r * k, m.y.data() + r * k * H, k, H,
                                      out + r * H);
    });
    return moe_shared_expert(w, p, in, rows, out);
}

// out += sigmoid(x . shared_gate) * the shared expert's output, when there is one.
Status CpuBackend::moe_shared_expert(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                                     float* out) {
    MoeScratch& m = moe_;
    const int64_t H = w.router->cols;
    if (!w.shared_gate_up) return Status::ok();
    const int64_t S = w.shared_down->cols;
    grow(m.gate_up, rows * 2 * S);
    grow(m.act, rows * S);
    grow(m.y, rows * H);
    grow(m.shared_gate, rows);
    KILN_RETURN_IF_ERROR(gated_mlp_up(*w.shared_gate_up, in, rows, p.act, m.gate_up.data(), m.act.data(), w.shared_down));
    if (p.observe && *p.observe) (*p.observe)(-1, true, m.act.data(), rows, S);
    KILN_RETURN_IF_ERROR(linear(*w.shared_down, m.act.data(), rows, nullptr, m.y.data()));
    KILN_RETURN_IF_ERROR(linear(*w.shared_gate, in, rows, nullptr, m.shared_gate.data()));
    pool_->parallel_for(rows, [&](int64_t b, int64_t end) {
        for (int64_t r = b; r < end; ++r) {
            const float g = 1.0f / (1.0f + std::exp(-m.shared_gate[size_t(r)]));
            for (int64_t c = 0; c < H; ++c) out[r * H + c] += g * m.y[size_t(r * H + c)];
        }
    });
    return Status::ok();
}

Status CpuBackend::moe_router(const MoeWeights& w, const MoeParams& p, const float* in, int64_t first, int64_t count,
                              MoeSlots& slots) {
    const int64_t E = w.router->rows, k = p.top_k, H = w.router->cols;
    if (k < 1 || k > E) return core::error(StatusCode::kInternal) << "moe_router: top " << k << " of " << E;
    MoeScratch& m = moe_;
    grow(m.logits, count * E);
    grow(slots.ids, (first + count) * k);
    grow(slots.weights, (first + count) * k);
    KILN_RETURN_IF_ERROR(linear(*w.router, in + first * H, count, w.router_bias, m.logits.data()));
    moe_route(m.logits.data(), count, E, k, p.norm_topk, slots.ids.data() + first * k,
              slots.weights.data() + first * k);
    return Status::ok();
}

Status CpuBackend::moe_experts(const MoeWeights& w, const MoeParams& p, const float* in, int64_t rows,
                               MoeSlots& slots) {
    const int64_t E = w.router->rows, H = w.router->cols, k = p.top_k;
    if (int64_t(w.gate_up.size()) != E || int64_t(w.down.size()) != E || k < 1 || k > E ||
        int64_t(slots.ids.size()) < rows * k)
        return core::error(StatusCode::kInternal) << "moe_experts: " << w.gate_up.size() << " / " << w.down.size()
                                                  << " expert weights for " << E << " experts, top " << k << ", "
                                                  << slots.ids.size() << " routed slots for " << rows << " rows";
    MoeScratch& m = moe_;
    grow(slots.y, rows * k * H);
    for (int64_t i = 0; i < rows * k; ++i)
        if (slots.ids[size_t(i)] < 0 || slots.ids[size_t(i)] >= E)
            return core::error(StatusCode::kInternal) << "moe_experts: expert id " << slots.ids[size_t(i)];
    m.groups.build(slots.ids.data(), rows, k, E);
    for (int64_t e = 0; e < E; ++e) {  // this rank's experts that got tokens, each over its rows in row order
        const int64_t n = m.groups.count(e);
        if (n == 0 || !w.gate_up[size_t(e)]) continue;
        const int64_t* entries = m.groups.entries.data() + m.groups.offsets[size_t(e)];
        KILN_RETURN_IF_ERROR(run_expert(w, p, e, in, entries, n));
        for (int64_t i = 0; i < n; ++i) std::copy_n(m.y.data() + i * H, H, slots.y.data() + entries[i] * H);
    }
    return Status::ok();
}

Status CpuBackend::moe_combine(const MoeWeights& w, const MoeParams& p, const float* in, int64_t first, int64_t count,
                               const MoeSlots& slots, float* out) {
    const int64_t H = w.router->cols, k = p.top_k;
    if (count == 0) return Status::ok();
    std::fill_n(out, count * H, 0.0f);
    pool_->parallel_for(count, [&](int64_t b, int64_t end) {
        for (int64_t i = b; i < end; ++i) {
            const int64_t r = first + i;
            add_slots_in_expert_order(slots.ids.data() + r * k, slots.weights.data() + r * k,
                                      slots.y.data() + r * k * H, k, H, out + i * H);
        }
    });
    return moe_shared_expert(w, p, in + first * H, count, out);
}

Status CpuBackend::gather_logit_rows(const float* x, int64_t n, float* out) {
    for (size_t i = 0; i < step_.logit_rows.size(); ++i)
        std::copy_n(x + step_.logit_rows[i] * n, n, out + int64_t(i) * n);
    return Status::ok();
}

Status CpuBackend::softcap(float* x, int64_t n, float cap) {
    pool_->parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) x[i] = kernels::softcap_score(x[i], cap);
    }, 4096);
    return Status::ok();
}

}  // namespace kiln::ops
