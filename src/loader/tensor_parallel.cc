// tp_slice: which tensors split how (tensor_parallel.h), then row views and column copies.
#include "loader/tensor_parallel.h"

#include <cstring>
#include <map>

#include "loader/layer_tensors.h"

namespace kiln::loader {
namespace {

using core::StatusCode;

enum class Split { kQRows, kKvRows, kQCols, kFfnRows, kFfnCols, kRank0 };

// Rows [r0, r0 + n) of a 1-D or 2-D tensor, as a view of its bytes.
TensorRef rows_of(const TensorRef& t, uint64_t r0, uint64_t n) {
    const uint64_t row_bytes = t.num_bytes / t.shape[0];
    TensorRef out = t;
    out.shape[0] = n;
    out.data = t.data + r0 * row_bytes;
    out.num_bytes = n * row_bytes;
    if (t.row_scale) out.row_scale = t.row_scale + r0;
    return out;
}

// Columns [c0, c0 + n) of a 2-D tensor, copied: whole blocks of its type when the cut falls on block
// boundaries, else decoded to f32.
core::Result<TensorRef> cols_of(const TensorRef& t, uint64_t c0, uint64_t n, std::vector<std::shared_ptr<const void>>* owners) {
    const uint64_t rows = t.shape[0], cols = t.shape[1];
    const core::DTypeInfo& info = core::dtype_info(t.dtype);
    TensorRef out = t;
    out.shape[1] = n;
    out.storage.reset();
    if (c0 % info.block_size == 0 && n % info.block_size == 0) {
        const uint64_t row_bytes = t.num_bytes / rows, bytes = n / info.block_size * info.block_bytes,
                       skip = c0 / info.block_size * info.block_bytes;
        auto buf = std::make_shared<std::vector<uint8_t>>(rows * bytes);
        for (uint64_t r = 0; r < rows; ++r) std::memcpy(buf->data() + r * bytes, t.data + r * row_bytes + skip, bytes);
        out.data = buf->data();
        out.num_bytes = buf->size();
        owners->push_back(std::move(buf));
        return out;
    }
    std::vector<float> whole = std::vector<float>(size_t(rows * cols));
    KILN_RETURN_IF_ERROR(dequantize_tensor_to(t, whole.data()));
    auto buf = std::make_shared<std::vector<float>>(size_t(rows * n));
    for (uint64_t r = 0; r < rows; ++r)
        std::memcpy(buf->data() + r * n, whole.data() + r * cols + c0, size_t(n) * sizeof(float));
    out.dtype = core::DType::kF32;
    out.row_scale = nullptr;
    out.data = reinterpret_cast<const uint8_t*>(buf->data());
    out.num_bytes = buf->size() * sizeof(float);
    owners->push_back(std::move(buf));
    return out;
}

}  // namespace

int64_t ep_expert_begin(int64_t num_experts, int rank, int size) {
    return (int64_t(rank) * num_experts + size - 1) / size;  // ceil: the larger runs first
}

core::Result<TpShare> tp_share(const ModelConfig& c, int rank, int size, int64_t ffn_block) {
    if (size < 1 || rank < 0 || rank >= size)
        return core::error(StatusCode::kInvalidArgument) << "tensor parallelism: rank " << rank << " of " << size;
    const int64_t nh = c.num_heads, nkv = c.num_kv_heads, group = nh / nkv, n = size, r = rank;
    TpShare s;
    if (c.qk_norm_full)
        return core::error(StatusCode::kInvalidArgument)
               << "tensor parallelism over q/k norms that span all heads (OLMoE) is not supported yet";
    if (n <= nkv) {  // runs of ceil or floor(nkv / n), the larger first: rank 0, whose row size sizes
                     // every rank's KV pool, holds the most
        s.kv_head_begin = (r * nkv + n - 1) / n;
        s.num_kv_heads = ((r + 1) * nkv + n - 1) / n - s.kv_head_begin;
        s.q_head_begin = s.kv_head_begin * group;
        s.num_heads = s.num_kv_heads * group;
    } else {
        if (n % nkv != 0 || n > nh)
            return core::error(StatusCode::kInvalidArgument)
                   << "tensor parallelism " << n << " over " << nkv << " KV heads and " << nh
                   << " query heads: with more ranks than KV heads the size must be a multiple of the KV heads and "
                      "at most the query heads";
        const int64_t per = n / nkv, j = r % per;
        s.kv_head_begin = r / per;
        s.num_kv_heads = 1;
        s.q_head_begin = s.kv_head_begin * group + j * group / per;
        s.num_heads = s.kv_head_begin * group + (j + 1) * group / per - s.q_head_begin;
    }
    if (c.moe()) {  // expert parallelism: the experts in runs, the larger first; the MLP units stay whole
        if (n > c.num_experts)
            return core::error(StatusCode::kInvalidArgument)
                   << "expert parallelism " << n << " over " << c.num_experts << " experts: more ranks than experts";
        s.expert_begin = ep_expert_begin(c.num_experts, rank, size);
        s.num_experts = ep_expert_begin(c.num_experts, rank + 1, size) - s.expert_begin;
        s.ffn_size = c.intermediate_size;
    }
    if (!c.moe()) {
        const int64_t units = c.intermediate_size / ffn_block;
        if (c.intermediate_size % ffn_block != 0 || units < n)
            return core::error(StatusCode::kInvalidArgument)
                   << "tensor parallelism " << n << ": the MLP's " << c.intermediate_size << " hidden units are "
                   << units << " blocks of " << ffn_block << ", fewer than the ranks";
        s.ffn_begin = r * units / n * ffn_block;
        s.ffn_size = (r + 1) * units / n * ffn_block - s.ffn_begin;
    }
    const int64_t per = (c.vocab_size + n - 1) / n;
    s.vocab_begin = r * per;
    s.vocab_size = std::min(per, c.vocab_size - s.vocab_begin);
    if (s.vocab_size < 1)
        return core::error(StatusCode::kInvalidArgument)
               << "tensor parallelism " << n << " over a vocabulary of " << c.vocab_size << " tokens";
    return s;
}

core::Result<Checkpoint> tp_slice(const Checkpoint& ck, int rank, int size) {
    if (size == 1 && rank == 0) return ck;
    const ModelConfig& c = ck.config;
    int64_t ffn_block = 1;
    for (int64_t l = c.stage_begin; l < c.stage_end() && !c.moe(); ++l)  // every layer's ffn_down: the widest block
        if (const TensorRef* down = ck.find(layer_tensor_name(l, LayerTensor::kDown)))
            ffn_block = std::max<int64_t>(ffn_block, core::dtype_info(down->dtype).block_size);
    KILN_ASSIGN_OR_RETURN(const TpShare s, tp_share(c, rank, size, ffn_block));
    std::map<std::string, Split> split;
    for (int64_t l = c.stage_begin; l < c.stage_end(); ++l) {  // a pipeline stage's layers only
        auto add = [&](LayerTensor t, Split how) {
            if (layer_tensor_present(c, t)) split[layer_tensor_name(l, t)] = how;
        };
        add(LayerTensor::kQ, Split::kQRows);
        add(LayerTensor::kQBias, Split::kQRows);
        add(LayerTensor::kAttnSinks, Split::kQRows);
        add(LayerTensor::kK, Split::kKvRows);
        add(LayerTensor::kKBias, Split::kKvRows);
        add(LayerTensor::kV, Split::kKvRows);
        add(LayerTensor::kVBias, Split::kKvRows);
        add(LayerTensor::kO, Split::kQCols);
        add(LayerTensor::kOBias, Split::kRank0);
        add(LayerTensor::kGate, Split::kFfnRows);
        add(LayerTensor::kUp, Split::kFfnRows);
        add(LayerTensor::kDown, Split::kFfnCols);
    }
    Checkpoint out = ck;
    // The output layer's rows: a view, tied or not (a tied model's becomes an output.weight of its own).
    // A pipeline stage before the last has none.
    if (c.last_stage()) {
    const TensorRef* output = ck.find(c.tie_word_embeddings ? "token_embd.weight" : "output.weight");
    if (!output || output->shape.size() != 2 || output->shape[0] != uint64_t(c.vocab_size))
        return core::error(StatusCode::kCorrupt) << "tensor parallelism: no output layer of " << c.vocab_size << " rows";
    TensorRef out_rows = rows_of(*output, uint64_t(s.vocab_begin), uint64_t(s.vocab_size));
    out_rows.name = "output.weight";
    if (c.tie_word_embeddings) {
        out.tensors.push_back(out_rows);
    } else {
        for (TensorRef& t : out.tensors)
            if (t.name == "output.weight") t = out_rows;
    }
    out.config.tie_word_embeddings = false;
    out.config.output_row_begin = s.vocab_begin;
    out.config.output_rows = s.vocab_size;
    if (!c.first_stage())  // the last stage of a pipeline needed the embeddings for the tied output only
        std::erase_if(out.tensors, [](const TensorRef& t) { return t.name == "token_embd.weight"; });
    }
    // The token embeddings, vocabulary-parallel: the same rows as the output layer's share.
    if (c.first_stage()) {
        for (TensorRef& t : out.tensors)
            if (t.name == "token_embd.weight") {
                if (t.shape.size() != 2 || t.shape[0] != uint64_t(c.vocab_size))
                    return core::error(StatusCode::kCorrupt) << "tensor parallelism: token_embd is not " << c.vocab_size << " rows";
                t = rows_of(t, uint64_t(s.vocab_begin), uint64_t(s.vocab_size));
            }
        out.config.embed_row_begin = s.vocab_begin;
        out.config.embed_rows = s.vocab_size;
    }
    out.config.num_heads = s.num_heads;
    out.config.num_kv_heads = s.num_kv_heads;
    out.config.intermediate_size = s.ffn_size;
    if (c.moe()) {  // this rank's experts only
        out.config.expert_begin = s.expert_begin;
        out.config.expert_end_id = s.expert_begin + s.num_experts;
        std::erase_if(out.tensors, [&](const TensorRef& t) {
            const auto e = parse_expert_tensor_name(t.name);
            return e && !out.config.has_expert(e->expert);
        });
    }
    const uint64_t hd = uint64_t(c.head_dim);
    for (TensorRef& t : out.tensors) {
        auto it = split.find(t.name);
        if (it == split.end()) continue;
        if (t.shape.empty() || t.shape[0] == 0)
            return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' has no rows to split";
        // rows per head: head_dim, or 1 for the attention sinks ([num_heads])
        const uint64_t per_head = t.shape[0] == uint64_t(c.num_heads) ? 1 : hd;
        switch (it->second) {
            case Split::kQRows: t = rows_of(t, uint64_t(s.q_head_begin) * per_head, uint64_t(s.num_heads) * per_head); break;
            case Split::kKvRows: t = rows_of(t, uint64_t(s.kv_head_begin) * hd, uint64_t(s.num_kv_heads) * hd); break;
            case Split::kFfnRows: t = rows_of(t, uint64_t(s.ffn_begin), uint64_t(s.ffn_size)); break;
            case Split::kQCols: {
                KILN_ASSIGN_OR_RETURN(t, cols_of(t, uint64_t(s.q_head_begin) * hd, uint64_t(s.num_heads) * hd, &out.owners));
                break;
            }
            case Split::kFfnCols: {
                KILN_ASSIGN_OR_RETURN(t, cols_of(t, uint64_t(s.ffn_begin), uint64_t(s.ffn_size), &out.owners));
                break;
            }
            case Split::kRank0:
                if (rank != 0) {  // the bias is added once, by rank 0's partial sum
                    auto zeros = std::make_shared<std::vector<float>>(size_t(t.num_elements()), 0.0f);
                    t.dtype = core::DType::kF32;
                    t.data = reinterpret_cast<const uint8_t*>(zeros->data());
                    t.num_bytes = zeros->size() * sizeof(float);
                    t.storage.reset();
                    out.owners.push_back(std::move(zeros));
                }
                break;
        }
    }
    KILN_RETURN_IF_ERROR(out.config.validate());
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(out));
    return out;
}

}  // namespace kiln::loader
