// CudaModel (see cuda_model.h): the runner of model/transformer.h's step on a CUDA device, and
// the ops::Backend it runs over. Shapes: T = tokens in the step, S = its sequences, NL = rows of
// logits, H = hidden size, Q = num_heads * head_dim, KV = num_kv_heads * head_dim, F = intermediate
// size, V = vocab.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_quant.h"
#include "kernels/cuda/gemv_quant.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sample.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/transformer.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/step_indices.h"

namespace kiln::model {

using core::Status;
using core::StatusCode;
using namespace cuda_detail;

// out [m, w.rows] = in @ w^T where the input is already in place: `in` (f32) for f32 and block
// weights, x16 (rounded to the weight's type) for 16-bit ones.
Status CudaModel::Impl::gemm_prepared(const DevMatrix& w, const float* in, int64_t m, float* out) {
    cudaStream_t s = stream.get();
    switch (w.type) {
        case WType::kF32:
            return gemm->run(in, w.buf.as<float>(), out, m, w.rows, w.cols, s);
        case WType::kBf16:
            return gemm->run(static_cast<const __nv_bfloat16*>(x16), w.buf.as<__nv_bfloat16>(), out, m, w.rows, w.cols,
                             s);
        case WType::kF16:
            return gemm->run(static_cast<const __half*>(x16), w.buf.as<__half>(), out, m, w.rows, w.cols, s);
        case WType::kBlocks:
            if (m > kc::kGemvMaxTokens && options.quantized_gemm) {  // tensor cores, f16 activations
                KILN_RETURN_IF_ERROR(kc::convert_saturating(in, static_cast<__half*>(x16), m * w.cols, s));
                return kc::gemm_blocks(w.blocks, w.buf.data(), w.rows, w.cols, static_cast<const __half*>(x16), m, out,
                                       s);
            }
            // The dequantizing GEMV, 8 tokens per pass over the blocks; for long steps one decoded f32
            // copy of the matrix and an f32 GEMM (a matrix larger than that copy, the output matrix,
            // stays on the GEMV).
            // The GEMV reads the blocks once per 8 tokens; the decoded copy costs the blocks plus 8
            // bytes a weight (written, read): the GEMV while that is cheaper (m <= 64 for Q8_0,
            // <= 120 for the 4-bit blocks), so decode batches stay on it.
            if (m > kc::kGemvMaxTokens && w.rows * w.cols <= decoded_floats &&
                double((m + kc::kGemvMaxTokens - 1) / kc::kGemvMaxTokens - 1) * double(w.buf.bytes()) >=
                    8.0 * double(w.rows * w.cols)) {
                KILN_RETURN_IF_ERROR(kc::dequantize_blocks(w.blocks, w.buf.data(), w.rows * w.cols, decoded, s));
                return gemm->run(in, decoded, out, m, w.rows, w.cols, s);
            }
            for (int64_t t0 = 0; t0 < m; t0 += kc::kGemvMaxTokens)
                KILN_RETURN_IF_ERROR(kc::gemv_blocks(w.blocks, w.buf.data(), w.rows, w.cols, in + t0 * w.cols,
                                                     std::min(kc::kGemvMaxTokens, m - t0), out + t0 * w.rows, s));
            return Status::ok();
    }
    return core::error(StatusCode::kInternal) << "gemm: unknown weight type";
}

// The same from an f32 input, rounded into x16 first for 16-bit weights.
Status CudaModel::Impl::gemm_run(const DevMatrix& w, const float* in, int64_t m, float* out) {
    cudaStream_t s = stream.get();
    if (w.type == WType::kBf16) KILN_RETURN_IF_ERROR(kc::convert(in, static_cast<__nv_bfloat16*>(x16), m * w.cols, s));
    if (w.type == WType::kF16) KILN_RETURN_IF_ERROR(kc::convert(in, static_cast<__half*>(x16), m * w.cols, s));
    return gemm_prepared(w, in, m, out);
}

void CudaModel::Impl::set_weights() {
    weights.embed = &embed_table;
    weights.lm_head = &lm_head();
    weights.output_norm = fptr(output_norm);
    weights.layers.clear();
    for (const Layer& L : layers) {
        LayerWeights w;
        w.qkv = &L.wqkv;
        w.o = &L.wo;
        w.gate_up = L.moe ? nullptr : &L.w_gate_up;
        w.down = L.moe ? nullptr : &L.w_down;
        w.moe = L.moe.get();
        w.attn_norm = fptr(L.attn_norm);
        w.ffn_norm = fptr(L.ffn_norm);
        w.bqkv = fptr(L.bqkv);
        w.bo = fptr(L.bo);
        w.q_norm = fptr(L.q_norm);
        w.k_norm = fptr(L.k_norm);
        w.inv_freq = inv_freq.as<double>();
        weights.layers.push_back(w);
    }
}

static const DevMatrix& dev(const ops::Weight& w) {
    return static_cast<const DevMatrix&>(w);  // this backend only ever gets its own matrices
}

static bool is16(WType t) {
    return t == WType::kBf16 || t == WType::kF16;
}

Status CudaModel::Impl::embed(const ops::Weight& table, float scale, float* out, int64_t first_id) {
    if (scale != 1.0f) return core::error(StatusCode::kUnsupported) << "embed: scaled embeddings have no CUDA kernel yet";
    if (first_id != 0) return core::error(StatusCode::kUnsupported) << "embed: a vocabulary share has no CUDA kernel yet";
    const DevMatrix& e = dev(table);
    const int32_t* d_tokens = step_->i32(step_->ix.layout.tokens);
    const int64_t T = step_->ix.num_tokens;
    if (e.type == WType::kBf16) return kc::embedding(e.buf.as<__nv_bfloat16>(), e.rows, e.cols, d_tokens, T, out, stream.get());
    return kc::embedding(e.buf.as<float>(), e.rows, e.cols, d_tokens, T, out, stream.get());
}

// x += add (if any), then rmsnorm(x) * weight into y, or for a 16-bit reader into x16 (the norm
// writes the GEMM's input type: no separate conversion).
Status CudaModel::Impl::add_rmsnorm(float* x_, const float* add, const float* weight, float* y, int64_t rows,
                                         int64_t n, float eps, const ops::Weight* next) {
    cudaStream_t s = stream.get();
    const WType t = next ? dev(*next).type : WType::kF32;
    prepared_ = {};
    if (!is16(t)) return kc::add_rmsnorm(x_, add, weight, y, rows, n, eps, s);
    prepared_ = {y, t};
    if (t == WType::kBf16) return kc::add_rmsnorm(x_, add, weight, static_cast<__nv_bfloat16*>(x16), rows, n, eps, s);
    return kc::add_rmsnorm(x_, add, weight, static_cast<__half*>(x16), rows, n, eps, s);
}

Status CudaModel::Impl::linear(const ops::Weight& weight, const float* in, int64_t rows, const float* bias,
                                    float* out) {
    const DevMatrix& w = dev(weight);
    const bool ready = is16(w.type) && prepared_.of == in && prepared_.type == w.type;
    prepared_ = {};
    KILN_RETURN_IF_ERROR(ready ? gemm_prepared(w, in, rows, out) : gemm_run(w, in, rows, out));
    if (bias) return kc::add_bias_rows(out, bias, rows, w.rows, stream.get());
    return Status::ok();
}

Status CudaModel::Impl::qkv_rope_kv_write(int64_t l, float* qkv_, float* q_out, const ops::QkvRope& p) {
    if (p.q_scale != 1.0f || p.inv_freq_long || p.norm_full)
        return core::error(StatusCode::kUnsupported) << "qkv_rope_kv_write: q scaling, LongRoPE and whole-projection q/k norms have no CUDA kernel yet";
    kc::QkvRopeKvWrite w;
    w.qkv = qkv_;
    w.bias = nullptr;  // added by linear()
    w.q_norm = p.q_norm;
    w.k_norm = p.k_norm;
    w.eps = p.eps;
    w.positions = step_->i32(step_->ix.layout.positions);
    w.slots = reinterpret_cast<const int64_t*>(step_->dev + step_->ix.layout.slots);
    w.inv_freq = p.inv_freq;
    w.q_out = q_out;
    w.k_cache = k[size_t(l)];
    w.v_cache = v[size_t(l)];
    w.dtype = options.kv_dtype;
    w.num_tokens = step_->ix.num_tokens;
    w.num_heads = p.num_heads;
    w.num_kv_heads = p.num_kv_heads;
    w.head_dim = p.head_dim;
    return kc::qkv_rope_kv_write(w, stream.get());
}

Status CudaModel::Impl::gated_mlp_up(const ops::Weight& gate_up_w, const float* in, int64_t rows,
                                          ops::GatedAct f, float* gate_up_out, float* act_out,
                                          const ops::Weight* next) {
    if (f != ops::GatedAct::kSilu) return core::error(StatusCode::kUnsupported) << "gated MLP: only SiLU on CUDA so far";
    KILN_RETURN_IF_ERROR(linear(gate_up_w, in, rows, nullptr, gate_up_out));  // [T, 2F] = [gate | up]
    cudaStream_t s = stream.get();
    const int64_t F = gate_up_w.rows / 2;
    const WType t = next ? dev(*next).type : WType::kF32;
    // SiLU-mul writes the down projection's input type
    if (t == WType::kBf16) {
        prepared_ = {act_out, t};
        return kc::silu_mul_rows(gate_up_out, static_cast<__nv_bfloat16*>(x16), rows, F, s);
    }
    if (t == WType::kF16) {
        prepared_ = {act_out, t};
        return kc::silu_mul_rows(gate_up_out, static_cast<__half*>(x16), rows, F, s);
    }
    return kc::silu_mul_rows(gate_up_out, act_out, rows, F, s);
}

Status CudaModel::Impl::gather_logit_rows(const float* x_, int64_t n, float* out) {
    return kc::gather_rows(x_, n, step_->i32(step_->ix.layout.logit_rows), step_->ix.num_logits, out, stream.get());
}

// The router's logits and top-k, the entries grouped by expert, one grouped launch for every
// expert's gate/up and one for its down, the weighted sum in ascending expert id, then the shared
// expert under its sigmoid gate: ops::Backend::moe_mlp in a fixed sequence of launches (no host
// round trip: decode steps stay CUDA graphs).
Status CudaModel::Impl::moe_mlp(const ops::MoeWeights& weights, const ops::MoeParams& p, const float* in, int64_t rows,
                                float* out) {
    const DevMoe& w = static_cast<const DevMoe&>(weights);  // this backend's own layers only
    if (p.act != ops::GatedAct::kSilu || p.observe || !w.gate_up_bias.empty() || w.router_bias)
        return core::error(StatusCode::kUnsupported)
               << "moe_mlp: on CUDA only SiLU experts without biases, and no calibration hooks";
    const int64_t E = w.router_m.rows, H = w.router_m.cols, k = p.top_k, N = rows * k;
    const int64_t Fe = w.experts_down.cols;
    cudaStream_t s = stream.get();
    KILN_RETURN_IF_ERROR(linear(w.router_m, in, rows, nullptr, moe_logits));
    KILN_RETURN_IF_ERROR(kc::moe_route(moe_logits, rows, E, k, p.norm_topk, moe_ids, moe_weights, s));
    KILN_RETURN_IF_ERROR(kc::moe_group(moe_ids, rows, k, E, moe_offsets, moe_entries, moe_slot_pos, s));
    auto stacked = [&](const DevMatrix& m) {
        kc::ExpertMatrices x;
        x.type = m.type == WType::kF32    ? core::DType::kF32
                 : m.type == WType::kBf16 ? core::DType::kBF16
                 : m.type == WType::kF16  ? core::DType::kF16
                                          : m.blocks;
        x.w = m.buf.data();
        x.num_experts = E;
        x.n = m.rows / E;
        x.k = m.cols;
        return x;
    };
    KILN_RETURN_IF_ERROR(
        kc::moe_grouped_matmul(stacked(w.experts_gate_up), in, moe_entries, k, moe_offsets, N, moe_gate_up, s));
    KILN_RETURN_IF_ERROR(kc::silu_mul_rows(moe_gate_up, moe_act, N, Fe, s));
    KILN_RETURN_IF_ERROR(kc::moe_grouped_matmul(stacked(w.experts_down), moe_act, nullptr, k, moe_offsets, N, moe_y, s));
    KILN_RETURN_IF_ERROR(kc::moe_combine(moe_ids, moe_weights, moe_slot_pos, moe_y, rows, k, H, out, s));
    if (!w.shared_gate_up) return Status::ok();
    // The shared expert over every row: the dense MLP's ops, then out += sigmoid(x . gate) * its output.
    KILN_RETURN_IF_ERROR(gated_mlp_up(w.shared_gate_up_m, in, rows, p.act, moe_gate_up, moe_act, &w.shared_down_m));
    KILN_RETURN_IF_ERROR(linear(w.shared_down_m, moe_act, rows, nullptr, moe_y));
    KILN_RETURN_IF_ERROR(linear(w.shared_gate_m, in, rows, nullptr, moe_logits));
    return kc::add_sigmoid_gated_rows(moe_logits, moe_y, rows, H, out, s);
}

Status CudaModel::Impl::softcap(float*, int64_t, float) {
    return core::error(StatusCode::kUnsupported) << "softcap: no CUDA kernel yet";
}

Status CudaModel::Impl::attention(int64_t l, const float* q_in, float* out, const ops::AttentionParams& p) {
    if (p.softcap != 0.0f || p.sinks)
        return core::error(StatusCode::kUnsupported) << "attention: soft-capping and sinks have no CUDA kernel yet";
    const Step& st = *step_;
    const StepIndices& ix = st.ix;
    const StepIndexLayout& lay = ix.layout;
    cudaStream_t s = stream.get();
    // Split-KV queries (decode tokens; every token when prompt chunks cannot be tiled), as many per
    // launch as the workspace holds.
    const int64_t splits =
        st.num_splits > 0 ? st.num_splits : (ix.max_kv_len + kc::kDecodeSplitKeys - 1) / kc::kDecodeSplitKeys;
    const int64_t per_launch = std::clamp<int64_t>(int64_t(attn_ws_rows) / splits, 1, 65535);
    for (int64_t e0 = 0; e0 < ix.num_entries; e0 += per_launch) {
        kc::DecodeAttentionBatch b;
        b.k = k[size_t(l)];
        b.v = v[size_t(l)];
        b.dtype = options.kv_dtype;
        b.block_size = options.block_size;
        b.block_tables = st.i32(lay.tables);
        b.max_blocks_per_seq = ix.blocks_per_seq;
        b.kv_lens = st.i32(lay.entry_lens) + e0;
        b.table_rows = st.i32(lay.entry_seqs) + e0;
        b.q_rows = st.i32(lay.entry_rows) + e0;
        b.num_seqs = std::min(per_launch, ix.num_entries - e0);
        b.num_heads = p.num_heads;
        b.num_kv_heads = p.num_kv_heads;
        b.head_dim = p.head_dim;
        b.window = p.window;
        b.max_kv_len = ix.max_kv_len;
        b.num_splits = st.num_splits;
        KILN_RETURN_IF_ERROR(kc::decode_attention(q_in, b, out, attn_ws, s));
    }
    if (ix.num_tiles == 0) return Status::ok();
    // Prompt chunks on tensor cores.
    kc::PrefillAttentionBatch pb;
    pb.k = k[size_t(l)];
    pb.v = v[size_t(l)];
    pb.block_size = options.block_size;
    pb.block_tables = st.i32(lay.tables);
    pb.max_blocks_per_seq = ix.blocks_per_seq;
    pb.q_starts = st.i32(lay.seq_q0);
    pb.positions0 = st.i32(lay.seq_pos0);
    pb.num_queries = st.i32(lay.seq_tokens);
    pb.tile_seqs = st.i32(lay.tile_seqs);
    pb.tile_q0 = st.i32(lay.tile_q0);
    pb.num_tiles = ix.num_tiles;
    pb.num_heads = p.num_heads;
    pb.num_kv_heads = p.num_kv_heads;
    pb.head_dim = p.head_dim;
    pb.window = p.window;
    return kc::prefill_attention(q_in, pb, out, s);
}

Status CudaModel::Impl::run(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                 std::vector<float>* logits_out, std::vector<int32_t>* ids_out,
                                 const SamplePlan* sample) {
    const ModelConfig& c = config;
    const int64_t bs = options.block_size;
    KILN_RETURN_IF_ERROR(check_forward_batch(c, tokens, seqs, bs, options.num_kv_blocks * bs));
    // The calling thread's current device (the serving engine steps on its own thread).
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
    const int64_t T = int64_t(tokens.size()), S = int64_t(seqs.size());
    int64_t NL = 0, longest = 0;
    for (const BatchSeq& q : seqs) {
        NL += q.num_logits;
        longest = std::max(longest, q.start + q.num_tokens);
    }
    auto over = [](const char* what, int64_t n, int64_t limit) -> Status {
        return core::error(StatusCode::kInvalidArgument)
               << "forward: " << n << " " << what << " exceed the " << limit << " this GPU model was created for";
    };
    if (T > options.max_batch_tokens) return over("tokens", T, options.max_batch_tokens);
    if (S > options.max_seqs) return over("sequences", S, options.max_seqs);
    if (NL > options.max_logits) return over("rows of logits", NL, options.max_logits);
    if (longest > options.max_seq_len) return over("tokens of one sequence", longest, options.max_seq_len);
    if (sample && int64_t(sample->rows.size()) != NL)
        return core::error(StatusCode::kInvalidArgument)
               << "forward: " << sample->rows.size() << " sampling rows for " << NL << " rows of logits";
    if (sample)
        for (const kernels::ref::SampleRow& r : sample->rows)
            if (r.adjust_begin < 0 || r.adjust_count < 0 ||
                int64_t(r.adjust_begin) + r.adjust_count > int64_t(sample->adjust.size()))
                return core::error(StatusCode::kInvalidArgument)
                       << "forward: a sampling row's entries [" << r.adjust_begin << ", +" << r.adjust_count
                       << ") are outside the " << sample->adjust.size() << " given";

    // The step's indices, built in pinned memory; a decode step of a graph bucket is padded to it.
    // A sampled step runs the logits step (its graphs too), then samples.
    const bool greedy = ids_out != nullptr && sample == nullptr;
    const int64_t bucket = graph_bucket(seqs);
    uint8_t* const host = static_cast<uint8_t*>(stage_host.data());
    Step st;
    st.dev = stage_dev;
    if (bucket > 0) {
        pad_tokens.assign(tokens.begin(), tokens.end());
        pad_seqs.assign(seqs.begin(), seqs.end());
        const BatchSeq dummy{0, 1, std::span<const int32_t>(&scratch_block, 1), 1};
        pad_tokens.resize(size_t(bucket), 0);
        pad_seqs.resize(size_t(bucket), dummy);
        st.ix = build_step_indices(pad_tokens, pad_seqs, bs, 0, host, blocks_per_seq);
        st.ix.max_kv_len = options.max_seq_len;  // the attention grid, fixed for the graph
        st.num_splits = graph_splits;
    } else {
        st.ix = build_step_indices(tokens, seqs, bs, tile_queries, host);
    }
    cudaStream_t s = stream.get();
    // Whatever happens below, the step's queued work is waited for before returning: the next step
    // rewrites the pinned staging buffer the copy reads.
    struct SyncOnExit {
        const kc::Stream& stream;
        ~SyncOnExit() { (void)stream.synchronize(); }
    } sync_on_exit{stream};
    if (bucket > 0 && graphs_seen.insert({bucket, greedy}).second) {
        // The first step of a bucket runs eagerly (its GEMM plans and kernels loaded outside a
        // capture); the next one captures the graph.
        KILN_RETURN_IF_ERROR(enqueue(st, greedy));
    } else if (bucket > 0) {
        auto exec = graph_for(bucket, greedy, st);
        if (exec.is_ok()) {
            KILN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(*exec, s));
        } else {  // no graphs from now on; this step runs eagerly
            graphs_off = true;
            graph_error = exec.status().to_string();
            KILN_RETURN_IF_ERROR(enqueue(st, greedy));
        }
    } else {
        KILN_RETURN_IF_ERROR(enqueue(st, greedy));
    }
    const int64_t V = c.vocab_size;
    if (sample) {
        KILN_RETURN_IF_ERROR(sample_on_device(*sample, NL));
        ids_out->resize(size_t(NL));
        std::memcpy(ids_out->data(), ids_host.data(), size_t(NL) * 4);
    } else if (greedy) {
        KILN_RETURN_IF_ERROR(stream.synchronize());
        ids_out->resize(size_t(NL));
        std::memcpy(ids_out->data(), ids_host.data(), size_t(NL) * 4);  // the real rows come first
    } else {
        logits_out->resize(size_t(NL * V));
        if (NL > 0) {
            KILN_CUDA_RETURN_IF_ERROR(
                cudaMemcpyAsync(logits_out->data(), logits, size_t(NL * V) * 4, cudaMemcpyDeviceToHost, s));
        }
        KILN_RETURN_IF_ERROR(stream.synchronize());
    }
    return Status::ok();
}

// After the logits step: the rows and entries to the device (one copy), sample_rows over the
// logits in place, the ids back to ids_host; waits for them.
Status CudaModel::Impl::sample_on_device(const SamplePlan& plan, int64_t num_logits) {
    if (num_logits == 0) return Status::ok();
    const size_t rows_bytes = align16(plan.rows.size_bytes()), bytes = rows_bytes + plan.adjust.size_bytes();
    if (sample_host.bytes() < bytes || sample_dev.bytes() < bytes) {  // nothing of the last step is in flight
        const size_t grown = std::max(bytes, 2 * sample_dev.bytes());
        sample_host = kc::PinnedBuffer();
        sample_dev = kc::DeviceBuffer();
        KILN_ASSIGN_OR_RETURN(sample_host, kc::PinnedBuffer::allocate(grown));
        KILN_ASSIGN_OR_RETURN(sample_dev, kc::DeviceBuffer::allocate(grown));
    }
    uint8_t* host = static_cast<uint8_t*>(sample_host.data());
    std::memcpy(host, plan.rows.data(), plan.rows.size_bytes());
    if (!plan.adjust.empty()) std::memcpy(host + rows_bytes, plan.adjust.data(), plan.adjust.size_bytes());
    cudaStream_t s = stream.get();
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sample_dev.data(), host, bytes, cudaMemcpyHostToDevice, s));
    const uint8_t* dev = sample_dev.as<uint8_t>();
    KILN_RETURN_IF_ERROR(kc::sample_rows(
        logits, num_logits, config.vocab_size, reinterpret_cast<const kernels::ref::SampleRow*>(dev),
        plan.adjust.empty() ? nullptr : reinterpret_cast<const kernels::ref::LogitAdjustment*>(dev + rows_bytes),
        int64_t(plan.adjust.size()), ids, s));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids_host.data(), ids, size_t(num_logits) * 4, cudaMemcpyDeviceToHost, s));
    return stream.synchronize();
}

Status CudaModel::Impl::enqueue(const Step& st, bool greedy) {
    cudaStream_t s = stream.get();
    const int64_t T = st.ix.num_tokens, NL = st.ix.num_logits, V = config.vocab_size;
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(stage_dev, stage_host.data(), st.ix.layout.end, cudaMemcpyHostToDevice, s));
    step_ = &st;
    prepared_ = {};
    const StepBuffers b{x, xn, qkv, q, att, o, gate_up, act, logits};
    const Status done = run_step(*this, config, weights, b, T, NL);
    step_ = nullptr;
    KILN_RETURN_IF_ERROR(done);
    if (!greedy || NL == 0) return Status::ok();
    KILN_RETURN_IF_ERROR(kc::argmax_rows(logits, NL, V, ids, s));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids_host.data(), ids, size_t(NL) * 4, cudaMemcpyDeviceToHost, s));
    return Status::ok();
}

int64_t CudaModel::Impl::graph_bucket(std::span<const BatchSeq> seqs) const {
    if (!options.cuda_graphs || graphs_off || buckets.empty() || int64_t(seqs.size()) > buckets.back()) return 0;
    for (const BatchSeq& q : seqs)
        if (q.num_tokens != 1 || q.num_logits != 1) return 0;
    return *std::lower_bound(buckets.begin(), buckets.end(), int64_t(seqs.size()));
}

core::Result<cudaGraphExec_t> CudaModel::Impl::graph_for(int64_t bucket, bool greedy, const Step& st) {
    const auto key = std::make_pair(bucket, greedy);
    if (auto it = graphs.find(key); it != graphs.end()) return it->second;
    cudaStream_t s = stream.get();
    // Ends the capture on every way out (errors, exceptions) so the stream is usable after, and
    // clears the thread's CUDA error so the eager fallback's first launch check does not see it.
    struct Capture {
        cudaStream_t stream;
        cudaGraph_t graph = nullptr;
        bool active = false;
        ~Capture() {
            if (active) (void)cudaStreamEndCapture(stream, &graph);
            if (graph) (void)cudaGraphDestroy(graph);
            (void)cudaGetLastError();
        }
    } capture{s};
    (void)cudaGetLastError();  // an earlier error must not fail this capture's launch checks
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    capture.active = true;
    const Status queued = enqueue(st, greedy);
    capture.active = false;
    const cudaError_t ended = cudaStreamEndCapture(s, &capture.graph);
    if (!queued.is_ok())
        return core::error(StatusCode::kInternal) << "CUDA graph capture of a decode step: " << queued.message();
    KILN_RETURN_IF_ERROR(kc::cuda_status(ended, "cudaStreamEndCapture"));
    cudaGraphExec_t exec = nullptr;
    KILN_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, capture.graph, 0));
    graphs.emplace(key, exec);
    return exec;
}

core::Status CudaModel::forward_batch(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                           std::vector<float>& logits) {
    return impl_->run(tokens, seqs, &logits, nullptr);
}

core::Status CudaModel::forward_batch_greedy(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                                  std::vector<int32_t>& ids) {
    return impl_->run(tokens, seqs, nullptr, &ids);
}

core::Status CudaModel::forward_batch_sample(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                                                  std::span<const kernels::ref::SampleRow> rows,
                                                  std::span<const kernels::ref::LogitAdjustment> adjust,
                                                  std::vector<int32_t>& ids) {
    const Impl::SamplePlan plan{rows, adjust};
    return impl_->run(tokens, seqs, nullptr, &ids, &plan);
}

core::Status CudaModel::forward(std::span<const int32_t> tokens, int64_t start, bool all_logits,
                                     std::vector<float>& logits) {
    const int64_t T = int64_t(tokens.size());
    if (T == 0) return core::error(StatusCode::kInvalidArgument) << "forward: no tokens";
    const CudaModelOptions& o = impl_->options;
    const int64_t chunk = all_logits ? std::min(o.max_batch_tokens, o.max_logits) : o.max_batch_tokens;
    logits.clear();
    std::vector<float> part;
    for (int64_t off = 0; off < T; off += chunk) {
        const int64_t n = std::min(chunk, T - off);
        const BatchSeq seq{start + off, n, impl_->own_table, all_logits ? n : (off + n == T ? 1 : 0)};
        KILN_RETURN_IF_ERROR(
            impl_->run(tokens.subspan(size_t(off), size_t(n)), std::span<const BatchSeq>(&seq, 1), &part, nullptr));
        logits.insert(logits.end(), part.begin(), part.end());
    }
    return Status::ok();
}

}  // namespace kiln::model
