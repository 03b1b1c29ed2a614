// Checks the AWQ block-output losses (quant_tools/awq_block.h): the MLP and attention-block errors equal a
// direct double-precision recomputation (strided samples and query rows, odd sizes, short last groups, GQA, biases,
// q/k norms, sliding window, several sequences with RoPE at their own positions); weights already on
// the INT4 grid give exactly zero error; the search keeps RTN as its first candidate, never reports
// more than RTN, reports the error its scales give, and gives the same bits with a thread pool;
// bad arguments are kInvalidArgument. collect_activations keeps whole sequences from position 0 that
// agree with its strided samples, and the attention output computed from them matches the model's own
// o_proj input (stories260K; SmolLM2-135M when present, else skipped).
#include "quant_tools/awq_block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "quant_tools/calibration.h"
#include "loader/checkpoint.h"
#include "loader/convert.h"
#include "model/cpu_model.h"
#include "quant/awq.h"
#include "quant/int_quant.h"
#include "support/test_support.h"

namespace kiln::quant_tools {
namespace {

using quant::AwqOptions;
using quant::Int4Mode;

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    return x;
}

std::vector<float> uniform(int64_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    return x;
}

// W' = dequant(quant(W diag(s))) / s in double, or W itself when !quantize.
std::vector<double> fake_quant(const std::vector<float>& w, int64_t rows, int64_t in, const std::vector<float>& s,
                               bool quantize, const AwqOptions& o) {
    std::vector<double> out(w.begin(), w.end());
    if (!quantize) return out;
    auto q = quant::quantize_int4_scaled(w, rows, in, s, o.group_size, o.mode);
    EXPECT_TRUE(q.is_ok()) << q.status().to_string();
    const std::vector<float> deq = quant::dequantize(*q);
    for (int64_t i = 0; i < rows * in; ++i) out[size_t(i)] = double(deq[size_t(i)] / s[size_t(i % in)]);
    return out;
}

std::vector<double> matvec(const std::vector<double>& w, int64_t rows, int64_t cols, const double* x) {
    std::vector<double> y(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) y[size_t(r)] += w[size_t(r * cols + c)] * x[c];
    return y;
}

struct Mlp {
    int64_t hidden = 0, inter = 0;
    std::vector<float> gate, up, down;
    AwqMlpBlock block(bool qg = true, bool qu = true) const { return {gate, up, down, hidden, inter, qg, qu}; }
};

Mlp random_mlp(int64_t hidden, int64_t inter, uint32_t seed) {
    return {hidden, inter, gaussian(inter * hidden, seed, 0.2f), gaussian(inter * hidden, seed + 1, 0.2f),
            gaussian(hidden * inter, seed + 2, 0.2f)};
}

double direct_mlp_error(const AwqMlpBlock& b, const std::vector<float>& x, int64_t n, const std::vector<float>& s,
                        const AwqOptions& o) {
    const int64_t H = b.hidden, F = b.inter, m = std::min(n, o.max_samples);
    const std::vector<float> gate(b.gate.begin(), b.gate.end()), up(b.up.begin(), b.up.end());
    const std::vector<double> g0(gate.begin(), gate.end()), u0(up.begin(), up.end());
    const std::vector<double> gq = fake_quant(gate, F, H, s, b.quantize_gate, o);
    const std::vector<double> uq = fake_quant(up, F, H, s, b.quantize_up, o);
    const std::vector<double> down(b.down.begin(), b.down.end());
    double sum = 0;
    for (int64_t i = 0; i < m; ++i) {
        const std::vector<double> xi(x.begin() + (i * n / m) * H, x.begin() + (i * n / m + 1) * H);
        const auto g = matvec(g0, F, H, xi.data()), u = matvec(u0, F, H, xi.data());
        const auto g2 = matvec(gq, F, H, xi.data()), u2 = matvec(uq, F, H, xi.data());
        std::vector<double> d(static_cast<size_t>(F));
        for (int64_t f = 0; f < F; ++f) {
            auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
            d[size_t(f)] = silu(g[size_t(f)]) * u[size_t(f)] - silu(g2[size_t(f)]) * u2[size_t(f)];
        }
        for (double y : matvec(down, H, F, d.data())) sum += y * y;
    }
    return sum / (double(m) * double(H));
}

struct Attn {
    std::vector<float> q, k, v, o, bq, bk, bv, qn, kn;
    AwqAttnBlock b;
};

Attn random_attn(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, uint32_t seed, bool bias,
                 bool qk_norm, int64_t window) {
    Attn a;
    const int64_t Q = heads * head_dim, KV = kv_heads * head_dim;
    a.q = gaussian(Q * hidden, seed, 0.3f);
    a.k = gaussian(KV * hidden, seed + 1, 0.3f);
    a.v = gaussian(KV * hidden, seed + 2, 0.3f);
    a.o = gaussian(hidden * Q, seed + 3, 0.3f);
    if (bias) {
        a.bq = gaussian(Q, seed + 4, 0.5f);
        a.bk = gaussian(KV, seed + 5, 0.5f);
        a.bv = gaussian(KV, seed + 6, 0.5f);
    }
    if (qk_norm) {
        a.qn = uniform(head_dim, seed + 7, 0.5f, 1.5f);
        a.kn = uniform(head_dim, seed + 8, 0.5f, 1.5f);
    }
    a.b.hidden = hidden;
    a.b.num_heads = heads;
    a.b.num_kv_heads = kv_heads;
    a.b.head_dim = head_dim;
    a.b.window = window;
    a.b.norm_eps = 1e-5f;
    for (int64_t i = 0; i < head_dim / 2; ++i)
        a.b.inv_freq.push_back(std::pow(10000.0, -2.0 * double(i) / double(head_dim)));
    return a;
}

// The block with spans into a (after a is in its final place).
AwqAttnBlock bind(const Attn& a) {
    AwqAttnBlock b = a.b;
    b.q = a.q, b.k = a.k, b.v = a.v, b.o = a.o, b.bq = a.bq, b.bk = a.bk, b.bv = a.bv, b.q_norm = a.qn, b.k_norm = a.kn;
    return b;
}

// q, k, v of one token in double: projection + bias, per-head RMSNorm, RoPE (interleaved pairs).
void direct_qkv(const AwqAttnBlock& b, const std::vector<double>& wq, const std::vector<double>& wk,
                const std::vector<double>& wv, const double* x, int64_t pos, std::vector<double>& q,
                std::vector<double>& k, std::vector<double>& v) {
    const int64_t H = b.hidden, D = b.head_dim;
    q = matvec(wq, b.num_heads * D, H, x);
    k = matvec(wk, b.num_kv_heads * D, H, x);
    v = matvec(wv, b.num_kv_heads * D, H, x);
    for (size_t i = 0; i < b.bq.size(); ++i) q[i] += b.bq[i];
    for (size_t i = 0; i < b.bk.size(); ++i) k[i] += b.bk[i];
    for (size_t i = 0; i < b.bv.size(); ++i) v[i] += b.bv[i];
    auto norm_rope = [&](std::vector<double>& t, int64_t heads, std::span<const float> w) {
        for (int64_t h = 0; h < heads; ++h) {
            double* e = t.data() + h * D;
            if (!w.empty()) {
                double ss = 0;
                for (int64_t d = 0; d < D; ++d) ss += e[d] * e[d];
                const double r = 1.0 / std::sqrt(ss / double(D) + double(b.norm_eps));
                for (int64_t d = 0; d < D; ++d) e[d] *= r * double(w[size_t(d)]);
            }
            for (int64_t i = 0; i < D / 2; ++i) {
                const double ang = double(pos) * b.inv_freq[size_t(i)], c = std::cos(ang), s = std::sin(ang);
                const double x0 = e[2 * i], x1 = e[2 * i + 1];
                e[2 * i] = x0 * c - x1 * s;
                e[2 * i + 1] = x0 * s + x1 * c;
            }
        }
    };
    norm_rope(q, b.num_heads, b.q_norm);
    norm_rope(k, b.num_kv_heads, b.k_norm);
}

// Attention outputs [T, Q] in double for weights wq/wk/wv.
std::vector<double> direct_attention(const AwqAttnBlock& b, const std::vector<double>& wq,
                                     const std::vector<double>& wk, const std::vector<double>& wv,
                                     const std::vector<float>& x, const std::vector<int64_t>& lens) {
    const int64_t H = b.hidden, D = b.head_dim, Q = b.num_heads * D, KV = b.num_kv_heads * D;
    std::vector<double> out;
    int64_t base = 0;
    for (int64_t len : lens) {
        std::vector<std::vector<double>> qs(static_cast<size_t>(len)), ks(static_cast<size_t>(len)),
            vs(static_cast<size_t>(len));
        for (int64_t p = 0; p < len; ++p) {
            const std::vector<double> xp(x.begin() + (base + p) * H, x.begin() + (base + p + 1) * H);
            direct_qkv(b, wq, wk, wv, xp.data(), p, qs[size_t(p)], ks[size_t(p)], vs[size_t(p)]);
        }
        for (int64_t p = 0; p < len; ++p) {
            std::vector<double> att(size_t(Q), 0.0);
            for (int64_t h = 0; h < b.num_heads; ++h) {
                const int64_t kvh = h / (b.num_heads / b.num_kv_heads);
                const int64_t j0 = b.window > 0 ? std::max<int64_t>(0, p - b.window + 1) : 0;
                std::vector<double> sc;
                for (int64_t j = j0; j <= p; ++j) {
                    double dotv = 0;
                    for (int64_t d = 0; d < D; ++d)
                        dotv += qs[size_t(p)][size_t(h * D + d)] * ks[size_t(j)][size_t(kvh * D + d)];
                    sc.push_back(dotv / std::sqrt(double(D)));
                }
                const double mx = *std::max_element(sc.begin(), sc.end());
                double den = 0;
                for (double& s : sc) den += (s = std::exp(s - mx));
                for (int64_t j = j0; j <= p; ++j)
                    for (int64_t d = 0; d < D; ++d)
                        att[size_t(h * D + d)] += sc[size_t(j - j0)] / den * vs[size_t(j)][size_t(kvh * D + d)];
            }
            out.insert(out.end(), att.begin(), att.end());
        }
        base += len;
    }
    (void)KV;
    return out;
}

double direct_attn_error(const AwqAttnBlock& b, const std::vector<float>& x, const std::vector<int64_t>& lens,
                         const std::vector<float>& s, const AwqOptions& o) {
    const int64_t H = b.hidden, Q = b.num_heads * b.head_dim, KV = b.num_kv_heads * b.head_dim;
    const std::vector<float> q(b.q.begin(), b.q.end()), k(b.k.begin(), b.k.end()), v(b.v.begin(), b.v.end());
    const std::vector<double> ref =
        direct_attention(b, {q.begin(), q.end()}, {k.begin(), k.end()}, {v.begin(), v.end()}, x, lens);
    const std::vector<double> got =
        direct_attention(b, fake_quant(q, Q, H, s, b.quantize_q, o), fake_quant(k, KV, H, s, b.quantize_k, o),
                         fake_quant(v, KV, H, s, b.quantize_v, o), x, lens);
    const std::vector<double> wo(b.o.begin(), b.o.end());
    const int64_t T = int64_t(ref.size()) / Q, m = std::min(T, o.max_samples);
    double sum = 0;
    for (int64_t i = 0; i < m; ++i) {
        const int64_t t = i * T / m;  // the evenly strided query rows
        std::vector<double> d(static_cast<size_t>(Q));
        for (int64_t c = 0; c < Q; ++c) d[size_t(c)] = ref[size_t(t * Q + c)] - got[size_t(t * Q + c)];
        for (double y : matvec(wo, H, Q, d.data())) sum += y * y;
    }
    return sum / (double(m) * double(H));
}

AwqOptions opts(int64_t group, Int4Mode mode, int64_t max_samples = 512) {
    AwqOptions o;
    o.group_size = group;
    o.mode = mode;
    o.max_samples = max_samples;
    return o;
}

// Nonzero, within a relative 1e-4 of the double-precision value.
void expect_close(double got, double want, const char* what) {
    EXPECT_GT(want, 0) << what;
    EXPECT_NEAR(got, want, 1e-4 * want) << what << ": got " << got << ", direct " << want;
}

TEST(AwqBlock, MlpErrorMatchesDirectRecomputation) {
    const int64_t H = 45, F = 24, n = 37;  // short last group (45 = 32 + 13), 16 of 37 rows strided
    const Mlp mlp = random_mlp(H, F, 11);
    const std::vector<float> x = gaussian(n * H, 12), s = uniform(H, 13, 0.5f, 2.0f);
    for (Int4Mode mode : {Int4Mode::kAsymmetric, Int4Mode::kSymmetric}) {
        for (bool quantize_gate : {true, false}) {
            const AwqOptions o = opts(32, mode, 16);
            const AwqMlpBlock b = mlp.block(quantize_gate, true);
            auto e = awq_mlp_error(b, x, n, s, o);
            ASSERT_TRUE(e.is_ok()) << e.status().to_string();
            expect_close(*e, direct_mlp_error(b, x, n, s, o), "mlp");
        }
    }
}

TEST(AwqBlock, AttnErrorMatchesDirectRecomputation) {
    const std::vector<int64_t> lens = {5, 9, 1};  // three sequences, positions 0.. each
    const int64_t H = 40, T = 15;
    const std::vector<float> x = gaussian(T * H, 21);
    const std::vector<float> s = uniform(H, 22, 0.5f, 2.0f);
    struct Case {
        int64_t heads, kv_heads;
        bool bias, qk_norm;
        int64_t window;
    };
    for (const Case c : {Case{4, 2, false, false, 0}, Case{4, 4, true, false, 0}, Case{6, 2, true, true, 3}}) {
        const Attn a = random_attn(H, c.heads, c.kv_heads, 8, 23, c.bias, c.qk_norm, c.window);
        AwqAttnBlock b = bind(a);
        for (Int4Mode mode : {Int4Mode::kAsymmetric, Int4Mode::kSymmetric}) {
            // 7 of the 15 rows as queries (all rows for keys and values); a skipped (fp32) member.
            const AwqOptions o = opts(32, mode, mode == Int4Mode::kAsymmetric ? 512 : 7);
            b.quantize_k = mode == Int4Mode::kAsymmetric;
            auto e = awq_attn_error(b, x, lens, s, o);
            ASSERT_TRUE(e.is_ok()) << e.status().to_string();
            expect_close(*e, direct_attn_error(b, x, lens, s, o), "attention");
        }
    }
}

// Every group of every row holds k * step with integer k in [-7, 7] and some |k| = 7: symmetric INT4
// represents it exactly (scale = 7 step / 7), so with s = 1 nothing changes.
std::vector<float> on_grid(int64_t rows, int64_t in, int64_t group, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> k(-7, 7);
    std::vector<float> w(size_t(rows * in));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < in; ++j) w[size_t(r * in + j)] = 0.125f * float(k(rng));
        for (int64_t g = 0; g < in; g += group) w[size_t(r * in + g)] = -0.875f;
    }
    return w;
}

TEST(AwqBlock, ZeroQuantizationErrorGivesZero) {
    const int64_t H = 64, F = 40, n = 20;
    const AwqOptions o = opts(32, Int4Mode::kSymmetric);
    const std::vector<float> ones(size_t(H), 1.0f), x = gaussian(n * H, 31);
    Mlp mlp{H, F, on_grid(F, H, 32, 32), on_grid(F, H, 32, 33), gaussian(H * F, 34)};
    auto e = awq_mlp_error(mlp.block(), x, n, ones, o);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    EXPECT_EQ(*e, 0.0);

    Attn a = random_attn(H, 4, 2, 8, 35, true, true, 0);
    a.q = on_grid(32, H, 32, 36);
    a.k = on_grid(16, H, 32, 37);
    a.v = on_grid(16, H, 32, 38);
    const std::vector<int64_t> lens = {7, 13};
    auto ea = awq_attn_error(bind(a), x, lens, ones, o);
    ASSERT_TRUE(ea.is_ok()) << ea.status().to_string();
    EXPECT_EQ(*ea, 0.0);
    // The same weights off the grid (a half step added) do have an error.
    for (float& v : a.v) v += 0.0625f;
    ea = awq_attn_error(bind(a), x, lens, ones, o);
    ASSERT_TRUE(ea.is_ok());
    EXPECT_GT(*ea, 0.0);
}

// [n, in] Gaussian activations whose listed channels are 30x larger (AWQ's salient channels).
std::vector<float> outliers(int64_t n, int64_t in, uint32_t seed) {
    std::vector<float> x = gaussian(n * in, seed);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c : {3, 17, 40}) x[size_t(i * in + c)] *= 30.0f;
    return x;
}

TEST(AwqBlock, MlpSearchBeatsRtnAndIsThreadCountInvariant) {
    const int64_t H = 64, F = 48, n = 300;
    const Mlp mlp = random_mlp(H, F, 41);
    const std::vector<float> x = outliers(n, H, 42);
    const AwqOptions o = opts(32, Int4Mode::kAsymmetric, 100);
    auto r = awq_search_mlp(mlp.block(), x, n, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->num_samples, 100);
    EXPECT_TRUE(r->scaled);
    EXPECT_LT(r->awq_error, 0.8 * r->rtn_error) << "alpha " << r->best_alpha;
    auto rtn = awq_mlp_error(mlp.block(), x, n, std::vector<float>(size_t(H), 1.0f), o);
    auto best = awq_mlp_error(mlp.block(), x, n, r->scales, o);
    ASSERT_TRUE(rtn.is_ok() && best.is_ok());
    EXPECT_EQ(*rtn, r->rtn_error);
    EXPECT_EQ(*best, r->awq_error);
    core::ThreadPool pool(3);
    auto rp = awq_search_mlp(mlp.block(), x, n, o, &pool);
    ASSERT_TRUE(rp.is_ok());
    EXPECT_EQ(rp->scales, r->scales);
    EXPECT_EQ(rp->rtn_error, r->rtn_error);
    EXPECT_EQ(rp->awq_error, r->awq_error);
    EXPECT_EQ(rp->best_alpha, r->best_alpha);
}

TEST(AwqBlock, AttnSearchBeatsRtnAndIsThreadCountInvariant) {
    const int64_t H = 64;
    const std::vector<int64_t> lens = {40, 25, 31};
    const std::vector<float> x = outliers(96, H, 51);
    const Attn a = random_attn(H, 4, 2, 16, 52, true, false, 0);
    const AwqAttnBlock b = bind(a);
    const std::vector<float> x_mean = quant::channel_mean_abs(x, 96, H);
    for (bool duo : {false, true}) {
        AwqOptions o = opts(64, Int4Mode::kAsymmetric);
        o.duo_scaling = duo;
        auto r = awq_search_attn(b, x, lens, x_mean, o);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        EXPECT_EQ(r->num_samples, 96);  // every row a query (max_samples 512)
        EXPECT_LE(r->awq_error, r->rtn_error);
        if (!duo) {
            EXPECT_LT(r->awq_error, 0.8 * r->rtn_error) << "alpha " << r->best_alpha;
        }
        auto rtn = awq_attn_error(b, x, lens, std::vector<float>(size_t(H), 1.0f), o);
        auto best = awq_attn_error(b, x, lens, r->scales, o);
        ASSERT_TRUE(rtn.is_ok() && best.is_ok());
        EXPECT_EQ(*rtn, r->rtn_error);
        EXPECT_EQ(*best, r->awq_error);
        core::ThreadPool pool(3);
        auto rp = awq_search_attn(b, x, lens, x_mean, o, &pool);
        ASSERT_TRUE(rp.is_ok());
        EXPECT_EQ(rp->scales, r->scales);
        EXPECT_EQ(rp->rtn_error, r->rtn_error);
        EXPECT_EQ(rp->awq_error, r->awq_error);
    }
}

TEST(AwqBlock, RejectsBadArguments) {
    const int64_t H = 40;
    const Mlp mlp = random_mlp(H, 16, 61);
    std::vector<float> x = gaussian(10 * H, 62);
    const std::vector<float> ones(size_t(H), 1.0f);
    const AwqOptions o = opts(32, Int4Mode::kAsymmetric);
    auto bad = [](const auto& r) { return !r.is_ok() && r.status().code() == core::StatusCode::kInvalidArgument; };
    EXPECT_TRUE(bad(awq_mlp_error(mlp.block(), std::span<const float>(x).first(9 * H), 10, ones, o)));
    EXPECT_TRUE(bad(awq_mlp_error(mlp.block(), x, 10, std::vector<float>(size_t(H - 1), 1.0f), o)));
    EXPECT_TRUE(bad(awq_mlp_error(mlp.block(), x, 10, std::vector<float>(size_t(H), -1.0f), o)));
    EXPECT_TRUE(bad(awq_search_mlp(mlp.block(), x, 10, opts(48, Int4Mode::kAsymmetric))));
    AwqMlpBlock short_down = mlp.block();
    short_down.down = short_down.down.first(10);
    EXPECT_TRUE(bad(awq_search_mlp(short_down, x, 10, o)));

    const Attn a = random_attn(H, 4, 2, 8, 63, false, false, 0);
    const std::vector<int64_t> lens = {4, 6};
    EXPECT_TRUE(awq_attn_error(bind(a), x, lens, ones, o).is_ok());
    EXPECT_TRUE(bad(awq_attn_error(bind(a), x, std::vector<int64_t>{4, 5}, ones, o)));  // 9 rows for 10
    EXPECT_TRUE(bad(awq_attn_error(bind(a), x, std::vector<int64_t>{10, 0}, ones, o)));
    EXPECT_TRUE(bad(awq_attn_error(bind(a), x, std::vector<int64_t>{}, ones, o)));
    AwqAttnBlock b = bind(a);
    b.num_heads = 3;  // not a multiple of num_kv_heads (and q has the wrong size)
    EXPECT_TRUE(bad(awq_attn_error(b, x, lens, ones, o)));
    b = bind(a);
    b.inv_freq.pop_back();
    EXPECT_TRUE(bad(awq_attn_error(b, x, lens, ones, o)));
    EXPECT_TRUE(bad(awq_search_attn(bind(a), x, lens, std::vector<float>(size_t(H - 1), 1.0f), o)));
    x[5] = std::nanf("");
    EXPECT_TRUE(bad(awq_attn_error(bind(a), x, lens, ones, o)));
    EXPECT_TRUE(bad(awq_search_mlp(mlp.block(), x, 10, o)));
}

// The whole sequences collect_activations keeps: chunk prefixes from position 0, at an even stride
// over the chunks, within max_seq_tokens; where a strided sample row falls inside a kept sequence, the
// two copies are the same activations.
TEST(AwqBlock, CalibrationKeepsWholeSequences) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto src = loader::load_checkpoint(path);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto ck = loader::to_f32_checkpoint(*src);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    std::vector<int32_t> tokens(300);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(1 + (i * 37) % 500);
    CalibrationOptions co;
    co.chunk_tokens = 64;     // 5 chunks: 64, 64, 64, 64, 44 tokens
    co.max_samples = 60;      // stride 5
    co.max_seq_tokens = 150;  // 2 sequences of 64: chunks 0 and 2
    core::ThreadPool pool(2);
    auto acts = collect_activations(*ck, tokens, &pool, co);
    ASSERT_TRUE(acts.is_ok()) << acts.status().to_string();
    const size_t k = size_t(LinearInput::kQkv);
    for (const LayerActivations& a : *acts) {
        ASSERT_EQ(a.seq_lens, (std::vector<int64_t>{64, 64}));
        const int64_t H = a.cols[k];
        ASSERT_EQ(int64_t(a.qkv_seq.size()), 128 * H);
        ASSERT_EQ(a.rows[k], 60);
        // Sample i is token 5 i; tokens 0..63 are sequence 0, tokens 128..191 sequence 1.
        int compared = 0;
        for (int64_t i = 0; i < a.rows[k]; ++i) {
            const int64_t t = 5 * i;
            int64_t row = -1;
            if (t < 64) row = t;
            if (t >= 128 && t < 192) row = 64 + t - 128;
            if (row < 0) continue;
            ++compared;
            EXPECT_TRUE(std::equal(a.x[k].begin() + i * H, a.x[k].begin() + (i + 1) * H, a.qkv_seq.begin() + row * H))
                << "sample " << i;
        }
        EXPECT_EQ(compared, 26);
    }
    co.max_seq_tokens = 0;
    acts = collect_activations(*ck, tokens, &pool, co);
    ASSERT_TRUE(acts.is_ok());
    EXPECT_TRUE((*acts)[0].seq_lens.empty() && (*acts)[0].qkv_seq.empty());
}

std::span<const float> f32_tensor(const Checkpoint& ck, const std::string& name) {
    const TensorRef* t = ck.find(name);
    if (t == nullptr || t->dtype != core::DType::kF32) return {};
    return {reinterpret_cast<const float*>(t->data), size_t(t->num_elements())};
}

// The attention block as awq_block computes it (RoPE order and frequencies, GQA, positions from 0 in
// each kept sequence) reproduces the model's own o_proj input (kAttnOut) for the same tokens.
void expect_attention_matches_model(const std::string& path) {
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto src = loader::load_checkpoint(path);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto ck = loader::to_f32_checkpoint(*src);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    const ModelConfig& c = ck->config;
    std::vector<int32_t> tokens(200);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(1 + (i * 37) % 500);
    CalibrationOptions co;
    co.chunk_tokens = 64;     // chunks at tokens 0, 64, 128, 192
    co.max_samples = 40;      // every 5th token
    co.max_seq_tokens = 128;  // sequences: chunks 0 and 2
    core::ThreadPool pool(2);
    auto acts = collect_activations(*ck, tokens, &pool, co);
    ASSERT_TRUE(acts.is_ok()) << acts.status().to_string();
    auto inv_freq = awq_rope_inv_freq(c);
    ASSERT_TRUE(inv_freq.is_ok());
    for (int64_t l = 0; l < c.num_layers; l += std::max<int64_t>(1, c.num_layers / 3)) {
        const std::string p = "blk." + std::to_string(l) + ".";
        AwqAttnBlock b;
        b.q = f32_tensor(*ck, p + "attn_q.weight");
        b.k = f32_tensor(*ck, p + "attn_k.weight");
        b.v = f32_tensor(*ck, p + "attn_v.weight");
        b.o = f32_tensor(*ck, p + "attn_output.weight");
        b.hidden = c.hidden_size, b.num_heads = c.num_heads, b.num_kv_heads = c.num_kv_heads;
        b.head_dim = c.head_dim, b.window = c.window_for_layer(l), b.inv_freq = *inv_freq;
        const LayerActivations& a = (*acts)[size_t(l)];
        ASSERT_EQ(a.seq_lens, (std::vector<int64_t>{64, 64}));
        auto att = awq_attn_output(b, a.qkv_seq, a.seq_lens, &pool);
        ASSERT_TRUE(att.is_ok()) << att.status().to_string();
        const size_t k = size_t(LinearInput::kAttnOut);
        const int64_t Q = c.q_dim();
        ASSERT_EQ(a.cols[k], Q);
        int compared = 0;
        for (int64_t i = 0; i < a.rows[k]; ++i) {
            const int64_t t = 5 * i;
            const int64_t row = t < 64 ? t : (t >= 128 && t < 192 ? t - 64 : -1);
            if (row < 0) continue;
            ++compared;
            double amax = 0, dmax = 0;
            for (int64_t j = 0; j < Q; ++j) {
                const double want = a.x[k][size_t(i * Q + j)], got = (*att)[size_t(row * Q + j)];
                amax = std::max(amax, std::fabs(want));
                dmax = std::max(dmax, std::fabs(got - want));
            }
            EXPECT_LE(dmax, 1e-4 * amax + 1e-6) << "layer " << l << " token " << t << " max |ref| " << amax;
        }
        EXPECT_EQ(compared, 26);
    }
}

TEST(AwqBlock, AttnOutputMatchesModelStories260K) {
    expect_attention_matches_model(test::testdata("models/stories260K/stories260K.bin"));
}

TEST(AwqBlock, AttnOutputMatchesModelSmolLM2) {
    expect_attention_matches_model(test::smollm2_path());
}

}  // namespace
}  // namespace kiln::quant_tools
