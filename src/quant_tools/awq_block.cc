// AWQ block-output losses (see awq_block.h). Per candidate: the searched weights are quantized row
// block by row block (W' = dequant(quant(W diag(s))) / s, each row's groups independent of the split),
// then the block runs on the sampled inputs through the model's own step (model/transformer.h
// attention_heads / mlp_activations over an ops::CpuBackend, f32 weights and activations); the
// reference activations (f(gate) * up for the MLP, the attention output for q/k/v) are computed once
// by the same code with the fp32 weights.
#include "quant_tools/awq_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "kernels/ref/transformer.h"
#include "model/cpu_model.h"
#include "model/transformer.h"
#include "ops/cpu_backend.h"

namespace kiln::quant_tools {
namespace {

using core::StatusCode;

constexpr int64_t kRowBlock = 16;  // weight rows quantized per task

void run(core::ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t chunk = 1) {
    if (n <= 0) return;
    if (pool != nullptr) {
        pool->parallel_for(n, fn, chunk);
    } else {
        fn(0, n);
    }
}

core::Status check(std::span<const float> x, int64_t rows, int64_t cols, const char* what) {
    if (rows < 0 || cols < 0 || int64_t(x.size()) != rows * cols) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq block: " << what << " has " << x.size() << " values, expected [" << rows << ", " << cols << "]";
    }
    for (size_t i = 0; i < x.size(); ++i) {
        if (!std::isfinite(x[i])) {
            return core::error(StatusCode::kInvalidArgument) << "awq block: " << what << " is not finite at " << i;
        }
    }
    return core::Status::ok();
}

core::Status check_optional(std::span<const float> x, int64_t n, const char* what) {
    return x.empty() ? core::Status::ok() : check(x, 1, n, what);
}

core::Status check_scales(std::span<const float> s, int64_t in) {
    if (int64_t(s.size()) != in) {
        return core::error(StatusCode::kInvalidArgument) << "awq block: " << s.size() << " scales for " << in;
    }
    for (float v : s) {
        if (!(v > 0) || !std::isfinite(v)) {
            return core::error(StatusCode::kInvalidArgument) << "awq block: scale " << v << " (expected positive)";
        }
    }
    return core::Status::ok();
}

core::Status check_options(const quant::AwqOptions& o) {
    if ((o.group_size != 32 && o.group_size != 64 && o.group_size != 128) || o.grid < 1 || o.max_samples < 1) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq block: bad options (group " << o.group_size << ", grid " << o.grid << ", max_samples "
               << o.max_samples << ")";
    }
    return core::Status::ok();
}

// out [rows, in] = dequant(quant_int4(w diag(s))) diag(1/s) when quantize, else w itself. False when a
// scaled row cannot be quantized (overflow).
bool fake_quant(std::span<const float> w, int64_t rows, int64_t in, std::span<const float> s, bool quantize,
                const quant::AwqOptions& o, core::ThreadPool* pool, std::vector<float>& out) {
    out.assign(w.begin(), w.end());
    if (!quantize) return true;
    const int64_t num_blocks = (rows + kRowBlock - 1) / kRowBlock;
    std::vector<char> ok(size_t(num_blocks), 1);
    run(pool, num_blocks, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t r0 = b * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
            auto q = quant::quantize_int4_scaled(w.subspan(size_t(r0 * in), size_t((r1 - r0) * in)), r1 - r0, in, s,
                                                 o.group_size, o.mode);
            if (!q.is_ok()) {
                ok[size_t(b)] = 0;
                continue;
            }
            const std::vector<float> deq = quant::dequantize(*q);
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t j = 0; j < in; ++j) {
                    const float v = deq[size_t((r - r0) * in + j)] / s[size_t(j)];
                    out[size_t(r * in + j)] = v;
                    if (!std::isfinite(v)) ok[size_t(b)] = 0;
                }
            }
        }
    });
    return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
}

// Sum of per-token errors in token order, divided by tokens * outputs; +inf if any is not finite.
double mean_error(const std::vector<double>& token_err, int64_t outputs) {
    double sum = 0;
    for (double e : token_err) sum += e;
    if (!std::isfinite(sum)) return std::numeric_limits<double>::infinity();
    return sum / (double(token_err.size()) * double(outputs));
}

// The model's ops on the CPU: `pool`, or a one-thread pool of its own.
struct Cpu {
    std::unique_ptr<core::ThreadPool> own;
    core::ThreadPool* pool = nullptr;
    std::unique_ptr<ops::CpuBackend> be;
    explicit Cpu(core::ThreadPool* p) {
        if (p == nullptr) {
            own = std::make_unique<core::ThreadPool>(1);
            p = own.get();
        }
        pool = p;
        be = std::make_unique<ops::CpuBackend>(pool, kernels::cpu::best_isa());
    }
};

kernels::WeightView f32_view(const float* w, int64_t rows, int64_t cols) {
    kernels::WeightView v;
    v.data = w;
    v.dtype = core::DType::kF32;
    v.rows = rows;
    v.cols = cols;
    v.row_bytes = size_t(cols) * 4;
    return v;
}

// The parts as one f32 CpuWeight (fused when fuse_linears can, else side by side).
core::Result<std::unique_ptr<ops::CpuWeight>> f32_weight(std::initializer_list<kernels::WeightView> parts,
                                                         int64_t interleave) {
    return ops::CpuWeight::fuse(std::span<const kernels::WeightView>(parts.begin(), parts.size()), interleave, {});
}

// Per token (row of y [m, n]): the sum of its squares in double.
std::vector<double> row_sq(const std::vector<float>& y, int64_t m, int64_t n) {
    std::vector<double> e(size_t(m), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n; ++r) e[size_t(i)] += double(y[size_t(i * n + r)]) * double(y[size_t(i * n + r)]);
    return e;
}

// The error of a block's last (fp32) projection w [out, in], linear in its input: per token
// |W (ref - got)|^2 over the m rows of ref / got [m, in]; +inf when the backend fails.
double projected_error(Cpu& cpu, const ops::Weight& w, const std::vector<float>& ref, const std::vector<float>& got,
                       int64_t m) {
    std::vector<float> d(ref.size()), y(size_t(m * w.rows));
    for (size_t i = 0; i < d.size(); ++i) d[i] = ref[i] - got[i];
    if (!cpu.be->linear(w, d.data(), m, nullptr, y.data()).is_ok()) return std::numeric_limits<double>::infinity();
    return mean_error(row_sq(y, m, w.rows), w.rows);
}

// ---- MLP -------------------------------------------------------------------------------------------

struct MlpProblem {
    const AwqMlpBlock* b = nullptr;
    std::vector<float> xs;     // [m, hidden] sampled rows
    std::vector<float> h_ref;  // [m, inter] silu(gate x) * up x with the fp32 weights
    std::unique_ptr<ops::CpuWeight> down;
    int64_t m = 0;
};

// h [m, inter] = silu(gate x) * up x for the sampled rows: the model's mlp_activations.
core::Status mlp_hidden(Cpu& cpu, const MlpProblem& p, const float* gate, const float* up, std::vector<float>& h) {
    const AwqMlpBlock& b = *p.b;
    KILN_ASSIGN_OR_RETURN(const std::unique_ptr<ops::CpuWeight> gu,
                          f32_weight({f32_view(gate, b.inter, b.hidden), f32_view(up, b.inter, b.hidden)},
                                     ops::kSwigluBlock));
    std::vector<float> xn = p.xs, gate_up(size_t(p.m * 2 * b.inter));
    h.resize(size_t(p.m * b.inter));
    model::LayerWeights L;
    L.gate_up = gu.get();
    model::StepBuffers buf;
    buf.xn = xn.data();
    buf.gate_up = gate_up.data();
    buf.act = h.data();
    return model::mlp_activations(*cpu.be, L, b.gelu ? ops::GatedAct::kGeluTanh : ops::GatedAct::kSilu, buf, p.m);
}

core::Result<MlpProblem> make_mlp(Cpu& cpu, const AwqMlpBlock& b, std::span<const float> x, int64_t n,
                                  const quant::AwqOptions& o) {
    KILN_RETURN_IF_ERROR(check_options(o));
    if (b.hidden < 1 || b.inter < 1 || n < 1) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq mlp: hidden " << b.hidden << ", inter " << b.inter << ", n " << n << " (expected >= 1)";
    }
    KILN_RETURN_IF_ERROR(check(b.gate, b.inter, b.hidden, "gate"));
    KILN_RETURN_IF_ERROR(check(b.up, b.inter, b.hidden, "up"));
    KILN_RETURN_IF_ERROR(check(b.down, b.hidden, b.inter, "down"));
    KILN_RETURN_IF_ERROR(check(x, n, b.hidden, "x"));
    MlpProblem p;
    p.b = &b;
    p.m = std::min(n, o.max_samples);
    p.xs.resize(size_t(p.m * b.hidden));
    for (int64_t i = 0; i < p.m; ++i)
        std::copy_n(x.begin() + (i * n / p.m) * b.hidden, b.hidden, p.xs.begin() + i * b.hidden);
    KILN_ASSIGN_OR_RETURN(p.down, f32_weight({f32_view(b.down.data(), b.hidden, b.inter)}, 0));
    KILN_RETURN_IF_ERROR(mlp_hidden(cpu, p, b.gate.data(), b.up.data(), p.h_ref));
    return p;
}

double mlp_error(Cpu& cpu, const MlpProblem& p, std::span<const float> s, const quant::AwqOptions& o) {
    const AwqMlpBlock& b = *p.b;
    std::vector<float> gq, uq, h;
    if (!fake_quant(b.gate, b.inter, b.hidden, s, b.quantize_gate, o, cpu.pool, gq) ||
        !fake_quant(b.up, b.inter, b.hidden, s, b.quantize_up, o, cpu.pool, uq) ||
        !mlp_hidden(cpu, p, gq.data(), uq.data(), h).is_ok()) {
        return std::numeric_limits<double>::infinity();
    }
    return projected_error(cpu, *p.down, p.h_ref, h, p.m);
}

// ---- attention -------------------------------------------------------------------------------------

struct AttnProblem {
    const AwqAttnBlock* b = nullptr;
    std::span<const float> x;      // [T, hidden]
    std::vector<int64_t> seq_lens;  // the sequences of x, one after the other
    std::vector<int64_t> queries;  // [m] the tokens whose output error is measured (evenly strided)
    std::vector<float> att_ref;    // [m, q_dim] their attention output with the fp32 weights
    std::vector<float> bqkv;       // [q_dim + 2 kv_dim] biases (zeros for absent ones), or empty
    std::unique_ptr<ops::CpuWeight> o;
    int64_t tokens = 0, q_dim = 0, kv_dim = 0;
};

// att [T, q_dim] of every token for the q/k/v weights: the model's attention_heads, one sequence
// per step over a contiguous f32 cache (RoPE at positions 0.. of each sequence).
core::Status attend_all(Cpu& cpu, const AttnProblem& p, const float* wq, const float* wk, const float* wv,
                        std::vector<float>& att) {
    const AwqAttnBlock& b = *p.b;
    const int64_t H = b.hidden, Q = p.q_dim, KV = p.kv_dim;
    KILN_ASSIGN_OR_RETURN(
        const std::unique_ptr<ops::CpuWeight> qkv,
        f32_weight({f32_view(wq, Q, H), f32_view(wk, KV, H), f32_view(wv, KV, H)}, 0));
    model::LayerWeights L;
    L.qkv = qkv.get();
    L.bqkv = p.bqkv.empty() ? nullptr : p.bqkv.data();
    L.q_norm = b.q_norm.empty() ? nullptr : b.q_norm.data();
    L.k_norm = b.k_norm.empty() ? nullptr : b.k_norm.data();
    L.inv_freq = b.inv_freq.data();
    const ops::AttentionParams shape{b.num_heads, b.num_kv_heads, b.head_dim, b.window, b.softcap};
    att.resize(size_t(p.tokens * Q));
    const int64_t longest = *std::max_element(p.seq_lens.begin(), p.seq_lens.end());
    std::vector<float> xn(size_t(longest * H)), qkv_out(size_t(longest * (Q + 2 * KV))), q(size_t(longest * Q));
    std::vector<float> k(size_t(longest * KV)), v(size_t(longest * KV));
    std::vector<int32_t> tokens(static_cast<size_t>(longest), 0), positions(static_cast<size_t>(longest));
    std::vector<int64_t> slots(static_cast<size_t>(longest));
    for (int64_t i = 0; i < longest; ++i) positions[size_t(i)] = int32_t(slots[size_t(i)] = i);
    void* const kp[] = {k.data()};
    void* const vp[] = {v.data()};
    int64_t begin = 0;
    for (int64_t len : p.seq_lens) {
        ops::AttentionSeq seq;
        seq.kv.kv_len = len;
        seq.num_tokens = len;
        ops::CpuBackend::Step st;
        st.tokens = std::span<const int32_t>(tokens.data(), size_t(len));  // only their count is read
        st.positions = std::span<const int32_t>(positions.data(), size_t(len));
        st.slots = std::span<const int64_t>(slots.data(), size_t(len));
        st.seqs = std::span<ops::AttentionSeq>(&seq, 1);
        st.k = kp;
        st.v = vp;
        cpu.be->set_step(st);
        std::copy_n(p.x.begin() + begin * H, len * H, xn.begin());
        model::StepBuffers buf;
        buf.xn = xn.data();
        buf.qkv = qkv_out.data();
        buf.q = q.data();
        buf.att = att.data() + begin * Q;
        KILN_RETURN_IF_ERROR(model::attention_heads(*cpu.be, L, 0, shape, b.norm_eps, b.q_scale, buf, len));
        begin += len;
    }
    return core::Status::ok();
}

// The rows of att [T, q_dim] at the problem's queries: [m, q_dim].
std::vector<float> query_rows(const AttnProblem& p, const std::vector<float>& att) {
    std::vector<float> out(p.queries.size() * size_t(p.q_dim));
    for (size_t i = 0; i < p.queries.size(); ++i)
        std::copy_n(att.begin() + p.queries[i] * p.q_dim, p.q_dim, out.begin() + int64_t(i) * p.q_dim);
    return out;
}

core::Status check_attn(const AwqAttnBlock& b) {
    if (b.hidden < 1 || b.num_heads < 1 || b.num_kv_heads < 1 || b.head_dim < 2 || b.head_dim % 2 != 0 ||
        b.num_heads % b.num_kv_heads != 0 || b.window < 0 || int64_t(b.inv_freq.size()) != b.head_dim / 2) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq attention: hidden " << b.hidden << ", heads " << b.num_heads << "/" << b.num_kv_heads
               << ", head_dim " << b.head_dim << ", window " << b.window << ", " << b.inv_freq.size()
               << " RoPE frequencies";
    }
    const int64_t Q = b.num_heads * b.head_dim, KV = b.num_kv_heads * b.head_dim;
    KILN_RETURN_IF_ERROR(check(b.q, Q, b.hidden, "q"));
    KILN_RETURN_IF_ERROR(check(b.k, KV, b.hidden, "k"));
    KILN_RETURN_IF_ERROR(check(b.v, KV, b.hidden, "v"));
    KILN_RETURN_IF_ERROR(check(b.o, b.hidden, Q, "o"));
    KILN_RETURN_IF_ERROR(check_optional(b.bq, Q, "q bias"));
    KILN_RETURN_IF_ERROR(check_optional(b.bk, KV, "k bias"));
    KILN_RETURN_IF_ERROR(check_optional(b.bv, KV, "v bias"));
    KILN_RETURN_IF_ERROR(check_optional(b.q_norm, b.head_dim, "q norm"));
    KILN_RETURN_IF_ERROR(check_optional(b.k_norm, b.head_dim, "k norm"));
    return core::Status::ok();
}

core::Result<AttnProblem> make_attn(Cpu& cpu, const AwqAttnBlock& b, std::span<const float> x,
                                    std::span<const int64_t> seq_lens, const quant::AwqOptions& o) {
    KILN_RETURN_IF_ERROR(check_options(o));
    KILN_RETURN_IF_ERROR(check_attn(b));
    AttnProblem p;
    p.b = &b;
    p.q_dim = b.num_heads * b.head_dim;
    p.kv_dim = b.num_kv_heads * b.head_dim;
    for (int64_t len : seq_lens) {
        if (len < 1 || len > std::numeric_limits<int32_t>::max()) {
            return core::error(StatusCode::kInvalidArgument) << "awq attention: sequence length " << len;
        }
        p.seq_lens.push_back(len);
        p.tokens += len;
    }
    if (p.tokens == 0) return core::error(StatusCode::kInvalidArgument) << "awq attention: no sequences";
    KILN_RETURN_IF_ERROR(check(x, p.tokens, b.hidden, "x"));
    p.x = x;
    if (!b.bq.empty() || !b.bk.empty() || !b.bv.empty()) {
        p.bqkv.assign(size_t(p.q_dim + 2 * p.kv_dim), 0.0f);
        std::copy(b.bq.begin(), b.bq.end(), p.bqkv.begin());
        std::copy(b.bk.begin(), b.bk.end(), p.bqkv.begin() + p.q_dim);
        std::copy(b.bv.begin(), b.bv.end(), p.bqkv.begin() + p.q_dim + p.kv_dim);
    }
    KILN_ASSIGN_OR_RETURN(p.o, f32_weight({f32_view(b.o.data(), b.hidden, p.q_dim)}, 0));
    const int64_t m = std::min(p.tokens, o.max_samples);
    for (int64_t i = 0; i < m; ++i) p.queries.push_back(i * p.tokens / m);
    std::vector<float> att;
    KILN_RETURN_IF_ERROR(attend_all(cpu, p, b.q.data(), b.k.data(), b.v.data(), att));
    p.att_ref = query_rows(p, att);
    return p;
}

double attn_error(Cpu& cpu, const AttnProblem& p, std::span<const float> s, const quant::AwqOptions& o) {
    const AwqAttnBlock& b = *p.b;
    std::vector<float> wq, wk, wv, att;
    if (!fake_quant(b.q, p.q_dim, b.hidden, s, b.quantize_q, o, cpu.pool, wq) ||
        !fake_quant(b.k, p.kv_dim, b.hidden, s, b.quantize_k, o, cpu.pool, wk) ||
        !fake_quant(b.v, p.kv_dim, b.hidden, s, b.quantize_v, o, cpu.pool, wv) ||
        !attend_all(cpu, p, wq.data(), wk.data(), wv.data(), att).is_ok()) {
        return std::numeric_limits<double>::infinity();
    }
    return projected_error(cpu, *p.o, p.att_ref, query_rows(p, att), int64_t(p.queries.size()));
}

// AutoAWQ's duo statistic over the weights that are quantized (empty unless duo).
std::vector<float> weight_mean(std::initializer_list<std::pair<std::span<const float>, bool>> ws, int64_t in,
                               const quant::AwqOptions& o) {
    if (!o.duo_scaling) return {};
    std::vector<std::span<const float>> spans;
    std::vector<int64_t> rows;
    for (const auto& [w, quantized] : ws) {
        if (!quantized) continue;
        spans.push_back(w);
        rows.push_back(int64_t(w.size()) / in);
    }
    if (spans.empty()) return std::vector<float>(size_t(in), 1.0f);
    return quant::awq_weight_mean(spans, rows, in, o.group_size);
}

}  // namespace

core::Result<double> awq_mlp_error(const AwqMlpBlock& block, std::span<const float> x, int64_t n,
                                   std::span<const float> scales, const quant::AwqOptions& options,
                                   core::ThreadPool* pool) {
    Cpu cpu(pool);
    KILN_ASSIGN_OR_RETURN(const MlpProblem p, make_mlp(cpu, block, x, n, options));
    KILN_RETURN_IF_ERROR(check_scales(scales, block.hidden));
    const double e = mlp_error(cpu, p, scales, options);
    if (!std::isfinite(e)) return core::error(StatusCode::kInvalidArgument) << "awq mlp: the error overflows";
    return e;
}

core::Result<quant::AwqResult> awq_search_mlp(const AwqMlpBlock& block, std::span<const float> x, int64_t n,
                                              const quant::AwqOptions& options, core::ThreadPool* pool) {
    Cpu cpu(pool);
    KILN_ASSIGN_OR_RETURN(const MlpProblem p, make_mlp(cpu, block, x, n, options));
    const std::vector<float> x_mean = quant::channel_mean_abs(x, n, block.hidden);
    const std::vector<float> w_mean =
        weight_mean({{block.gate, block.quantize_gate}, {block.up, block.quantize_up}}, block.hidden, options);
    KILN_ASSIGN_OR_RETURN(quant::AwqResult r,
                          quant::awq_search_loss(x_mean, w_mean, options, [&](std::span<const float> s) {
                              return mlp_error(cpu, p, s, options);
                          }));
    r.num_samples = p.m;
    return r;
}

core::Result<double> awq_attn_error(const AwqAttnBlock& block, std::span<const float> x,
                                    std::span<const int64_t> seq_lens, std::span<const float> scales,
                                    const quant::AwqOptions& options, core::ThreadPool* pool) {
    Cpu cpu(pool);
    KILN_ASSIGN_OR_RETURN(const AttnProblem p, make_attn(cpu, block, x, seq_lens, options));
    KILN_RETURN_IF_ERROR(check_scales(scales, block.hidden));
    const double e = attn_error(cpu, p, scales, options);
    if (!std::isfinite(e)) return core::error(StatusCode::kInvalidArgument) << "awq attention: the error overflows";
    return e;
}

core::Result<quant::AwqResult> awq_search_attn(const AwqAttnBlock& block, std::span<const float> x,
                                               std::span<const int64_t> seq_lens, std::span<const float> x_mean,
                                               const quant::AwqOptions& options, core::ThreadPool* pool) {
    Cpu cpu(pool);
    KILN_ASSIGN_OR_RETURN(const AttnProblem p, make_attn(cpu, block, x, seq_lens, options));
    if (int64_t(x_mean.size()) != block.hidden) {
        return core::error(StatusCode::kInvalidArgument) << "awq attention: " << x_mean.size() << " x_mean values";
    }
    const std::vector<float> w_mean = weight_mean(
        {{block.q, block.quantize_q}, {block.k, block.quantize_k}, {block.v, block.quantize_v}}, block.hidden, options);
    KILN_ASSIGN_OR_RETURN(quant::AwqResult r,
                          quant::awq_search_loss(x_mean, w_mean, options, [&](std::span<const float> s) {
                              return attn_error(cpu, p, s, options);
                          }));
    r.num_samples = int64_t(p.queries.size());
    return r;
}

core::Result<std::vector<float>> awq_attn_output(const AwqAttnBlock& block, std::span<const float> x,
                                                 std::span<const int64_t> seq_lens, core::ThreadPool* pool) {
    quant::AwqOptions o;
    o.max_samples = std::numeric_limits<int64_t>::max();  // every row a query
    Cpu cpu(pool);
    KILN_ASSIGN_OR_RETURN(AttnProblem p, make_attn(cpu, block, x, seq_lens, o));
    return std::move(p.att_ref);
}

core::Result<std::vector<double>> awq_rope_inv_freq(const loader::ModelConfig& c) {
    KILN_ASSIGN_OR_RETURN(kernels::ref::RopeParams p, model::rope_params(c, "awq"));
    return kernels::ref::rope_inv_freqs(c.head_dim, p);
}

}  // namespace kiln::quant_tools
