// Llama-family forward pass (see llama.h). Shapes: T = tokens in the batch, H = hidden size,
// Q = num_heads * head_dim, KV = num_kv_heads * head_dim, F = intermediate size, V = vocab.
#include "model/llama.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cstring>

#include "core/bytes.h"
#include "core/check.h"
#include "core/numeric.h"
#include "kernels/ref/dequant.h"
#include "loader/layer_tensors.h"
#include "ops/transformer_ops.h"

namespace kiln::model {

using loader::check_checkpoint_tensors;
using loader::matrix_dtype_supported;
using loader::LayerTensor;
using loader::weight_view_of;
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
    if (!matrix_dtype_supported(*t) || !bytes || *bytes != t->num_bytes || !core::dtype_bytes(t->dtype, uint64_t(cols)))
        return core::error(StatusCode::kUnsupported) << ck.path << ": tensor '" << name << "' of type "
                                                     << core::dtype_name(t->dtype) << " cannot be used as a matrix";
    return weight_view_of(*t);
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


}  // namespace

core::Result<kernels::ref::RopeParams> rope_params(const ModelConfig& c, const std::string& path) {
    kernels::ref::RopeParams p;
    p.theta = c.rope_theta;
    p.freq_factors.assign(c.rope_freq_factors.begin(), c.rope_freq_factors.end());
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

std::vector<std::string> LlamaModel::packed_only_matrices(const Checkpoint& ck, const ops::LinearOptions& lo) {
    std::vector<std::string> names;
    for (const loader::TensorSpec& t : loader::checkpoint_tensors(ck.config))  // output.weight (untied) first
        if (t.matrix && t.name != "token_embd.weight") names.push_back(t.name);
    std::erase_if(names, [&](const std::string& name) {
        const TensorRef* t = ck.find(name);
        if (!t || t->shape.size() != 2) return true;
        auto w = matrix(ck, name, int64_t(t->shape[0]), int64_t(t->shape[1]));
        if (!w) return true;
        auto plan = ops::plan_linear(*w, lo);
        return !plan || !plan->packed_kernel;
    });
    return names;
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
    m->isa_ = lo.isa;
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
        const auto p = [l](LayerTensor t) { return loader::layer_tensor_name(l, t); };
        Layer L;
        KILN_ASSIGN_OR_RETURN(const WeightView vq, matrix(ck, p(LayerTensor::kQ), Q, H));
        KILN_ASSIGN_OR_RETURN(const WeightView vk, matrix(ck, p(LayerTensor::kK), KV, H));
        KILN_ASSIGN_OR_RETURN(const WeightView vv, matrix(ck, p(LayerTensor::kV), KV, H));
        KILN_ASSIGN_OR_RETURN(const WeightView vg, matrix(ck, p(LayerTensor::kGate), F, H));
        KILN_ASSIGN_OR_RETURN(const WeightView vu, matrix(ck, p(LayerTensor::kUp), F, H));
        const WeightView qkv[] = {vq, vk, vv}, gate_up[] = {vg, vu};
        KILN_ASSIGN_OR_RETURN(std::optional<ops::Linear> fused_qkv, ops::fuse_linears(qkv, 0, lo));
        KILN_ASSIGN_OR_RETURN(std::optional<ops::Linear> fused_gu, ops::fuse_linears(gate_up, ops::kSwigluBlock, lo));
        if (fused_qkv) {
            L.wqkv = std::move(*fused_qkv);
        } else {
            KILN_ASSIGN_OR_RETURN(L.wq, ops::make_linear(vq, lo));
            KILN_ASSIGN_OR_RETURN(L.wk, ops::make_linear(vk, lo));
            KILN_ASSIGN_OR_RETURN(L.wv, ops::make_linear(vv, lo));
        }
        if (fused_gu) {
            L.w_gate_up = std::move(*fused_gu);
        } else {
            KILN_ASSIGN_OR_RETURN(L.w_gate, ops::make_linear(vg, lo));
            KILN_ASSIGN_OR_RETURN(L.w_up, ops::make_linear(vu, lo));
        }
        KILN_ASSIGN_OR_RETURN(L.wo, linear(ck, p(LayerTensor::kO), H, Q, lo));
        KILN_ASSIGN_OR_RETURN(L.w_down, linear(ck, p(LayerTensor::kDown), H, F, lo));
        KILN_ASSIGN_OR_RETURN(L.attn_norm, vec(ck, p(LayerTensor::kAttnNorm), H));
        KILN_ASSIGN_OR_RETURN(L.ffn_norm, vec(ck, p(LayerTensor::kFfnNorm), H));
        if (c.attention_bias) {
            KILN_ASSIGN_OR_RETURN(L.bq, vec(ck, p(LayerTensor::kQBias), Q));
            KILN_ASSIGN_OR_RETURN(L.bk, vec(ck, p(LayerTensor::kKBias), KV));
            KILN_ASSIGN_OR_RETURN(L.bv, vec(ck, p(LayerTensor::kVBias), KV));
            if (L.wqkv.packed) {
                L.bqkv = L.bq;
                L.bqkv.insert(L.bqkv.end(), L.bk.begin(), L.bk.end());
                L.bqkv.insert(L.bqkv.end(), L.bv.begin(), L.bv.end());
            }
        }
        if (c.has_output_bias()) {
            KILN_ASSIGN_OR_RETURN(L.bo, vec(ck, p(LayerTensor::kOBias), H));
        }
        if (c.qk_norm) {
            KILN_ASSIGN_OR_RETURN(L.q_norm, vec(ck, p(LayerTensor::kQNorm), c.head_dim));
            KILN_ASSIGN_OR_RETURN(L.k_norm, vec(ck, p(LayerTensor::kKNorm), c.head_dim));
        }
        m->layers_.push_back(std::move(L));
    }
    return m;
}

core::Result<std::unique_ptr<LlamaModel>> create_model(Checkpoint& ck, core::ThreadPool* pool,
                                                       const ops::LinearOptions& lo, WeightMemory memory) {
    const std::vector<std::string> packed_only = LlamaModel::packed_only_matrices(ck, lo);
    if (memory == WeightMemory::kAnonymous) KILN_RETURN_IF_ERROR(copy_to_anonymous(ck, packed_only));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, LlamaModel::create(ck, pool, lo));
    release_tensor_bytes(ck, packed_only);
#ifdef __GLIBC__
    malloc_trim(0);  // hand the freed conversion buffers back to the OS (glibc keeps them otherwise)
#endif
    return m;
}

// n floats rounded to IEEE half (round to nearest even).
static void store_f16(const float* x, uint16_t* h, int64_t n) {
    for (int64_t i = 0; i < n; ++i) h[i] = core::f32_to_fp16(x[i]);
}

static const float* opt(const std::vector<float>& v) {
    return v.empty() ? nullptr : v.data();
}

Status LlamaModel::layer_forward(int64_t layer_idx, int64_t T, const KvLayers& kv) {
    const ModelConfig& c = config_;
    const Layer& L = layers_[size_t(layer_idx)];
    core::ThreadPool& pool = *pool_;
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size, D = c.head_dim;
    const float eps = float(c.rms_norm_eps);
    Workspace& w = work_;
    float* x = w.x.data();  // [T, H]
    // The previous layer's FFN output (w.o) is added here, fused with this layer's norm.
    if (layer_idx == 0) {
        KILN_RETURN_IF_ERROR(ops::rmsnorm(pool, x, L.attn_norm.data(), w.xn.data(), T, H, eps));
    } else {
        KILN_RETURN_IF_ERROR(ops::add_rmsnorm(pool, x, w.o.data(), L.attn_norm.data(), w.xn.data(), T, H, eps));
    }
    // Q, K and V in one job: qkv [T, Q + 2 KV]. Then, per token in one pass: q to its own buffer,
    // k and v straight to their cache slots, with the q/k norms (Qwen3) and RoPE applied in place
    // there (RoPE fused with the KV-cache write).
    auto observe = [&](LinearInput which, const float* in, int64_t cols) {
        if (hook_) hook_(layer_idx, which, std::span<const float>(in, size_t(T * cols)), T, cols);
    };
    observe(LinearInput::kQkv, w.xn.data(), H);
    if (L.wqkv.packed) {
        KILN_RETURN_IF_ERROR(ops::linear(pool, w.xn.data(), T, L.wqkv, opt(L.bqkv), w.qkv.data(), scratch_));
    } else {
        const ops::LinearPart qkv_parts[] = {{&L.wq, opt(L.bq)}, {&L.wk, opt(L.bk)}, {&L.wv, opt(L.bv)}};
        KILN_RETURN_IF_ERROR(ops::linear_group(pool, w.xn.data(), T, qkv_parts, w.qkv.data(), scratch_));
    }
    float* q = w.q.data();                     // [T, num_heads, head_dim]
    void* const kc = kv.k[size_t(layer_idx)];  // [num_slots, num_kv_heads, head_dim]
    void* const vc = kv.v[size_t(layer_idx)];  // [num_slots, num_kv_heads, head_dim]
    pool.parallel_for(T, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float* row = w.qkv.data() + t * (Q + 2 * KV);  // [Q | KV | KV]
            float* qt = q + t * Q;
            const int64_t slot = w.slots[size_t(t)];
            // an f16 cache's key is normed and rotated in place in its qkv row, then rounded once
            float* kt = kv.f16 ? row + Q : static_cast<float*>(kc) + slot * KV;
            std::copy_n(row, Q, qt);
            if (!kv.f16) std::copy_n(row + Q, KV, kt);
            if (kv.f16) {
                store_f16(row + Q + KV, static_cast<uint16_t*>(vc) + slot * KV, KV);
            } else {
                std::copy_n(row + Q + KV, KV, static_cast<float*>(vc) + slot * KV);
            }
            if (c.qk_norm) {
                for (int64_t h = 0; h < c.num_heads; ++h)
                    kernels::ref::rmsnorm(qt + h * D, L.q_norm.data(), qt + h * D, D, eps);
                for (int64_t h = 0; h < c.num_kv_heads; ++h)
                    kernels::ref::rmsnorm(kt + h * D, L.k_norm.data(), kt + h * D, D, eps);
            }
            kernels::ref::rope(qt, 1, c.num_heads, D, &w.positions[size_t(t)], inv_freq_);
            kernels::ref::rope(kt, 1, c.num_kv_heads, D, &w.positions[size_t(t)], inv_freq_);
            if (kv.f16) store_f16(kt, static_cast<uint16_t*>(kc) + slot * KV, KV);
        }
    });
    for (ops::AttentionSeq& a : w.attn) {
        a.kv.k = kc;
        a.kv.v = vc;
    }
    const ops::AttentionHeads heads{c.num_heads, c.num_kv_heads, D, c.window_for_layer(layer_idx)};
    KILN_RETURN_IF_ERROR(ops::batch_attention(pool, q, T, w.attn, heads, w.att.data(), isa_));
    observe(LinearInput::kAttnOut, w.att.data(), Q);
    KILN_RETURN_IF_ERROR(ops::linear(pool, w.att.data(), T, L.wo, opt(L.bo), w.o.data(), scratch_));
    // x += o, xn = rmsnorm(x): the residual add fused with the FFN's norm.
    KILN_RETURN_IF_ERROR(ops::add_rmsnorm(pool, x, w.o.data(), L.ffn_norm.data(), w.xn.data(), T, H, eps));
    // gate and up in one job, silu(gate) * up in its epilogue: gate_up [T, 2F] -> act [T, F].
    observe(LinearInput::kGateUp, w.xn.data(), H);
    if (L.w_gate_up.packed) {  // gate_up holds 32-column blocks of gate and up in turn
        KILN_RETURN_IF_ERROR(
            ops::linear_swiglu_fused(pool, w.xn.data(), T, L.w_gate_up, w.gate_up.data(), w.act.data(), scratch_));
    } else {
        KILN_RETURN_IF_ERROR(
            ops::linear_swiglu(pool, w.xn.data(), T, L.w_gate, L.w_up, w.gate_up.data(), w.act.data(), scratch_));
    }
    // w.o = the FFN output, added to x by the next layer (or by forward_batch after the last).
    observe(LinearInput::kDown, w.act.data(), F);
    return ops::linear(pool, w.act.data(), T, L.w_down, nullptr, w.o.data(), scratch_);
}

void LlamaModel::Workspace::reserve(const ModelConfig& c, int64_t T) {
    auto grow = [](auto& v, int64_t n) {
        if (int64_t(v.size()) < n) v.resize(size_t(n));
    };
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
    grow(x, T * H);
    grow(xn, T * H);
    grow(qkv, T * (Q + 2 * KV));
    grow(q, T * Q);
    grow(att, T * Q);
    grow(o, T * H);
    grow(gate_up, T * 2 * F);
    grow(act, T * F);
    grow(positions, T);
    grow(slots, T);
}

Status LlamaModel::check_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                               const KvLayers& kv) const {
    if (int64_t(kv.k.size()) != config_.num_layers || int64_t(kv.v.size()) != config_.num_layers)
        return core::error(StatusCode::kInvalidArgument)
               << "forward: K/V storage has " << kv.k.size() << " layers, the model " << config_.num_layers;
    return check_forward_batch(config_, tokens, seqs, kv.block_size, kv.num_slots);
}

Status check_forward_batch(const ModelConfig& c, std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                           int64_t block_size, int64_t num_slots) {
    auto bad = [] { return core::error(StatusCode::kInvalidArgument); };
    if (tokens.empty())
        return bad() << "forward: "
                     << "no tokens";
    if (block_size < 0 || num_slots < 0)
        return bad() << "forward: "
                     << "negative block size or slot count";
    if (block_size == 0 && seqs.size() != 1)
        return bad() << "forward: "
                     << "a contiguous cache holds exactly one sequence";
    int64_t total = 0;
    for (const BatchSeq& s : seqs) {
        if (s.num_tokens <= 0 || s.start < 0)
            return bad() << "forward: "
                         << "a sequence with no new tokens or a negative start";
        if (s.num_logits < 0 || s.num_logits > s.num_tokens)
            return bad() << "forward: "
                         << "num_logits outside [0, num_tokens]";
        const int64_t len = s.start + s.num_tokens;
        if (block_size == 0) {
            if (len > num_slots)
                return bad() << "forward: " << s.start << " cached + " << s.num_tokens
                             << " new tokens exceed the context of " << num_slots;
        } else {
            const int64_t need = (len + block_size - 1) / block_size;
            if (int64_t(s.block_table.size()) < need)
                return bad() << "forward: "
                             << "block table of " << s.block_table.size() << " blocks for " << len << " tokens";
            const int64_t num_blocks = num_slots / block_size;
            for (int64_t b = 0; b < need; ++b)
                if (s.block_table[size_t(b)] < 0 || s.block_table[size_t(b)] >= num_blocks)
                    return bad() << "forward: "
                                 << "block id " << s.block_table[size_t(b)] << " outside [0, " << num_blocks << ")";
        }
        total += s.num_tokens;
    }
    if (total != int64_t(tokens.size()))
        return bad() << "forward: "
                     << "sequences hold " << total << " tokens, the batch " << tokens.size();
    for (int32_t t : tokens)
        if (t < 0 || t >= c.vocab_size)
            return bad() << "forward: "
                         << "token id " << t << " outside [0, " << c.vocab_size << ")";
    return Status::ok();
}

Status LlamaModel::forward_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, const KvLayers& kv,
                                 std::vector<float>& logits) {
    KILN_RETURN_IF_ERROR(check_batch(tokens, seqs, kv));
    const ModelConfig& c = config_;
    const int64_t T = int64_t(tokens.size()), H = c.hidden_size, V = c.vocab_size;
    Workspace& w = work_;
    w.reserve(c, T);
    w.attn.resize(seqs.size());
    int64_t row = 0, num_logits = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const BatchSeq& s = seqs[i];
        for (int64_t t = 0; t < s.num_tokens; ++t) {
            const int64_t pos = s.start + t;
            w.positions[size_t(row + t)] = int32_t(pos);
            w.slots[size_t(row + t)] =
                kv.block_size == 0
                    ? pos
                    : int64_t(s.block_table[size_t(pos / kv.block_size)]) * kv.block_size + pos % kv.block_size;
        }
        ops::AttentionSeq& a = w.attn[i];
        a.kv.kv_len = s.start + s.num_tokens;
        a.kv.block_table = kv.block_size ? s.block_table.data() : nullptr;
        a.kv.block_size = kv.block_size;
        a.kv.f16 = kv.f16;
        a.q_start = row;
        a.num_tokens = s.num_tokens;
        row += s.num_tokens;
        num_logits += s.num_logits;
    }
    float* x = w.x.data();  // [T, H]: the residual stream
    pool_->parallel_for(T, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) kernels::ref::weight_row(embed_, tokens[size_t(t)], x + t * H);
    });
    const int64_t num_layers = last_layer_ >= 0 ? std::min(last_layer_ + 1, c.num_layers) : c.num_layers;
    for (int64_t l = 0; l < num_layers; ++l) KILN_RETURN_IF_ERROR(layer_forward(l, T, kv));
    if (last_layer_ >= 0) {  // calibration: the layers' inputs were all it wanted
        logits.clear();
        return Status::ok();
    }
    for (int64_t i = 0; i < T * H; ++i) x[i] += w.o[size_t(i)];  // the last layer's FFN output

    // The rows that want logits, gathered [num_logits, H], normed, projected.
    std::vector<float>& gathered = w.o;  // [T, H], free now; holds [num_logits, H]
    row = 0;
    int64_t out_row = 0;
    for (const BatchSeq& s : seqs) {
        for (int64_t t = s.num_tokens - s.num_logits; t < s.num_tokens; ++t, ++out_row)
            std::copy_n(x + (row + t) * H, H, gathered.data() + out_row * H);
        row += s.num_tokens;
    }
    if (num_logits == 0) {
        logits.clear();
        return Status::ok();
    }
    KILN_RETURN_IF_ERROR(
        ops::rmsnorm(*pool_, gathered.data(), output_norm_.data(), w.xn.data(), num_logits, H, float(c.rms_norm_eps)));
    logits.resize(size_t(num_logits * V));  // [num_logits, V]
    return ops::linear(*pool_, w.xn.data(), num_logits, output_, nullptr, logits.data(), scratch_);
}

core::Status LlamaModel::forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits,
                                 std::vector<float>& logits) {
    const ModelConfig& c = config_;
    const int64_t T = int64_t(tokens.size());
    if (T == 0) return core::error(StatusCode::kInvalidArgument) << "forward: no tokens";
    if (cache.num_layers_ != c.num_layers || cache.kv_dim_ != c.kv_dim())
        return core::error(StatusCode::kInvalidArgument) << "forward: KV cache made for another model";
    const int64_t start = cache.len_;
    if (start + T > cache.max_len_)
        return core::error(StatusCode::kInvalidArgument)
               << "forward: " << start << " cached + " << T << " new tokens exceed the context of " << cache.max_len_;
    const size_t need = size_t((start + T) * c.kv_dim());
    KvLayers& kv = cache.view_;
    if (cache.k_[0].size() < need || kv.k.empty() || kv.k[0] != cache.k_[0].data()) {  // grow, re-point (or a copy)
        kv.k.clear();
        kv.v.clear();
        for (int64_t l = 0; l < c.num_layers; ++l) {
            auto& k = cache.k_[size_t(l)];
            auto& v = cache.v_[size_t(l)];
            if (k.size() < need) {
                const size_t grown = std::min(std::max(need, 2 * k.size()), size_t(cache.max_len_ * c.kv_dim()));
                k.resize(grown);
                v.resize(grown);
            }
            kv.k.push_back(static_cast<void*>(k.data()));
            kv.v.push_back(static_cast<void*>(v.data()));
        }
        kv.num_slots = int64_t(cache.k_[0].size()) / c.kv_dim();
    }
    const BatchSeq seq{start, T, {}, all_logits ? T : 1};
    KILN_RETURN_IF_ERROR(forward_batch(tokens, std::span<const BatchSeq>(&seq, 1), kv, logits));
    cache.len_ = start + T;
    return Status::ok();
}

core::Result<std::vector<float>> LlamaModel::forward(const std::vector<int32_t>& tokens, KvCache& cache,
                                                     bool all_logits) {
    std::vector<float> logits;
    KILN_RETURN_IF_ERROR(forward(std::span<const int32_t>(tokens), cache, all_logits, logits));
    return logits;
}

}  // namespace kiln::model
