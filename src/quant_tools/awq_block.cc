// AWQ block-output losses (see awq_block.h). Per candidate: the searched weights are quantized row
// block by row block (W' = dequant(quant(W diag(s))) / s, each row's groups independent of the split),
// then the block runs token by token on the sampled inputs; the reference activations (h = silu(g) * u
// for the MLP, the attention output for q/k/v) are computed once by the same code with the fp32
// weights. SiLU and softmax run in double; RoPE and the q/k norms are kernels/ref's.
#include "quant_tools/awq_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "kernels/ref/transformer.h"
#include "model/llama.h"

namespace kiln::quant_tools {
namespace {

using core::StatusCode;

constexpr int64_t kRowBlock = 16;  // weight rows quantized per task

// Four floats in one SSE register (GCC/Clang vector extension; plain IEEE lane-wise + and *).
using Float4 = float __attribute__((vector_size(16)));

Float4 load4(const float* p) {
    Float4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// a . b for n floats: float products in 8 independent partial sums, finished in double.
double dot(const float* a, const float* b, int64_t n) {
    Float4 acc0 = {}, acc1 = {};
    const int64_t main = n - n % 8;
    for (int64_t j = 0; j < main; j += 8) {
        acc0 += load4(a + j) * load4(b + j);
        acc1 += load4(a + j + 4) * load4(b + j + 4);
    }
    double sum = 0;
    for (int l = 0; l < 4; ++l) sum += double(acc0[l]) + double(acc1[l]);
    for (int64_t j = main; j < n; ++j) sum += double(a[j]) * double(b[j]);
    return sum;
}

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

// ---- MLP -------------------------------------------------------------------------------------------

struct MlpProblem {
    const AwqMlpBlock* b = nullptr;
    std::vector<float> xs;     // [m, hidden] sampled rows
    std::vector<float> h_ref;  // [m, inter] silu(gate x) * up x with the fp32 weights
    int64_t m = 0;
};

// h [inter] = silu(gate x) * up x for one token.
void mlp_hidden(const float* x, const float* gate, const float* up, int64_t hidden, int64_t inter, float* h) {
    for (int64_t f = 0; f < inter; ++f) {
        const double g = dot(x, gate + f * hidden, hidden);
        const double u = dot(x, up + f * hidden, hidden);
        h[f] = float(g / (1.0 + std::exp(-g)) * u);
    }
}

core::Result<MlpProblem> make_mlp(const AwqMlpBlock& b, std::span<const float> x, int64_t n, const quant::AwqOptions& o,
                                  core::ThreadPool* pool) {
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
    p.h_ref.resize(size_t(p.m * b.inter));
    run(pool, p.m, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            mlp_hidden(p.xs.data() + i * b.hidden, b.gate.data(), b.up.data(), b.hidden, b.inter,
                       p.h_ref.data() + i * b.inter);
    });
    return p;
}

double mlp_error(const MlpProblem& p, std::span<const float> s, const quant::AwqOptions& o, core::ThreadPool* pool) {
    const AwqMlpBlock& b = *p.b;
    std::vector<float> gq, uq;
    if (!fake_quant(b.gate, b.inter, b.hidden, s, b.quantize_gate, o, pool, gq) ||
        !fake_quant(b.up, b.inter, b.hidden, s, b.quantize_up, o, pool, uq)) {
        return std::numeric_limits<double>::infinity();
    }
    std::vector<double> token_err(size_t(p.m), 0.0);
    run(pool, p.m, [&](int64_t i0, int64_t i1) {
        std::vector<float> d(size_t(b.inter));  // [inter] h_ref - h'
        for (int64_t i = i0; i < i1; ++i) {
            mlp_hidden(p.xs.data() + i * b.hidden, gq.data(), uq.data(), b.hidden, b.inter, d.data());
            const float* hr = p.h_ref.data() + i * b.inter;
            for (int64_t f = 0; f < b.inter; ++f) d[size_t(f)] = hr[f] - d[size_t(f)];
            double e = 0;
            for (int64_t r = 0; r < b.hidden; ++r) {
                const double y = dot(b.down.data() + r * b.inter, d.data(), b.inter);
                e += y * y;
            }
            token_err[size_t(i)] = e;
        }
    });
    return mean_error(token_err, b.hidden);
}

// ---- attention -------------------------------------------------------------------------------------

struct AttnProblem {
    const AwqAttnBlock* b = nullptr;
    std::span<const float> x;        // [T, hidden]
    std::vector<int64_t> seq_begin;  // [T] first row of the token's sequence
    std::vector<int32_t> pos;        // [T] position in its sequence
    std::vector<int64_t> queries;    // [m] the tokens whose output error is measured (evenly strided)
    std::vector<float> att_ref;      // [m, q_dim] their attention output with the fp32 weights
    int64_t tokens = 0, q_dim = 0, kv_dim = 0;
};

// k/v [T, kv_dim] for every token, q [m, q_dim] for the query tokens: projection (+ bias), per-head
// norm, RoPE at the token's position.
void project(const AttnProblem& p, const float* wq, const float* wk, const float* wv, core::ThreadPool* pool,
             std::vector<float>& q, std::vector<float>& k, std::vector<float>& v) {
    const AwqAttnBlock& b = *p.b;
    const int64_t H = b.hidden, D = b.head_dim, m = int64_t(p.queries.size());
    q.resize(size_t(m * p.q_dim));
    k.resize(size_t(p.tokens * p.kv_dim));
    v.resize(size_t(p.tokens * p.kv_dim));
    auto proj = [&](const float* x, const float* w, std::span<const float> bias, int64_t rows, float* y) {
        for (int64_t r = 0; r < rows; ++r) y[r] = float(dot(x, w + r * H, H) + (bias.empty() ? 0.0 : bias[size_t(r)]));
    };
    auto norm_rope = [&](float* y, int64_t heads, std::span<const float> norm, const int32_t* pos) {
        if (!norm.empty())
            for (int64_t h = 0; h < heads; ++h) kernels::ref::rmsnorm(y + h * D, norm.data(), y + h * D, D, b.norm_eps);
        kernels::ref::rope(y, 1, heads, D, pos, b.inv_freq);
    };
    run(pool, p.tokens, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* x = p.x.data() + t * H;
            float* kt = k.data() + t * p.kv_dim;
            proj(x, wk, b.bk, p.kv_dim, kt);
            proj(x, wv, b.bv, p.kv_dim, v.data() + t * p.kv_dim);
            norm_rope(kt, b.num_kv_heads, b.k_norm, &p.pos[size_t(t)]);
        }
    });
    run(pool, m, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t t = p.queries[size_t(i)];
            float* qi = q.data() + i * p.q_dim;
            proj(p.x.data() + t * H, wq, b.bq, p.q_dim, qi);
            norm_rope(qi, b.num_heads, b.q_norm, &p.pos[size_t(t)]);
        }
    });
}

// out [q_dim] = causal softmax(q k^T / sqrt(D)) v for query i (token queries[i]) over its own
// sequence (GQA, window).
void attend(const AttnProblem& p, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
            int64_t i, std::vector<double>& scores, std::vector<double>& acc, float* out) {
    const int64_t t = p.queries[size_t(i)];
    const AwqAttnBlock& b = *p.b;
    const int64_t D = b.head_dim, group = b.num_heads / b.num_kv_heads;
    const int64_t base = p.seq_begin[size_t(t)], pos = p.pos[size_t(t)];
    const int64_t j0 = b.window > 0 ? std::max<int64_t>(0, pos - b.window + 1) : 0;
    const double scale = 1.0 / std::sqrt(double(D));
    scores.resize(size_t(pos + 1 - j0));
    acc.resize(size_t(D));
    for (int64_t h = 0; h < b.num_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qh = q.data() + i * p.q_dim + h * D;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = j0; j <= pos; ++j) {
            const double sc = dot(qh, k.data() + (base + j) * p.kv_dim + kvh * D, D) * scale;
            scores[size_t(j - j0)] = sc;
            mx = std::max(mx, sc);
        }
        double denom = 0;
        for (double& sc : scores) denom += (sc = std::exp(sc - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = j0; j <= pos; ++j) {
            const double w = scores[size_t(j - j0)] / denom;
            const float* vj = v.data() + (base + j) * p.kv_dim + kvh * D;
            for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += w * double(vj[d]);
        }
        for (int64_t d = 0; d < D; ++d) out[h * D + d] = float(acc[size_t(d)]);
    }
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

core::Result<AttnProblem> make_attn(const AwqAttnBlock& b, std::span<const float> x, std::span<const int64_t> seq_lens,
                                    const quant::AwqOptions& o, core::ThreadPool* pool) {
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
        for (int64_t i = 0; i < len; ++i) {
            p.seq_begin.push_back(p.tokens);
            p.pos.push_back(int32_t(i));
        }
        p.tokens += len;
    }
    if (p.tokens == 0) return core::error(StatusCode::kInvalidArgument) << "awq attention: no sequences";
    KILN_RETURN_IF_ERROR(check(x, p.tokens, b.hidden, "x"));
    p.x = x;
    const int64_t m = std::min(p.tokens, o.max_samples);
    for (int64_t i = 0; i < m; ++i) p.queries.push_back(i * p.tokens / m);
    std::vector<float> q, k, v;
    project(p, b.q.data(), b.k.data(), b.v.data(), pool, q, k, v);
    p.att_ref.resize(size_t(m * p.q_dim));
    run(pool, m, [&](int64_t i0, int64_t i1) {
        std::vector<double> scores, acc;
        for (int64_t i = i0; i < i1; ++i) attend(p, q, k, v, i, scores, acc, p.att_ref.data() + i * p.q_dim);
    });
    return p;
}

double attn_error(const AttnProblem& p, std::span<const float> s, const quant::AwqOptions& o, core::ThreadPool* pool) {
    const AwqAttnBlock& b = *p.b;
    std::vector<float> wq, wk, wv;
    if (!fake_quant(b.q, p.q_dim, b.hidden, s, b.quantize_q, o, pool, wq) ||
        !fake_quant(b.k, p.kv_dim, b.hidden, s, b.quantize_k, o, pool, wk) ||
        !fake_quant(b.v, p.kv_dim, b.hidden, s, b.quantize_v, o, pool, wv)) {
        return std::numeric_limits<double>::infinity();
    }
    std::vector<float> q, k, v;
    project(p, wq.data(), wk.data(), wv.data(), pool, q, k, v);
    const int64_t m = int64_t(p.queries.size());
    std::vector<double> token_err(size_t(m), 0.0);
    run(pool, m, [&](int64_t i0, int64_t i1) {
        std::vector<double> scores, acc;
        std::vector<float> d(size_t(p.q_dim));  // [q_dim] att_ref - att'
        for (int64_t i = i0; i < i1; ++i) {
            attend(p, q, k, v, i, scores, acc, d.data());
            const float* ar = p.att_ref.data() + i * p.q_dim;
            for (int64_t c = 0; c < p.q_dim; ++c) d[size_t(c)] = ar[c] - d[size_t(c)];
            double e = 0;
            for (int64_t r = 0; r < b.hidden; ++r) {
                const double y = dot(b.o.data() + r * p.q_dim, d.data(), p.q_dim);
                e += y * y;
            }
            token_err[size_t(i)] = e;
        }
    });
    return mean_error(token_err, b.hidden);
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
    KILN_ASSIGN_OR_RETURN(const MlpProblem p, make_mlp(block, x, n, options, pool));
    KILN_RETURN_IF_ERROR(check_scales(scales, block.hidden));
    const double e = mlp_error(p, scales, options, pool);
    if (!std::isfinite(e)) return core::error(StatusCode::kInvalidArgument) << "awq mlp: the error overflows";
    return e;
}

core::Result<quant::AwqResult> awq_search_mlp(const AwqMlpBlock& block, std::span<const float> x, int64_t n,
                                              const quant::AwqOptions& options, core::ThreadPool* pool) {
    KILN_ASSIGN_OR_RETURN(const MlpProblem p, make_mlp(block, x, n, options, pool));
    const std::vector<float> x_mean = quant::channel_mean_abs(x, n, block.hidden);
    const std::vector<float> w_mean =
        weight_mean({{block.gate, block.quantize_gate}, {block.up, block.quantize_up}}, block.hidden, options);
    KILN_ASSIGN_OR_RETURN(quant::AwqResult r,
                          quant::awq_search_loss(x_mean, w_mean, options, [&](std::span<const float> s) {
                              return mlp_error(p, s, options, pool);
                          }));
    r.num_samples = p.m;
    return r;
}

core::Result<double> awq_attn_error(const AwqAttnBlock& block, std::span<const float> x,
                                    std::span<const int64_t> seq_lens, std::span<const float> scales,
                                    const quant::AwqOptions& options, core::ThreadPool* pool) {
    KILN_ASSIGN_OR_RETURN(const AttnProblem p, make_attn(block, x, seq_lens, options, pool));
    KILN_RETURN_IF_ERROR(check_scales(scales, block.hidden));
    const double e = attn_error(p, scales, options, pool);
    if (!std::isfinite(e)) return core::error(StatusCode::kInvalidArgument) << "awq attention: the error overflows";
    return e;
}

core::Result<quant::AwqResult> awq_search_attn(const AwqAttnBlock& block, std::span<const float> x,
                                               std::span<const int64_t> seq_lens, std::span<const float> x_mean,
                                               const quant::AwqOptions& options, core::ThreadPool* pool) {
    KILN_ASSIGN_OR_RETURN(const AttnProblem p, make_attn(block, x, seq_lens, options, pool));
    if (int64_t(x_mean.size()) != block.hidden) {
        return core::error(StatusCode::kInvalidArgument) << "awq attention: " << x_mean.size() << " x_mean values";
    }
    const std::vector<float> w_mean = weight_mean(
        {{block.q, block.quantize_q}, {block.k, block.quantize_k}, {block.v, block.quantize_v}}, block.hidden, options);
    KILN_ASSIGN_OR_RETURN(quant::AwqResult r,
                          quant::awq_search_loss(x_mean, w_mean, options, [&](std::span<const float> s) {
                              return attn_error(p, s, options, pool);
                          }));
    r.num_samples = int64_t(p.queries.size());
    return r;
}

core::Result<std::vector<float>> awq_attn_output(const AwqAttnBlock& block, std::span<const float> x,
                                                 std::span<const int64_t> seq_lens, core::ThreadPool* pool) {
    quant::AwqOptions o;
    o.max_samples = std::numeric_limits<int64_t>::max();  // every row a query
    KILN_ASSIGN_OR_RETURN(AttnProblem p, make_attn(block, x, seq_lens, o, pool));
    return std::move(p.att_ref);
}

core::Result<std::vector<double>> awq_rope_inv_freq(const loader::ModelConfig& c) {
    KILN_ASSIGN_OR_RETURN(kernels::ref::RopeParams p, model::rope_params(c, "awq"));
    return kernels::ref::rope_inv_freqs(c.head_dim, p);
}

}  // namespace kiln::quant_tools
