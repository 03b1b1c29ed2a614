// Llama-family forward pass (see llama.h). Shapes: T = tokens in the batch, H = hidden size,
// Q = num_heads * head_dim, KV = num_kv_heads * head_dim, F = intermediate size, V = vocab.
#include "model/llama.h"

#include <algorithm>
#include <cstring>

#include "core/bytes.h"
#include "core/check.h"
#include "kernels/ref/dequant.h"
#include "ops/transformer_ops.h"

namespace kiln::model {
namespace {

using core::Status;
using core::StatusCode;
using kernels::ref::WeightView;

core::Result<WeightView> matrix(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols) {
    const TensorRef* t = ck.find(name);
    if (!t) return core::error(StatusCode::kCorrupt) << ck.path << ": missing tensor '" << name << "'";
    // Shapes are row-major [rows, cols] (GGUF's ne order already reversed by the reader).
    if (t->shape.size() != 2 || t->shape[0] != uint64_t(rows) || t->shape[1] != uint64_t(cols))
        return core::error(StatusCode::kCorrupt)
               << ck.path << ": tensor '" << name << "' has shape " << core::shape_string(t->shape) << ", expected ["
               << rows << ", " << cols << "]";
    auto bytes = core::dtype_bytes(t->dtype, uint64_t(rows) * uint64_t(cols));
    if (!kernels::ref::dequant_supported(t->dtype) || !bytes || *bytes != t->num_bytes ||
        !core::dtype_bytes(t->dtype, uint64_t(cols)))
        return core::error(StatusCode::kUnsupported) << ck.path << ": tensor '" << name << "' of type "
                                                     << core::dtype_name(t->dtype) << " cannot be used as a matrix";
    return kernels::ref::make_weight_view(t->data, t->dtype, rows, cols);
}

// A small f32/f16/bf16 vector copied to fp32.
core::Result<std::vector<float>> vec(const Checkpoint& ck, const std::string& name, int64_t n) {
    const TensorRef* t = ck.find(name);
    if (!t) return core::error(StatusCode::kCorrupt) << ck.path << ": missing tensor '" << name << "'";
    if (t->num_elements() != uint64_t(n) || core::dtype_bytes(t->dtype, uint64_t(n)) != t->num_bytes)
        return core::error(StatusCode::kCorrupt) << ck.path << ": tensor '" << name << "' has shape "
                                                 << core::shape_string(t->shape) << ", expected [" << n << "]";
    std::vector<float> out(static_cast<size_t>(n));
    KILN_RETURN_IF_ERROR(kernels::ref::dequantize_row(t->dtype, t->data, out.data(), n));
    return out;
}

core::Result<kernels::ref::RopeParams> rope_params(const ModelConfig& c, const std::string& path) {
    kernels::ref::RopeParams p;
    p.theta = c.rope_theta;
    const auto& rs = c.rope_scaling;
    if (rs.type.empty()) return p;
    p.factor = rs.factor;
    if (rs.type == "linear") {
        p.scaling = kernels::ref::RopeScalingKind::kLinear;
    } else if (rs.type == "llama3") {
        p.scaling = kernels::ref::RopeScalingKind::kLlama3;
        p.low_freq_factor = rs.low_freq_factor;
        p.high_freq_factor = rs.high_freq_factor;
        p.original_max_position_embeddings = rs.original_max_position_embeddings;
    } else {
        return core::error(StatusCode::kUnsupported)
               << path << ": RoPE scaling '" << rs.type << "' is not supported yet (supported: none, linear, llama3)";
    }
    return p;
}

}  // namespace

KvCache::KvCache(const ModelConfig& config, int64_t max_len)
    : num_layers_(config.num_layers),
      kv_dim_(config.kv_dim()),
      max_len_(max_len),
      k_(size_t(config.num_layers)),
      v_(size_t(config.num_layers)) {}

const std::vector<std::string>& LlamaModel::supported_architectures() {
    static const std::vector<std::string> kArchs = {"llama", "mistral", "qwen2", "qwen3"};
    return kArchs;
}

static core::Result<ops::Linear> linear(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols,
                                        const ops::LinearOptions& lo) {
    KILN_ASSIGN_OR_RETURN(WeightView w, matrix(ck, name, rows, cols));
    return ops::make_linear(w, lo);
}

core::Result<std::unique_ptr<LlamaModel>> LlamaModel::create(const Checkpoint& ck, core::ThreadPool* pool,
                                                             const ops::LinearOptions& lo) {
    KILN_CHECK(pool != nullptr) << "LlamaModel needs a thread pool";
    const ModelConfig& c = ck.config;
    const auto& archs = supported_architectures();
    if (std::find(archs.begin(), archs.end(), c.arch) == archs.end()) {
        std::string list;
        for (const std::string& a : archs) list += (list.empty() ? "" : ", ") + a;
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": architecture '" << c.arch << "' is not supported (supported: " << list
               << "; SmolLM runs as llama)";
    }
    KILN_RETURN_IF_ERROR(c.validate());
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(ck));
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->config_ = c;
    m->pool_ = pool;
    KILN_ASSIGN_OR_RETURN(auto rope, rope_params(c, ck.path));
    m->inv_freq_ = kernels::ref::rope_inv_freqs(c.head_dim, rope);
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size, V = c.vocab_size;
    KILN_ASSIGN_OR_RETURN(m->embed_, matrix(ck, "token_embd.weight", V, H));
    if (c.tie_word_embeddings) {
        KILN_ASSIGN_OR_RETURN(m->output_, ops::make_linear(m->embed_, lo));
    } else {
        KILN_ASSIGN_OR_RETURN(auto out, matrix(ck, "output.weight", V, H));
        KILN_ASSIGN_OR_RETURN(m->output_, ops::make_linear(out, lo));
    }
    KILN_ASSIGN_OR_RETURN(m->output_norm_, vec(ck, "output_norm.weight", H));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        Layer L;
        KILN_ASSIGN_OR_RETURN(L.wq, linear(ck, p + "attn_q.weight", Q, H, lo));
        KILN_ASSIGN_OR_RETURN(L.wk, linear(ck, p + "attn_k.weight", KV, H, lo));
        KILN_ASSIGN_OR_RETURN(L.wv, linear(ck, p + "attn_v.weight", KV, H, lo));
        KILN_ASSIGN_OR_RETURN(L.wo, linear(ck, p + "attn_output.weight", H, Q, lo));
        KILN_ASSIGN_OR_RETURN(L.w_gate, linear(ck, p + "ffn_gate.weight", F, H, lo));
        KILN_ASSIGN_OR_RETURN(L.w_up, linear(ck, p + "ffn_up.weight", F, H, lo));
        KILN_ASSIGN_OR_RETURN(L.w_down, linear(ck, p + "ffn_down.weight", H, F, lo));
        KILN_ASSIGN_OR_RETURN(L.attn_norm, vec(ck, p + "attn_norm.weight", H));
        KILN_ASSIGN_OR_RETURN(L.ffn_norm, vec(ck, p + "ffn_norm.weight", H));
        if (c.attention_bias) {
            KILN_ASSIGN_OR_RETURN(L.bq, vec(ck, p + "attn_q.bias", Q));
            KILN_ASSIGN_OR_RETURN(L.bk, vec(ck, p + "attn_k.bias", KV));
            KILN_ASSIGN_OR_RETURN(L.bv, vec(ck, p + "attn_v.bias", KV));
        }
        if (c.has_output_bias()) {
            KILN_ASSIGN_OR_RETURN(L.bo, vec(ck, p + "attn_output.bias", H));
        }
        if (c.qk_norm) {
            KILN_ASSIGN_OR_RETURN(L.q_norm, vec(ck, p + "attn_q_norm.weight", c.head_dim));
            KILN_ASSIGN_OR_RETURN(L.k_norm, vec(ck, p + "attn_k_norm.weight", c.head_dim));
        }
        m->layers_.push_back(std::move(L));
    }
    return m;
}

static const float* opt(const std::vector<float>& v) {
    return v.empty() ? nullptr : v.data();
}

Status LlamaModel::layer_forward(int64_t layer_idx, int64_t T, const std::vector<int32_t>& positions, KvCache& cache,
                                 std::vector<float>& x) {
    const ModelConfig& c = config_;
    const Layer& L = layers_[size_t(layer_idx)];
    core::ThreadPool& pool = *pool_;
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size, D = c.head_dim;
    const float eps = float(c.rms_norm_eps);
    Workspace& w = work_;
    KILN_RETURN_IF_ERROR(ops::rmsnorm(pool, x.data(), L.attn_norm.data(), w.xn.data(), T, H, eps));
    // Q, K and V in one job: qkv [T, Q + 2 KV], then q to its own buffer, k and v to the cache rows
    // of their positions.
    const ops::LinearPart qkv_parts[] = {{&L.wq, opt(L.bq)}, {&L.wk, opt(L.bk)}, {&L.wv, opt(L.bv)}};
    KILN_RETURN_IF_ERROR(ops::linear_group(pool, w.xn.data(), T, qkv_parts, w.qkv.data(), scratch_));
    const int64_t start = cache.len_;
    std::vector<float>& kc = cache.k_[size_t(layer_idx)];  // [capacity, KV]
    std::vector<float>& vc = cache.v_[size_t(layer_idx)];  // [capacity, KV]
    float* k_new = kc.data() + start * KV;                 // [T, num_kv_heads, head_dim]
    float* v_new = vc.data() + start * KV;                 // [T, num_kv_heads, head_dim]
    float* q = w.q.data();                                 // [T, num_heads, head_dim]
    for (int64_t t = 0; t < T; ++t) {
        const float* row = w.qkv.data() + t * (Q + 2 * KV);
        std::copy_n(row, Q, q + t * Q);
        std::copy_n(row + Q, KV, k_new + t * KV);
        std::copy_n(row + Q + KV, KV, v_new + t * KV);
    }
    if (c.qk_norm) {
        KILN_RETURN_IF_ERROR(ops::rmsnorm(pool, q, L.q_norm.data(), q, T * c.num_heads, D, eps));
        KILN_RETURN_IF_ERROR(ops::rmsnorm(pool, k_new, L.k_norm.data(), k_new, T * c.num_kv_heads, D, eps));
    }
    KILN_RETURN_IF_ERROR(ops::rope(pool, q, T, c.num_heads, D, positions.data(), inv_freq_));
    KILN_RETURN_IF_ERROR(ops::rope(pool, k_new, T, c.num_kv_heads, D, positions.data(), inv_freq_));
    ops::KvSpan kv{kc.data(), vc.data(), start + T};
    ops::AttentionShape shape{T, c.num_heads, c.num_kv_heads, D, c.window_for_layer(layer_idx)};
    KILN_RETURN_IF_ERROR(ops::attention(pool, q, kv, shape, w.att.data()));
    KILN_RETURN_IF_ERROR(ops::linear(pool, w.att.data(), T, L.wo, opt(L.bo), w.o.data(), scratch_));
    for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += w.o[size_t(i)];

    KILN_RETURN_IF_ERROR(ops::rmsnorm(pool, x.data(), L.ffn_norm.data(), w.xn.data(), T, H, eps));
    // gate and up in one job: gate_up [T, 2F]; then silu(gate) * up into the first F columns.
    const ops::LinearPart gate_up_parts[] = {{&L.w_gate, nullptr}, {&L.w_up, nullptr}};
    KILN_RETURN_IF_ERROR(ops::linear_group(pool, w.xn.data(), T, gate_up_parts, w.gate_up.data(), scratch_));
    KILN_RETURN_IF_ERROR(ops::silu_mul_rows(pool, w.gate_up.data(), w.act.data(), T, F));
    KILN_RETURN_IF_ERROR(ops::linear(pool, w.act.data(), T, L.w_down, nullptr, w.o.data(), scratch_));
    for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += w.o[size_t(i)];
    return Status::ok();
}

void LlamaModel::Workspace::reserve(const ModelConfig& c, int64_t T) {
    auto grow = [](std::vector<float>& v, int64_t n) {
        if (int64_t(v.size()) < n) v.resize(size_t(n));
    };
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
    grow(xn, T * H);
    grow(qkv, T * (Q + 2 * KV));
    grow(q, T * Q);
    grow(att, T * Q);
    grow(o, T * H);
    grow(gate_up, T * 2 * F);
    grow(act, T * F);
}

core::Result<std::vector<float>> LlamaModel::forward(const std::vector<int32_t>& tokens, KvCache& cache,
                                                     bool all_logits) {
    const ModelConfig& c = config_;
    const int64_t T = int64_t(tokens.size()), H = c.hidden_size, V = c.vocab_size;
    if (T == 0) return core::error(StatusCode::kInvalidArgument) << "forward: no tokens";
    if (cache.num_layers_ != c.num_layers || cache.kv_dim_ != c.kv_dim())
        return core::error(StatusCode::kInvalidArgument) << "forward: KV cache made for another model";
    const int64_t start = cache.len_;
    if (start + T > cache.max_len_)
        return core::error(StatusCode::kInvalidArgument)
               << "forward: " << start << " cached + " << T << " new tokens exceed the context of " << cache.max_len_;
    for (int32_t t : tokens)
        if (t < 0 || t >= V)
            return core::error(StatusCode::kInvalidArgument)
                   << "forward: token id " << t << " outside [0, " << V << ")";
    const size_t need = size_t((start + T) * c.kv_dim());
    for (int64_t l = 0; l < c.num_layers; ++l) {
        auto& k = cache.k_[size_t(l)];
        auto& v = cache.v_[size_t(l)];
        if (k.size() < need) {
            const size_t grown = std::min(std::max(need, 2 * k.size()), size_t(cache.max_len_ * c.kv_dim()));
            k.resize(grown);
            v.resize(grown);
        }
    }
    std::vector<int32_t> positions(static_cast<size_t>(T));  // [T]
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(start + t);

    std::vector<float> x(static_cast<size_t>(T * H));  // [T, H]: the residual stream
    pool_->parallel_for(T, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) kernels::ref::weight_row(embed_, tokens[size_t(t)], x.data() + t * H);
    });
    work_.reserve(c, T);
    for (int64_t l = 0; l < c.num_layers; ++l) KILN_RETURN_IF_ERROR(layer_forward(l, T, positions, cache, x));
    cache.len_ = start + T;

    const int64_t rows = all_logits ? T : 1;
    const float* last = x.data() + (T - rows) * H;  // [rows, H]
    std::vector<float> xn(static_cast<size_t>(rows * H));
    KILN_RETURN_IF_ERROR(ops::rmsnorm(*pool_, last, output_norm_.data(), xn.data(), rows, H, float(c.rms_norm_eps)));
    std::vector<float> logits(static_cast<size_t>(rows * V));  // [rows, V]
    KILN_RETURN_IF_ERROR(ops::linear(*pool_, xn.data(), rows, output_, nullptr, logits.data(), scratch_));
    return logits;
}

}  // namespace kiln::model
