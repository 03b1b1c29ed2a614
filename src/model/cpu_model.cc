// The CPU runner of the transformer step (see cpu_model.h). Shapes: T = tokens in the batch, H = hidden size,
// Q = num_heads * head_dim, KV = num_kv_heads * head_dim, F = intermediate size, V = vocab.
#include "model/cpu_model.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cstring>

#include "core/bytes.h"
#include "core/check.h"
#include "core/huge_pages.h"
#include "core/mapped_file.h"
#include "core/numeric.h"
#include "kernels/ref/dequant.h"
#include "loader/layer_tensors.h"
#include "loader/tensor_parallel.h"
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

// A [n] vector (the shared expert's gate) as a [1, n] matrix.
core::Result<WeightView> row_matrix(const Checkpoint& ck, const std::string& name, int64_t n) {
    const TensorRef* t = ck.find(name);
    if (!t) return core::error(StatusCode::kCorrupt) << ck.path << ": missing tensor '" << name << "'";
    if (t->num_elements() != uint64_t(n) || core::dtype_bytes(t->dtype, uint64_t(n)) != t->num_bytes ||
        !matrix_dtype_supported(*t) || t->row_scale)
        return core::error(StatusCode::kCorrupt) << ck.path << ": tensor '" << name << "' (" << core::dtype_name(t->dtype)
                                                 << " " << core::shape_string(t->shape) << ") is not a [" << n << "] vector";
    TensorRef row = *t;
    row.shape = {1, uint64_t(n)};
    return weight_view_of(row);
}

const float* opt(const std::vector<float>& v) {
    return v.empty() ? nullptr : v.data();
}

}  // namespace

std::vector<double> longrope_inv_freq(const ModelConfig& c) {
    kernels::ref::RopeParams p;
    p.theta = c.rope_theta;
    for (double f : c.rope_scaling.long_factor) p.freq_factors.push_back(double(float(f)));
    return kernels::ref::rope_inv_freqs(c.head_dim, p);
}

core::Result<kernels::ref::RopeParams> rope_params(const ModelConfig& c, const std::string& path) {
    kernels::ref::RopeParams p;
    p.theta = c.rope_theta;
    p.freq_factors.assign(c.rope_freq_factors.begin(), c.rope_freq_factors.end());
    const auto& rs = c.rope_scaling;
    if (rs.type.empty()) return p;
    p.factor = rs.factor;
    if (rs.type == "linear") {
        p.scaling = kernels::ref::RopeScalingKind::kLinear;
    } else if (rs.type == "longrope") {
        // Phi-3: the short factors divide the frequencies (longrope_inv_freq gives the long table);
        // the attention factor is attention_q_scale's.
        p.factor = 1.0;
        p.freq_factors.clear();
        for (double f : rs.short_factor) p.freq_factors.push_back(double(float(f)));  // float32, as transformers
    } else if (rs.type == "yarn") {
        // gpt-oss, Qwen with YaRN: the ramp needs the pretraining context; the attention factor is
        // attention_q_scale's.
        if (rs.original_max_position_embeddings <= 0)
            return core::error(StatusCode::kCorrupt)
                   << path << ": yarn RoPE scaling needs original_max_position_embeddings";
        p.scaling = kernels::ref::RopeScalingKind::kYarn;
        p.beta_fast = rs.beta_fast;
        p.beta_slow = rs.beta_slow;
        p.truncate = rs.truncate;
        p.original_max_position_embeddings = rs.original_max_position_embeddings;
    } else if (rs.type == "llama3") {
        p.scaling = kernels::ref::RopeScalingKind::kLlama3;
        p.low_freq_factor = rs.low_freq_factor;
        p.high_freq_factor = rs.high_freq_factor;
        p.original_max_position_embeddings = rs.original_max_position_embeddings;
    } else {
        return core::error(StatusCode::kUnsupported)
               << path << ": RoPE scaling '" << rs.type
               << "' is not supported yet (supported: none, linear, llama3, longrope, yarn)";
    }
    return p;
}

KvCache::KvCache(const ModelConfig& config, int64_t max_len, kernels::KvDtype dtype)
    : num_layers_(config.num_layers),
      kv_dim_(config.kv_dim()),
      row_bytes_(kernels::kv_row_bytes(dtype, config.num_kv_heads, config.head_dim)),
      max_len_(max_len),
      k_(size_t(config.num_layers)),
      v_(size_t(config.num_layers)) {
    view_.dtype = dtype;
}

const std::vector<std::string>& CpuModel::supported_architectures() {
    static const std::vector<std::string> kArchs = {"llama",   "mistral",   "qwen2",     "qwen3",    "gemma2", "gemma3_text",
                                                    "phi3",    "mixtral",   "qwen2_moe", "qwen3_moe", "olmoe",  "gpt_oss"};
    return kArchs;
}

static core::Result<ops::Linear> linear(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols,
                                        const ops::LinearOptions& lo) {
    KILN_ASSIGN_OR_RETURN(WeightView w, matrix(ck, name, rows, cols));
    return ops::make_linear(w, lo);
}

std::vector<std::string> CpuModel::packed_only_matrices(const Checkpoint& ck, const ops::LinearOptions& lo) {
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

core::Result<std::unique_ptr<CpuModel>> CpuModel::create(const Checkpoint& ck, core::ThreadPool* pool,
                                                             const ops::LinearOptions& options) {
    KILN_CHECK(pool != nullptr) << "CpuModel needs a thread pool";
    ops::LinearOptions lo = options;
    lo.pool = pool;  // weights repacked over the model's threads
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
    std::unique_ptr<CpuModel> m(new CpuModel());
    m->config_ = c;
    m->pool_ = pool;
    m->backend_ = std::make_unique<ops::CpuBackend>(pool, lo.isa);
    KILN_ASSIGN_OR_RETURN(auto rope, rope_params(c, ck.path));
    m->inv_freq_ = kernels::ref::rope_inv_freqs(c.head_dim, rope);
    if (c.rope_scaling.type == "longrope") m->inv_freq_long_ = longrope_inv_freq(c);
    if (c.rope_local_theta > 0) {  // sliding layers: their own base, no scaling
        kernels::ref::RopeParams local;
        local.theta = c.rope_local_theta;
        m->inv_freq_local_ = kernels::ref::rope_inv_freqs(c.head_dim, local);
    }
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
    // A pipeline stage (ModelConfig::stage_begin) holds its layers only, the embeddings on the first
    // stage, the output layer on the last.
    if (c.has_token_embeddings()) {
        KILN_ASSIGN_OR_RETURN(const WeightView embed, matrix(ck, "token_embd.weight", c.embed_table_rows(), H));
        if (c.first_stage()) m->embed_ = ops::CpuWeight::table(embed);
        if (c.tie_word_embeddings && c.last_stage()) {
            KILN_ASSIGN_OR_RETURN(ops::Linear out, ops::make_linear(embed, lo));
            m->output_ = ops::CpuWeight::of(std::move(out));
        }
    }
    if (!c.tie_word_embeddings && c.last_stage()) {
        KILN_ASSIGN_OR_RETURN(auto out, linear(ck, "output.weight", c.output_layer_rows(), H, lo));
        m->output_ = ops::CpuWeight::of(std::move(out));
    }
    KILN_ASSIGN_OR_RETURN(m->output_norm_, vec(ck, "output_norm.weight", H));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const auto p = [l](LayerTensor t) { return loader::layer_tensor_name(l, t); };
        Layer L;
        if (!c.has_layer(l)) {  // another pipeline stage's
            m->layers_.push_back(std::move(L));
            continue;
        }
        KILN_ASSIGN_OR_RETURN(const WeightView vq, matrix(ck, p(LayerTensor::kQ), Q, H));
        KILN_ASSIGN_OR_RETURN(const WeightView vk, matrix(ck, p(LayerTensor::kK), KV, H));
        KILN_ASSIGN_OR_RETURN(const WeightView vv, matrix(ck, p(LayerTensor::kV), KV, H));
        const WeightView qkv[] = {vq, vk, vv};
        KILN_ASSIGN_OR_RETURN(L.qkv, ops::CpuWeight::fuse(qkv, 0, lo));
        KILN_ASSIGN_OR_RETURN(ops::Linear wo, linear(ck, p(LayerTensor::kO), H, Q, lo));
        L.o = ops::CpuWeight::of(std::move(wo));
        // A gated MLP [gate; up] / down of width f from the named tensors.
        auto mlp = [&](const std::string& gate, const std::string& up, const std::string& down, int64_t f,
                       std::unique_ptr<ops::CpuWeight>* gu, std::unique_ptr<ops::CpuWeight>* d) -> Status {
            KILN_ASSIGN_OR_RETURN(const WeightView vg, matrix(ck, gate, f, H));
            KILN_ASSIGN_OR_RETURN(const WeightView vu, matrix(ck, up, f, H));
            const WeightView gate_up[] = {vg, vu};
            KILN_ASSIGN_OR_RETURN(*gu, ops::CpuWeight::fuse(gate_up, ops::kSwigluBlock, lo));
            KILN_ASSIGN_OR_RETURN(ops::Linear wd, linear(ck, down, H, f, lo));
            *d = ops::CpuWeight::of(std::move(wd));
            return Status::ok();
        };
        if (!c.moe()) {
            KILN_RETURN_IF_ERROR(mlp(p(LayerTensor::kGate), p(LayerTensor::kUp), p(LayerTensor::kDown), F, &L.gate_up, &L.down));
        } else {
            KILN_ASSIGN_OR_RETURN(ops::Linear router, linear(ck, p(LayerTensor::kRouter), c.num_experts, H, lo));
            L.router = ops::CpuWeight::of(std::move(router));
            for (int64_t e = 0; e < c.num_experts; ++e) {
                const auto x = [l, e](LayerTensor t) { return loader::layer_tensor_name(l, t, e); };
                L.expert_gate_up.emplace_back();
                L.expert_down.emplace_back();
                if (!c.has_expert(e)) {  // another rank's (expert parallelism): null weights, no biases
                    L.expert_gate_up_view.push_back(nullptr);
                    L.expert_down_view.push_back(nullptr);
                    if (c.moe_biases) {
                        L.expert_gate_up_bias.emplace_back();
                        L.expert_down_bias.emplace_back();
                    }
                    continue;
                }
                KILN_RETURN_IF_ERROR(mlp(x(LayerTensor::kExpertGate), x(LayerTensor::kExpertUp),
                                         x(LayerTensor::kExpertDown), c.expert_intermediate_size,
                                         &L.expert_gate_up.back(), &L.expert_down.back()));
                L.expert_gate_up_view.push_back(L.expert_gate_up.back().get());
                L.expert_down_view.push_back(L.expert_down.back().get());
                if (c.moe_biases) {
                    const int64_t FE = c.expert_intermediate_size;
                    KILN_ASSIGN_OR_RETURN(const std::vector<float> bg, vec(ck, x(LayerTensor::kExpertGateBias), FE));
                    KILN_ASSIGN_OR_RETURN(const std::vector<float> bu, vec(ck, x(LayerTensor::kExpertUpBias), FE));
                    L.expert_gate_up_bias.push_back(L.expert_gate_up.back()->gate_up_order(bg, bu));
                    KILN_ASSIGN_OR_RETURN(std::vector<float> bd, vec(ck, x(LayerTensor::kExpertDownBias), H));
                    L.expert_down_bias.push_back(std::move(bd));
                }
            }
            for (size_t e = 0; e < L.expert_gate_up_bias.size(); ++e) {  // the vectors above no longer move
                L.expert_gate_up_bias_view.push_back(opt(L.expert_gate_up_bias[e]));
                L.expert_down_bias_view.push_back(opt(L.expert_down_bias[e]));
            }
            L.moe.router = L.router.get();
            L.moe.gate_up = L.expert_gate_up_view;
            L.moe.down = L.expert_down_view;
            L.moe.gate_up_bias = L.expert_gate_up_bias_view;
            L.moe.down_bias = L.expert_down_bias_view;
            if (c.moe_biases) {
                KILN_ASSIGN_OR_RETURN(L.router_bias, vec(ck, p(LayerTensor::kRouterBias), c.num_experts));
                L.moe.router_bias = L.router_bias.data();
            }
            if (c.shared_expert_intermediate_size > 0) {
                KILN_RETURN_IF_ERROR(mlp(p(LayerTensor::kSharedGate), p(LayerTensor::kSharedUp),
                                         p(LayerTensor::kSharedDown), c.shared_expert_intermediate_size,
                                         &L.shared_gate_up, &L.shared_down));
                KILN_ASSIGN_OR_RETURN(const WeightView vsg, row_matrix(ck, p(LayerTensor::kSharedRouter), H));
                KILN_ASSIGN_OR_RETURN(ops::Linear sg, ops::make_linear(vsg, lo));
                L.shared_gate = ops::CpuWeight::of(std::move(sg));
                L.moe.shared_gate_up = L.shared_gate_up.get();
                L.moe.shared_down = L.shared_down.get();
                L.moe.shared_gate = L.shared_gate.get();
            }
        }
        KILN_ASSIGN_OR_RETURN(L.attn_norm, vec(ck, p(LayerTensor::kAttnNorm), H));
        KILN_ASSIGN_OR_RETURN(L.ffn_norm, vec(ck, p(LayerTensor::kFfnNorm), H));
        if (c.attention_bias) {
            KILN_ASSIGN_OR_RETURN(L.bqkv, vec(ck, p(LayerTensor::kQBias), Q));
            KILN_ASSIGN_OR_RETURN(const std::vector<float> bk, vec(ck, p(LayerTensor::kKBias), KV));
            KILN_ASSIGN_OR_RETURN(const std::vector<float> bv, vec(ck, p(LayerTensor::kVBias), KV));
            L.bqkv.insert(L.bqkv.end(), bk.begin(), bk.end());
            L.bqkv.insert(L.bqkv.end(), bv.begin(), bv.end());
        }
        if (c.has_output_bias()) {
            KILN_ASSIGN_OR_RETURN(L.bo, vec(ck, p(LayerTensor::kOBias), H));
        }
        if (c.qk_norm) {
            KILN_ASSIGN_OR_RETURN(L.q_norm, vec(ck, p(LayerTensor::kQNorm), c.qk_norm_full ? Q : c.head_dim));
            KILN_ASSIGN_OR_RETURN(L.k_norm, vec(ck, p(LayerTensor::kKNorm), c.qk_norm_full ? KV : c.head_dim));
        }
        if (c.attn_sinks) {
            KILN_ASSIGN_OR_RETURN(L.sinks, vec(ck, p(LayerTensor::kAttnSinks), c.num_heads));
        }
        if (c.sandwich_norms) {
            KILN_ASSIGN_OR_RETURN(L.post_attn_norm, vec(ck, p(LayerTensor::kPostAttnNorm), H));
            KILN_ASSIGN_OR_RETURN(L.post_ffn_norm, vec(ck, p(LayerTensor::kPostFfnNorm), H));
        }
        m->layers_.push_back(std::move(L));
    }
    // The step's view of the weights (the vectors above no longer move).
    ModelWeights& w = m->weights_;
    w.embed = m->embed_.get();
    w.lm_head = m->output_.get();
    w.output_norm = m->output_norm_.data();
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const Layer& L = m->layers_[size_t(l)];
        LayerWeights lw;
        if (!c.has_layer(l)) {
            w.layers.push_back(lw);
            continue;
        }
        lw.qkv = L.qkv.get();
        lw.o = L.o.get();
        lw.gate_up = L.gate_up.get();
        lw.down = L.down.get();
        lw.moe = c.moe() ? &L.moe : nullptr;
        lw.qk_norm_full = c.qk_norm_full;
        lw.attn_sinks = opt(L.sinks);
        lw.attn_norm = L.attn_norm.data();
        lw.ffn_norm = L.ffn_norm.data();
        lw.bqkv = opt(L.bqkv);
        lw.bo = opt(L.bo);
        lw.q_norm = opt(L.q_norm);
        lw.k_norm = opt(L.k_norm);
        lw.post_attn_norm = opt(L.post_attn_norm);
        lw.post_ffn_norm = opt(L.post_ffn_norm);
        lw.inv_freq = c.local_rope_layer(l) ? m->inv_freq_local_.data() : m->inv_freq_.data();
        if (!m->inv_freq_long_.empty()) {
            lw.inv_freq_long = m->inv_freq_long_.data();
            lw.long_from = c.rope_scaling.original_max_position_embeddings;
        }
        w.layers.push_back(lw);
    }
    return m;
}

std::unique_ptr<CpuModel> CpuModel::replica(core::ThreadPool* pool) const {
    std::unique_ptr<CpuModel> m(new CpuModel());
    m->config_ = config_;
    m->pool_ = pool;
    m->backend_ = std::make_unique<ops::CpuBackend>(pool, backend_->attention_isa());
    m->weights_ = weights_;  // pointers into this model's weights and tables
    return m;
}

core::Result<std::unique_ptr<CpuModel>> create_model(Checkpoint& ck, core::ThreadPool* pool,
                                                       const ops::LinearOptions& lo, WeightMemory memory) {
    const std::vector<std::string> packed_only = CpuModel::packed_only_matrices(ck, lo);
    // Every weight is read now (copied or repacked): have the file's pages read in large requests
    // first, not one fault at a time by the packers' threads (a cold --mmap start, docs/performance.md).
    for (const loader::TensorRef& t : ck.tensors) core::prefetch_mapped_pages(t.data, size_t(t.num_bytes));
    if (memory == WeightMemory::kAnonymous) KILN_RETURN_IF_ERROR(copy_to_anonymous(ck, packed_only));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> m, CpuModel::create(ck, pool, lo));
    release_tensor_bytes(ck, packed_only);
#ifdef __GLIBC__
    malloc_trim(0);  // hand the freed conversion buffers back to the OS (glibc keeps them otherwise)
#endif
    core::start_huge_page_collapse();  // the weights were written on 4 KiB pages: huge pages from here on
    return m;
}

void CpuModel::Workspace::reserve(const ModelConfig& c, int64_t T) {
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
    grow(logit_rows, T);
}

Status CpuModel::check_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
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

ExpertParallel* CpuModel::expert_parallel() {
    if (!tp_ || tp_->size() == 1 || !config_.moe()) return nullptr;
    if (ep_.comm != tp_) {
        ep_.comm = tp_;
        ep_.expert_begin.clear();
        for (int r = 0; r <= tp_->size(); ++r)
            ep_.expert_begin.push_back(loader::ep_expert_begin(config_.num_experts, r, tp_->size()));
    }
    return &ep_;
}

int64_t CpuModel::set_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, const KvLayers& kv) {
    const int64_t T = int64_t(tokens.size());
    Workspace& w = work_;
    w.reserve(config_, T);
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
        a.kv.dtype = kv.dtype;
        a.q_start = row;
        a.num_tokens = s.num_tokens;
        row += s.num_tokens;
        num_logits += s.num_logits;
    }
    for (size_t i = 0, r = 0, k = 0; i < seqs.size(); r += size_t(seqs[i].num_tokens), ++i)
        for (int64_t t = seqs[i].num_tokens - seqs[i].num_logits; t < seqs[i].num_tokens; ++t)
            w.logit_rows[k++] = int64_t(r) + t;
    ops::CpuBackend::Step step;
    step.tokens = tokens;
    step.positions = std::span<const int32_t>(w.positions.data(), size_t(T));
    step.slots = std::span<const int64_t>(w.slots.data(), size_t(T));
    step.seqs = w.attn;
    step.k = kv.k;
    step.v = kv.v;
    step.kv_dtype = kv.dtype;
    step.logit_rows = std::span<const int64_t>(w.logit_rows.data(), size_t(num_logits));
    backend_->set_step(step);
    return num_logits;
}

Status CpuModel::forward_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, const KvLayers& kv,
                                 std::vector<float>& logits) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Pending> pending, start_batch(tokens, seqs, kv, logits));
    return pending ? pending->wait() : Status::ok();
}

core::Result<std::unique_ptr<dist::Pending>> CpuModel::start_batch(std::span<const int32_t> tokens,
                                                                       std::span<const BatchSeq> seqs,
                                                                       const KvLayers& kv, std::vector<float>& logits) {
    KILN_RETURN_IF_ERROR(check_batch(tokens, seqs, kv));
    if (const ExpertParallel* ep = expert_parallel(); ep && config_.expert_end_id > 0) {
        const int r = ep->comm->rank();
        if (config_.expert_begin != ep->expert_begin[size_t(r)] || config_.expert_end() != ep->expert_begin[size_t(r) + 1])
            return core::error(StatusCode::kInvalidArgument)
                   << "expert parallelism: this model holds experts [" << config_.expert_begin << ", "
                   << config_.expert_end() << "), rank " << r << " of " << ep->comm->size() << " needs ["
                   << ep->expert_begin[size_t(r)] << ", " << ep->expert_begin[size_t(r) + 1] << ")";
    }
    if (pp_) {
        std::unique_ptr<dist::Pending> pending;
        KILN_RETURN_IF_ERROR(forward_pipeline(tokens, seqs, kv, logits, &pending));
        return pending;
    }
    const ModelConfig& c = config_;
    const int64_t T = int64_t(tokens.size()), V = c.vocab_size;
    int64_t num_logits = set_batch(tokens, seqs, kv);
    Workspace& w = work_;
    const bool calibrating = last_layer_ >= 0;  // the layers' inputs are all it wants: no logits
    if (calibrating) num_logits = 0;
    logits.resize(size_t(num_logits * V));  // [num_logits, V]
    const StepBuffers b{w.x.data(), w.xn.data(),      w.qkv.data(), w.q.data(),     w.att.data(),
                        w.o.data(), w.gate_up.data(), w.act.data(), logits.data()};
    StepOptions options;
    options.hook = &hook_;
    options.expert_hook = &expert_hook_;
    options.num_layers = calibrating ? last_layer_ + 1 : -1;
    options.tp = tp_;
    options.ep = expert_parallel();
    if (calibrating) {
        options.first_layer = first_layer_;
        options.resid_in = resid_in_;
        options.resid_out = resid_out_;
    }
    KILN_RETURN_IF_ERROR(run_step(*backend_, c, weights_, b, T, num_logits, options));
    return std::unique_ptr<dist::Pending>();
}

namespace {

// A pipeline's logits receive, waited for under the pass's scaled deadline (forward_pipeline).
class StageLogits final : public dist::Pending {
public:
    StageLogits(std::unique_ptr<dist::Pending> recv, dist::Communicator& world, int stages)
        : recv_(std::move(recv)), world_(world), stages_(stages) {}
    Status wait() override {
        const double before = world_.timeout_seconds();
        if (before > 0) world_.set_timeout_seconds(before * stages_);
        const Status st = recv_->wait();
        world_.set_timeout_seconds(before);
        return st;
    }

private:
    std::unique_ptr<dist::Pending> recv_;
    dist::Communicator& world_;
    int stages_;
};

}  // namespace

Status CpuModel::forward_pipeline(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                    const KvLayers& kv, std::vector<float>& logits,
                                    std::unique_ptr<dist::Pending>* pending) {
    const ModelConfig& c = config_;
    if (last_layer_ >= 0)
        return core::error(StatusCode::kUnsupported) << "calibration runs on one rank, not a pipeline stage";
    dist::Communicator& world = *pp_;
    const int tp = tp_ ? tp_->size() : 1, me = world.rank();
    if (world.size() % tp != 0)
        return core::error(StatusCode::kInvalidArgument)
               << "pipeline: " << world.size() << " ranks are no whole number of stages of " << tp;
    const int64_t T = int64_t(tokens.size()), H = c.hidden_size, V = c.vocab_size;
    const int stages = world.size() / tp;
    // A micro-batch per stage, of at least kMicroTokens tokens: a smaller one reads the stage's weights
    // again for little work (a decode pass is bound by those reads), so decode passes are one
    // micro-batch and overlap across passes instead (the engine's lanes).
    constexpr int64_t kMicroTokens = 32;
    const int64_t num_micro = std::clamp<int64_t>(T / kMicroTokens, 1, stages);
    // One wait here may span every stage's work on a micro-batch (the last stage's first receive) or
    // the whole pass (rank 0's logits): the collective deadline, which bounds one rank's work, grows
    // with the stages for these waits.
    struct ScaledTimeout {
        dist::Communicator& comm;
        double before;
        ~ScaledTimeout() { comm.set_timeout_seconds(before); }
    } scaled{world, world.timeout_seconds()};
    if (scaled.before > 0) world.set_timeout_seconds(scaled.before * stages);
    Workspace& w = work_;
    int64_t total_logits = 0;
    for (const BatchSeq& s : seqs) total_logits += s.num_logits;
    if (c.last_stage()) w.out_logits.resize(size_t(total_logits * V));
    const int last_stage_rank0 = world.size() - tp;
    const int64_t bytes = total_logits * V * int64_t(sizeof(float));
    if (me == 0 && last_stage_rank0 != 0) {
        // Rank 0 posts the logits' receive before its stage runs: the last stage's send never waits
        // for rank 0, which may be busy with the next pass by then.
        logits.resize(size_t(total_logits * V));
        if (bytes > 0) {
            KILN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Pending> recv,
                                  world.start_recv(logits.data(), bytes, last_stage_rank0));
            *pending = std::make_unique<StageLogits>(std::move(recv), world, stages);
        }
    }
    int64_t logit_row = 0;
    for (int64_t m = 0; m < num_micro; ++m) {
        // Micro-batch m: tokens [t0, t1) of the batch, as pieces of the sequences that hold them; a
        // piece's logit rows are the part of its sequence's (a suffix) that falls in it.
        const int64_t t0 = T * m / num_micro, t1 = T * (m + 1) / num_micro;
        w.pieces.clear();
        for (int64_t i = 0, row = 0; i < int64_t(seqs.size()); row += seqs[size_t(i)].num_tokens, ++i) {
            const BatchSeq& s = seqs[size_t(i)];
            const int64_t b = std::max(row, t0), e = std::min(row + s.num_tokens, t1);
            if (b >= e) continue;
            const int64_t first_logit = s.num_tokens - s.num_logits;  // within the sequence
            BatchSeq piece = s;
            piece.start = s.start + (b - row);
            piece.num_tokens = e - b;
            piece.num_logits = std::max<int64_t>(0, (e - row) - std::max(b - row, first_logit));
            w.pieces.push_back(piece);
        }
        const int64_t Tm = t1 - t0;
        const int64_t num_logits = set_batch(tokens.subspan(size_t(t0), size_t(Tm)), w.pieces, kv);
        if (int64_t(w.stream.size()) < Tm * H) w.stream.resize(size_t(Tm * H));
        StepOptions options;
        options.tp = tp_;
        options.ep = expert_parallel();
        options.first_layer = c.stage_begin;
        options.num_layers = c.stage_end();
        if (!c.first_stage()) {
            KILN_RETURN_IF_ERROR(world.recv(w.stream.data(), Tm * H * int64_t(sizeof(float)), me - tp));
            options.resid_in = w.stream.data();
        }
        float* out = c.last_stage() ? w.out_logits.data() + logit_row * V : nullptr;
        const StepBuffers b{w.x.data(), w.xn.data(),      w.qkv.data(), w.q.data(), w.att.data(),
                            w.o.data(), w.gate_up.data(), w.act.data(), out};
        if (!c.last_stage()) options.resid_out = w.stream.data();
        KILN_RETURN_IF_ERROR(run_step(*backend_, c, weights_, b, Tm, c.last_stage() ? num_logits : 0, options));
        if (!c.last_stage())
            KILN_RETURN_IF_ERROR(world.send(w.stream.data(), Tm * H * int64_t(sizeof(float)), me + tp));
        logit_row += num_logits;
    }
    // The logits go to rank 0 once the whole pass is through: a send before the last micro-batch would
    // wait for rank 0, which is still sending micro-batches.
    if (me == 0 && last_stage_rank0 == 0) {  // one stage
        logits.assign(w.out_logits.begin(), w.out_logits.end());
    } else if (me == 0) {
        // The logits arrive in the receive posted above (*pending).
    } else {
        logits.clear();
        if (me == last_stage_rank0 && bytes > 0) KILN_RETURN_IF_ERROR(world.send(w.out_logits.data(), bytes, 0));
    }
    return Status::ok();
}

core::Status CpuModel::forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits,
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
    const size_t need = size_t((start + T) * cache.row_bytes_);
    KvLayers& kv = cache.view_;
    if (cache.k_[0].size() < need || kv.k.empty() || kv.k[0] != cache.k_[0].data()) {  // grow, re-point (or a copy)
        kv.k.clear();
        kv.v.clear();
        for (int64_t l = 0; l < c.num_layers; ++l) {
            auto& k = cache.k_[size_t(l)];
            auto& v = cache.v_[size_t(l)];
            if (k.size() < need) {
                // All max_len rows at the first forward (the tools size the cache to what they run),
                // so the cache is never copied nor its pages first touched later: a decode step after
                // a long prompt did both, inside the step.
                const size_t most = size_t(cache.max_len_ * cache.row_bytes_);
                k.resize(most);
                v.resize(most);
            }
            kv.k.push_back(static_cast<void*>(k.data()));
            kv.v.push_back(static_cast<void*>(v.data()));
        }
        kv.num_slots = int64_t(cache.k_[0].size()) / cache.row_bytes_;
    }
    const BatchSeq seq{start, T, {}, all_logits ? T : 1};
    KILN_RETURN_IF_ERROR(forward_batch(tokens, std::span<const BatchSeq>(&seq, 1), kv, logits));
    cache.len_ = start + T;
    return Status::ok();
}

core::Result<std::vector<float>> CpuModel::forward(const std::vector<int32_t>& tokens, KvCache& cache,
                                                     bool all_logits) {
    std::vector<float> logits;
    KILN_RETURN_IF_ERROR(forward(std::span<const int32_t>(tokens), cache, all_logits, logits));
    return logits;
}

}  // namespace kiln::model
