// CudaModel::create (see cuda_model.h): checks, the weights' upload, the activation arena and
// the KV pool; and the model's accessors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/numeric.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemv_quant.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/ref/transformer.h"
#include "loader/layer_tensors.h"
#include "model/cuda/cuda_model_impl.h"

namespace kiln::model {
namespace {

using core::Status;
using core::StatusCode;
using loader::LayerTensor;
using namespace cuda_detail;

struct Upload {
    uint64_t done = 0, total = 0;
    const std::function<void(uint64_t, uint64_t)>* progress = nullptr;
    void advance(uint64_t bytes) {
        done += bytes;
        if (*progress) (*progress)(done, total);
    }
};

// What a stacked matrix becomes on the device: bf16 / f16 when every part is stored so (one GEMM
// type per matrix); blocks kernels/cuda decodes (gemv_blocks_supports: GGUF's, kiln's FP4 / FP8)
// as stored when every part has that type, rows are whole 32-element groups and blocks are
// allowed; else f32 decoded on the host. The embedding table has neither
// an f16 nor a block lookup (allow false: f32).
struct DeviceType {
    WType type = WType::kF32;
    core::DType blocks = core::DType::kF32;
};

// INT8 rows with f32 row scales (W8A8 checkpoints) whose scales fp16 holds: repacked as Q8_0 blocks
// (d = fp16(row scale)), exact up to that rounding (relative 2^-11), a quarter of an f32 copy.
bool int8_rows_as_q8_0(const TensorRef& t) {
    if (t.dtype != core::DType::kI8 || !t.row_scale || t.shape[1] % 32 != 0) return false;
    for (uint64_t r = 0; r < t.shape[0]; ++r)
        if (!(std::fabs(t.row_scale[r]) <= 65504.0f)) return false;
    return true;
}

DeviceType device_type(std::span<const TensorRef* const> parts, bool allow = true, bool blocks = true) {
    bool same = true, int8_rows = true;
    for (const TensorRef* t : parts) {
        same = same && t->dtype == parts[0]->dtype;
        int8_rows = int8_rows && int8_rows_as_q8_0(*t);
    }
    const core::DType d = parts[0]->dtype;
    if (same && d == core::DType::kBF16) return {WType::kBf16, d};
    if (same && allow && d == core::DType::kF16) return {WType::kF16, d};
    if (!allow || !blocks) return {};
    if (same && kc::gemv_blocks_supports(d) && !parts[0]->row_scale && parts[0]->shape[1] % 32 == 0)
        return {WType::kBlocks, d};
    if (int8_rows) return {WType::kBlocks, core::DType::kQ8_0};
    return {};
}

uint64_t device_bytes(std::span<const TensorRef* const> parts, bool allow = true, bool blocks = true) {
    uint64_t n = 0, bytes = 0;
    for (const TensorRef* t : parts) {
        n += t->num_elements();
        bytes += t->dtype == core::DType::kI8 ? t->num_elements() / 32 * 34 : t->num_bytes;  // I8 as Q8_0
    }
    const WType type = device_type(parts, allow, blocks).type;
    return type == WType::kF32 ? n * 4 : type == WType::kBlocks ? bytes : n * 2;
}

// Rows [r0, r0 + n) of INT8 weights with row scales as Q8_0 blocks into out.
void int8_rows_to_q8_0(const TensorRef& t, int64_t r0, int64_t n, std::vector<uint8_t>& out) {
    const int64_t cols = int64_t(t.shape[1]), nb = cols / 32;
    out.resize(size_t(n * nb * 34));
    const int8_t* q = reinterpret_cast<const int8_t*>(t.data);
    for (int64_t r = 0; r < n; ++r) {
        const uint16_t d = core::f32_to_fp16(t.row_scale[r0 + r]);
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* blk = out.data() + (r * nb + b) * 34;
            std::memcpy(blk, &d, 2);
            std::memcpy(blk + 2, q + (r0 + r) * cols + b * 32, 32);
        }
    }
}

// The parts stacked by rows into one device matrix (shapes were checked by check_checkpoint_tensors:
// equal column counts). 16-bit and block parts are copied as stored; the rest decoded row by row
// to f32.
core::Result<DevMatrix> upload_matrix(std::span<const TensorRef* const> parts, Upload& up, bool allow = true,
                                      bool blocks = true) {
    DevMatrix m;
    const DeviceType dt = device_type(parts, allow, blocks);
    m.type = dt.type;
    m.blocks = dt.blocks;
    m.cols = int64_t(parts[0]->shape[1]);
    for (const TensorRef* t : parts) m.rows += int64_t(t->shape[0]);
    KILN_ASSIGN_OR_RETURN(m.buf, kc::DeviceBuffer::allocate(size_t(device_bytes(parts, allow, blocks))));
    uint8_t* dst = m.buf.as<uint8_t>();
    constexpr size_t kChunk = size_t(32) << 20;  // bytes per copy (progress granularity)
    std::vector<float> rows;
    for (const TensorRef* t : parts) {
        const int64_t num_rows = int64_t(t->shape[0]);
        if (m.type == WType::kBlocks && t->dtype == core::DType::kI8) {  // repacked as Q8_0
            const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunk) / m.cols);
            std::vector<uint8_t> packed;
            for (int64_t r0 = 0; r0 < num_rows; r0 += chunk_rows) {
                const int64_t n = std::min(chunk_rows, num_rows - r0);
                int8_rows_to_q8_0(*t, r0, n, packed);
                KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, packed.data(), packed.size(), cudaMemcpyHostToDevice));
                dst += packed.size();
                up.advance(packed.size());
            }
            continue;
        }
        if (m.type != WType::kF32) {  // as stored
            const size_t n = size_t(t->num_bytes);
            for (size_t off = 0; off < n; off += kChunk) {
                const size_t len = std::min(kChunk, n - off);
                KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst + off, t->data + off, len, cudaMemcpyHostToDevice));
                up.advance(len);
            }
            dst += n;
            continue;
        }
        const kernels::ref::WeightView w = weight_view_of(*t);
        const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunk / 4) / m.cols);
        rows.resize(size_t(std::min(chunk_rows, num_rows) * m.cols));
        for (int64_t r0 = 0; r0 < num_rows; r0 += chunk_rows) {
            const int64_t n = std::min(chunk_rows, num_rows - r0);
            for (int64_t i = 0; i < n; ++i) kernels::ref::weight_row(w, r0 + i, rows.data() + i * m.cols);
            const size_t len = size_t(n * m.cols) * 4;
            KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, rows.data(), len, cudaMemcpyHostToDevice));
            dst += len;
            up.advance(len);
        }
    }
    return m;
}

// Small f32/f16/bf16 vectors (norm weights, biases), concatenated, as one f32 device buffer.
core::Result<kc::DeviceBuffer> upload_vectors(const Checkpoint& ck, std::span<const std::string> names) {
    std::vector<float> host;
    for (const std::string& name : names) {
        const TensorRef* t = ck.find(name);
        if (!t) return core::error(StatusCode::kCorrupt) << ck.path << ": missing tensor '" << name << "'";
        const size_t at = host.size();
        host.resize(at + size_t(t->num_elements()));
        KILN_RETURN_IF_ERROR(
            kernels::ref::dequantize_row(t->dtype, t->data, host.data() + at, int64_t(t->num_elements())));
    }
    KILN_ASSIGN_OR_RETURN(kc::DeviceBuffer b, kc::DeviceBuffer::allocate(host.size() * sizeof(float)));
    KILN_RETURN_IF_ERROR(b.copy_from_host(host.data(), host.size() * sizeof(float)));
    return b;
}

}  // namespace

using namespace cuda_detail;

Status CudaModel::Impl::plan_arena() {
    const ModelConfig& c = config;
    const int64_t T = options.max_batch_tokens, H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim();
    const int64_t F = c.moe() ? 0 : c.intermediate_size;  // a mixture's MLPs use the moe_ buffers below
    const int64_t V = c.vocab_size, NL = options.max_logits;
    const int64_t head_floats = c.num_heads * (c.head_dim + 1);
    const int64_t max_splits = (options.max_seq_len + kc::kDecodeSplitKeys - 1) / kc::kDecodeSplitKeys;
    // Room for every sequence of a decode step in one launch, within the budget, never less than
    // one query of max_seq_len keys.
    const int64_t budget_rows = int64_t(kAttnWorkspaceBudget / 4) / head_floats;
    attn_ws_rows = size_t(std::max(max_splits, std::min(max_splits * std::min(options.max_seqs, T), budget_rows)));
    const int64_t max_tiles = (T + kc::kPrefillTileQueries - 1) / kc::kPrefillTileQueries + options.max_seqs;
    const StepIndexLayout stage = step_index_layout(T, options.max_seqs, NL, blocks_per_seq, max_tiles);
    // Mixture of experts (sizes 0 without experts): N = T top_k entries, Fe the experts' width, S the
    // shared expert's; the int32 buffers (ids, offsets, entries, slot_pos) are 4-byte slots too.
    const int64_t E = c.num_experts, K = c.num_experts_used, N = T * K;
    const int64_t Fe = c.expert_intermediate_size, S = c.moe() ? c.shared_expert_intermediate_size : 0;
    const int64_t moe = c.moe() ? 1 : 0;
    int32_t** int_ptrs[] = {&moe_ids, &moe_offsets, &moe_entries, &moe_slot_pos};
    float* ints[std::size(int_ptrs)] = {};
    const size_t floats[] = {size_t(T * H),
                             size_t(T * H),
                             size_t(T * (Q + 2 * KV)),
                             size_t(T * Q),
                             size_t(T * Q),
                             size_t(T * H),
                             size_t(T * 2 * F),
                             size_t(T * F),
                             size_t(NL * V),
                             attn_ws_rows * size_t(head_floats),
                             size_t(decoded_floats),
                             size_t(moe * T * E),
                             size_t(moe * N),
                             size_t(moe * std::max(N * 2 * Fe, T * 2 * S)),
                             size_t(moe * std::max(N * Fe, T * S)),
                             size_t(moe * std::max(N, T) * H),
                             size_t(moe * N),
                             size_t(moe * (E + 1)),
                             size_t(moe * N),
                             size_t(moe * N)};
    float** ptrs[] = {&x, &xn, &qkv, &q, &att, &o, &gate_up, &act, &logits, &attn_ws, &decoded,
                      &moe_logits, &moe_weights, &moe_gate_up, &moe_act, &moe_y, &ints[0], &ints[1], &ints[2],
                      &ints[3]};
    static_assert(std::size(floats) == std::size(ptrs));
    size_t total = 0;
    for (size_t n : floats) total += align256(n * 4);
    const size_t x16_bytes = align256(size_t(std::max(std::max(T, NL) * std::max({H, Q, F, S}), int64_t(1))) * 2);
    const size_t ids_bytes = align256(size_t(NL) * 4);
    KILN_ASSIGN_OR_RETURN(arena, kc::DeviceBuffer::allocate(total + x16_bytes + ids_bytes + stage.end));
    uint8_t* p = arena.as<uint8_t>();
    for (size_t i = 0; i < std::size(floats); ++i) {
        *ptrs[i] = reinterpret_cast<float*>(p);
        p += align256(floats[i] * 4);
    }
    for (size_t i = 0; i < std::size(int_ptrs); ++i) *int_ptrs[i] = reinterpret_cast<int32_t*>(ints[i]);
    x16 = p;
    p += x16_bytes;
    ids = reinterpret_cast<int32_t*>(p);
    p += ids_bytes;
    stage_dev = p;
    KILN_ASSIGN_OR_RETURN(stage_host, kc::PinnedBuffer::allocate(stage.end));
    KILN_ASSIGN_OR_RETURN(ids_host, kc::PinnedBuffer::allocate(ids_bytes));
    // Device sampling: room for every row and 64 bias / penalty entries each (grown when a step
    // needs more: long histories with penalties).
    const size_t sample_bytes =
        size_t(NL) * (sizeof(kernels::ref::SampleRow) + 64 * sizeof(kernels::ref::LogitAdjustment));
    KILN_ASSIGN_OR_RETURN(sample_host, kc::PinnedBuffer::allocate(sample_bytes));
    KILN_ASSIGN_OR_RETURN(sample_dev, kc::DeviceBuffer::allocate(sample_bytes));
    return Status::ok();
}

Status CudaModel::Impl::plan_kv() {
    const ModelConfig& c = config;
    const int64_t bs = options.block_size, row_bytes = kernels::kv_row_bytes(options.kv_dtype, c.num_kv_heads, c.head_dim);
    const int64_t block_bytes = 2 * c.num_layers * bs * row_bytes;
    int64_t num_blocks = options.num_kv_blocks;
    if (num_blocks == 0) {
        size_t free_b = 0, total_b = 0;
        KILN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
        const double used = double(total_b - free_b);  // this model so far, the context, other processes
        const double budget = options.gpu_memory_utilization * double(total_b) - used;
        num_blocks = budget > 0 ? int64_t(budget / double(block_bytes)) - 1 : 0;  // - the scratch block
        if (num_blocks < blocks_per_seq) {
            auto gib = [](double b) { return b / double(1 << 30); };
            return core::error(StatusCode::kOutOfMemory)
                   << "the KV cache gets " << gib(std::max(budget, 0.0)) << " GiB of the " << gib(double(total_b))
                   << " GiB device under --gpu-memory-utilization " << options.gpu_memory_utilization << " ("
                   << gib(used) << " GiB in use after loading the weights and the activation arena); one sequence of "
                   << options.max_seq_len << " tokens needs " << gib(double(blocks_per_seq * block_bytes))
                   << " GiB (and one block is kept as scratch): raise --gpu-memory-utilization or lower the context "
                      "length";
        }
        options.num_kv_blocks = num_blocks;
    }
    // One block more than the caller's: the scratch block padded decode batches write to.
    scratch_block = int32_t(num_blocks);
    const size_t layer_bytes = size_t((num_blocks + 1) * bs * row_bytes);
    KILN_ASSIGN_OR_RETURN(kv, kc::DeviceBuffer::allocate(layer_bytes * 2 * size_t(c.num_layers)));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        k.push_back(kv.as<uint8_t>() + (2 * l) * layer_bytes);
        v.push_back(kv.as<uint8_t>() + (2 * l + 1) * layer_bytes);
    }
    own_table.resize(size_t(num_blocks));
    for (int64_t b = 0; b < num_blocks; ++b) own_table[size_t(b)] = int32_t(b);
    return Status::ok();
}

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

const ModelConfig& CudaModel::config() const {
    return impl_->config;
}
const CudaModelOptions& CudaModel::options() const {
    return impl_->options;
}
int64_t CudaModel::num_graphs() const {
    return int64_t(impl_->graphs.size());
}

uint64_t CudaModel::weight_bytes() const {
    return impl_->weight_bytes;
}

uint64_t CudaModel::step_weight_bytes() const {
    const Impl& m = *impl_;
    uint64_t n = m.lm_head().buf.bytes() + m.embed_table.buf.bytes() / uint64_t(std::max<int64_t>(m.embed_table.rows, 1));
    const ModelConfig& c = m.config;
    for (const Impl::Layer& L : m.layers) {
        n += L.wqkv.buf.bytes() + L.wo.buf.bytes() + L.w_gate_up.buf.bytes() + L.w_down.buf.bytes();
        if (L.moe)  // a token's share: the router, the shared expert, top_k of the experts
            n += L.moe->router_m.buf.bytes() + L.moe->shared_gate_up_m.buf.bytes() + L.moe->shared_down_m.buf.bytes() +
                 L.moe->shared_gate_m.buf.bytes() +
                 (L.moe->experts_gate_up.buf.bytes() + L.moe->experts_down.buf.bytes()) /
                     uint64_t(c.num_experts) * uint64_t(c.num_experts_used);
    }
    return n;
}

std::string CudaModel::describe() const {
    const Impl& m = *impl_;
    auto gib = [](double b) { return b / double(1 << 30); };
    std::ostringstream os;
    os.precision(3);
    os << "cuda:" << m.options.device << " " << m.device_name << ": weights " << gib(double(m.weight_bytes)) << " GiB ("
       << wtype_name(m.layers.empty() ? m.embed_table : m.layers[0].wqkv) << "), KV cache " << gib(double(m.kv.bytes()))
       << " GiB (" << kernels::ref::kv_dtype_name(m.options.kv_dtype) << ", " << m.options.num_kv_blocks << " blocks of "
       << m.options.block_size << " tokens), activations " << gib(double(m.arena.bytes())) << " GiB";
    if (m.options.cuda_graphs)
        os << (m.graphs_off ? "; CUDA graphs off: " + m.graph_error : "; decode steps in CUDA graphs");
    return os.str();
}

core::Result<std::unique_ptr<CudaModel>> CudaModel::create(const Checkpoint& ck,
                                                                     const CudaModelOptions& options) {
    const ModelConfig& c = ck.config;
    const auto& archs = CpuModel::supported_architectures();
    if (std::find(archs.begin(), archs.end(), c.arch) == archs.end())
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": architecture '" << c.arch << "' is not supported on CUDA";
    if (c.qk_norm_full)
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": " << c.arch << " runs on the CPU only so far (whole-projection q/k norms have no "
               << "CUDA kernel yet)";
    if (c.attn_sinks || c.moe_biases || c.swiglu_limit > 0)
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": " << c.arch << " runs on the CPU only so far (attention sinks, expert biases and the "
               << "clamped SwiGLU have no CUDA kernels yet)";
    if (c.rope_scaling.type == "yarn")
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": YaRN RoPE runs on the CPU only so far (its attention factor scales q, which the CUDA "
               << "RoPE kernel does not do yet)";
    if (c.rope_scaling.type == "longrope")
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": LongRoPE (Phi-3) runs on the CPU only so far (the CUDA RoPE kernel has one table)";
    if (c.moe() && (c.expert_begin != 0 || c.expert_end_id > 0))
        return core::error(StatusCode::kUnsupported) << ck.path << ": expert parallelism runs on the CPU only so far";
    if (c.moe() && c.num_experts > 1024)
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": " << c.num_experts << " experts: the CUDA grouping takes at most 1024";
    if (c.gelu_mlp || c.sandwich_norms || c.scale_embeddings)
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": " << c.arch << " runs on the CPU only so far (GeGLU, the post-block norms and scaled "
               << "embeddings have no CUDA kernels yet)";
    KILN_RETURN_IF_ERROR(c.validate());
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(ck));
    if (core::Status st = kc::decode_attention_supports(c.num_heads, c.num_kv_heads, c.head_dim); !st.is_ok())
        return core::error(StatusCode::kUnsupported) << ck.path << ": not on CUDA yet: " << st.message();
    if (c.head_dim > 256)
        return core::error(StatusCode::kUnsupported) << ck.path << ": head_dim " << c.head_dim << " over 256";
    CudaModelOptions o = options;
    if (o.max_seq_len == 0) o.max_seq_len = c.max_seq_len > 0 ? c.max_seq_len : 2048;
    if (o.max_batch_tokens < 1 || o.max_seqs < 1 || o.max_logits < 1 || o.block_size < 1 || o.num_kv_blocks < 0 ||
        o.max_seq_len < 1 || (c.max_seq_len > 0 && o.max_seq_len > c.max_seq_len) ||
        !(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0))
        return core::error(StatusCode::kInvalidArgument)
               << "CUDA model options: batch tokens " << o.max_batch_tokens << ", sequences " << o.max_seqs
               << ", logits " << o.max_logits << ", block size " << o.block_size << ", context " << o.max_seq_len
               << " (the model's " << c.max_seq_len << "), memory utilization " << o.gpu_memory_utilization
               << " (0, 1]";
    const int count = kc::device_count();
    if (o.device < 0 || o.device >= count)
        return core::error(StatusCode::kUnsupported)
               << "CUDA device " << o.device << " does not exist (" << count << " device(s) visible)";
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
    KILN_ASSIGN_OR_RETURN(kc::DeviceInfo info, kc::device_info(o.device));

    auto m = std::make_unique<Impl>();
    m->config = c;
    m->options = o;
    m->device_name = info.name;
    m->blocks_per_seq = (o.max_seq_len + o.block_size - 1) / o.block_size;
    // Prompt chunks on tensor cores where the kernel is built for the heads and the pool is f16.
    if (o.tensor_core_prefill && o.kv_dtype == kernels::KvDtype::kF16 &&
        kc::prefill_attention_supports(c.num_heads, c.num_kv_heads, c.head_dim).is_ok())
        m->tile_queries = kc::kPrefillTileQueries;
    KILN_ASSIGN_OR_RETURN(m->stream, kc::Stream::create());
    KILN_ASSIGN_OR_RETURN(m->gemm, kc::Gemm::create());
    KILN_ASSIGN_OR_RETURN(auto rope, rope_params(c, ck.path));
    const std::vector<double> inv_freq = kernels::ref::rope_inv_freqs(c.head_dim, rope);
    KILN_ASSIGN_OR_RETURN(m->inv_freq, kc::DeviceBuffer::allocate(inv_freq.size() * sizeof(double)));
    KILN_RETURN_IF_ERROR(m->inv_freq.copy_from_host(inv_freq.data(), inv_freq.size() * sizeof(double)));

    // Matrices in upload order, each a list of stacked parts.
    auto t = [&](const std::string& name) { return ck.find(name); };  // present: check_checkpoint_tensors
    std::vector<std::vector<const TensorRef*>> groups;
    groups.push_back({t("token_embd.weight")});
    if (!c.tie_word_embeddings) groups.push_back({t("output.weight")});
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const auto p = [l](LayerTensor t) { return loader::layer_tensor_name(l, t); };
        groups.push_back({t(p(LayerTensor::kQ)), t(p(LayerTensor::kK)), t(p(LayerTensor::kV))});
        groups.push_back({t(p(LayerTensor::kO))});
        if (!c.moe()) {
            groups.push_back({t(p(LayerTensor::kGate)), t(p(LayerTensor::kUp))});
            groups.push_back({t(p(LayerTensor::kDown))});
            continue;
        }
        // The router, every expert's [gate; up] stacked, every expert's down stacked, the shared expert.
        groups.push_back({t(p(LayerTensor::kRouter))});
        std::vector<const TensorRef*> gate_up, down;
        for (int64_t e = 0; e < c.num_experts; ++e) {
            const auto x = [l, e](LayerTensor t) { return loader::layer_tensor_name(l, t, e); };
            gate_up.push_back(t(x(LayerTensor::kExpertGate)));
            gate_up.push_back(t(x(LayerTensor::kExpertUp)));
            down.push_back(t(x(LayerTensor::kExpertDown)));
        }
        groups.push_back(gate_up);
        groups.push_back(down);
        if (c.shared_expert_intermediate_size > 0) {
            groups.push_back({t(p(LayerTensor::kSharedGate)), t(p(LayerTensor::kSharedUp))});
            groups.push_back({t(p(LayerTensor::kSharedDown))});
        }
    }
    for (const auto& parts : groups)  // whole blocks per row (the CPU's matrix() check)
        for (const TensorRef* t : parts)
            if (t->shape.size() != 2 || !core::dtype_bytes(t->dtype, t->shape[1]) || !matrix_dtype_supported(*t))
                return core::error(StatusCode::kUnsupported)
                       << ck.path << ": tensor '" << t->name << "' of type " << core::dtype_name(t->dtype)
                       << " cannot be used as a matrix";
    Upload up;
    up.progress = &o.progress;
    const bool blocks = o.quantized_weights;
    up.total = device_bytes(groups[0], /*allow=*/false);
    for (size_t i = 1; i < groups.size(); ++i) up.total += device_bytes(groups[i], true, blocks);
    // The embedding table: bf16 rows as stored, anything else in f32 (the lookup kernel's types).
    KILN_ASSIGN_OR_RETURN(m->embed_table, upload_matrix(groups[0], up, /*allow=*/false));
    size_t g = 1;
    if (!c.tie_word_embeddings) {
        KILN_ASSIGN_OR_RETURN(m->output, upload_matrix(groups[g++], up, true, blocks));
    }
    KILN_ASSIGN_OR_RETURN(m->output_norm, upload_vectors(ck, std::vector<std::string>{"output_norm.weight"}));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const auto p = [l](LayerTensor t) { return loader::layer_tensor_name(l, t); };
        Impl::Layer L;
        KILN_ASSIGN_OR_RETURN(L.wqkv, upload_matrix(groups[g++], up, true, blocks));
        KILN_ASSIGN_OR_RETURN(L.wo, upload_matrix(groups[g++], up, true, blocks));
        if (!c.moe()) {
            KILN_ASSIGN_OR_RETURN(L.w_gate_up, upload_matrix(groups[g++], up, true, blocks));
            KILN_ASSIGN_OR_RETURN(L.w_down, upload_matrix(groups[g++], up, true, blocks));
        } else {
            L.moe = std::make_unique<DevMoe>();
            DevMoe& moe = *L.moe;
            KILN_ASSIGN_OR_RETURN(moe.router_m, upload_matrix(groups[g++], up, true, blocks));
            KILN_ASSIGN_OR_RETURN(moe.experts_gate_up, upload_matrix(groups[g++], up, true, blocks));
            KILN_ASSIGN_OR_RETURN(moe.experts_down, upload_matrix(groups[g++], up, true, blocks));
            if (c.shared_expert_intermediate_size > 0) {
                KILN_ASSIGN_OR_RETURN(moe.shared_gate_up_m, upload_matrix(groups[g++], up, true, blocks));
                KILN_ASSIGN_OR_RETURN(moe.shared_down_m, upload_matrix(groups[g++], up, true, blocks));
                moe.shared_gate_m.rows = 1;  // [H] as a [1, H] f32 matrix
                moe.shared_gate_m.cols = c.hidden_size;
                KILN_ASSIGN_OR_RETURN(moe.shared_gate_m.buf,
                                      upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kSharedRouter)}));
            }
            moe.set_views(c.num_experts);
        }
        KILN_ASSIGN_OR_RETURN(L.attn_norm, upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kAttnNorm)}));
        KILN_ASSIGN_OR_RETURN(L.ffn_norm, upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kFfnNorm)}));
        if (c.attention_bias) {
            KILN_ASSIGN_OR_RETURN(
                L.bqkv,
                upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kQBias), p(LayerTensor::kKBias), p(LayerTensor::kVBias)}));
        }
        if (c.has_output_bias()) {
            KILN_ASSIGN_OR_RETURN(L.bo, upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kOBias)}));
        }
        if (c.qk_norm) {
            KILN_ASSIGN_OR_RETURN(L.q_norm, upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kQNorm)}));
            KILN_ASSIGN_OR_RETURN(L.k_norm, upload_vectors(ck, std::vector<std::string>{p(LayerTensor::kKNorm)}));
        }
        m->layers.push_back(std::move(L));
    }
    m->set_weights();
    m->weight_bytes = up.total;
    // Without quantized_gemm, steps of more than 8 tokens multiply a block-quantized layer matrix
    // decoded to f32, one at a time.
    if (o.max_batch_tokens > kc::kGemvMaxTokens) {
        for (const Impl::Layer& L : m->layers) {
            std::vector<const DevMatrix*> mats = {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down};
            if (L.moe)  // a mixture's router and shared expert go through linear() too
                mats.insert(mats.end(), {&L.moe->router_m, &L.moe->shared_gate_up_m, &L.moe->shared_down_m});
            for (const DevMatrix* w : mats)
                if (w->type == WType::kBlocks && !o.quantized_gemm)  // the exact path's decoded copy
                    m->decoded_floats = std::max(m->decoded_floats, w->rows * w->cols);
        }
    }
    KILN_RETURN_IF_ERROR(m->plan_arena());
    KILN_RETURN_IF_ERROR(m->plan_kv());
    const int64_t largest = std::min({o.max_seqs, o.max_batch_tokens, o.max_logits});
    for (int64_t b = 1; b < largest; b = b < 64 ? 2 * b : b + 32) m->buckets.push_back(b);
    m->buckets.push_back(largest);
    const int64_t max_splits = (o.max_seq_len + kc::kDecodeSplitKeys - 1) / kc::kDecodeSplitKeys;
    m->graph_splits = std::min<int64_t>(max_splits, 64);
    m->pad_tokens.reserve(size_t(largest));
    m->pad_seqs.reserve(size_t(largest));
    // cudaMemcpy from pageable memory may return before the device has the bytes, and the model's
    // stream does not wait for the legacy stream: wait here, once.
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return std::unique_ptr<CudaModel>(new CudaModel(std::move(m)));
}

}  // namespace kiln::model
