// Checkpoint loading for GGUF, HF safetensors and llama2.c (see checkpoint.h).
#include "loader/checkpoint.h"
#include "formats/architectures.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "core/bytes.h"
#include "core/check.h"
#include "core/huge_pages.h"
#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"
#include "kernels/ref/dequant.h"
#include "loader/compressed_tensors.h"
#include "loader/layer_tensors.h"
#include "loader/weight_names.h"

namespace kiln::loader {
namespace {

namespace fs = std::filesystem;
using core::StatusCode;

using core::ends_with;
using core::shape_string;

// Adds `t` to the checkpoint, with its Q/K rows moved from rotate-half into interleaved order first
// when `rope_heads` > 0 (weight_names.h).
core::Status add_tensor(Checkpoint* ck, std::set<std::string>* names, TensorRef t, int64_t rope_heads) {
    if (!names->insert(t.name).second)
        return core::error(StatusCode::kCorrupt) << ck->path << ": two tensors map to the name '" << t.name << "'";
    if (rope_heads > 0) {
        std::vector<std::shared_ptr<const void>> buffers;  // the rows', then any row scales'
        auto permuted = permute_tensor(t, rope_heads, RopeOrder::kInterleaved, &buffers);
        if (!permuted.is_ok())
            return core::error(StatusCode::kCorrupt) << ck->path << ": " << permuted.status().message();
        t = std::move(permuted).value();
        t.storage = buffers[0];  // the tensor owns its permuted rows (freed with it, or once packed)
        ck->owners.insert(ck->owners.end(), buffers.begin() + 1, buffers.end());
    }
    ck->tensors.push_back(std::move(t));
    return core::Status::ok();
}

bool is_plain_float(core::DType t) {
    return t == core::DType::kF32 || t == core::DType::kF16 || t == core::DType::kBF16;
}

}  // namespace

uint64_t TensorRef::num_elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
}

const TensorRef* Checkpoint::find(const std::string& name) const {
    for (const TensorRef& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

const formats::GgufValue* Checkpoint::find_metadata(const std::string& key) const {
    for (const auto& [k, v] : gguf_metadata)
        if (k == key) return &v;
    return nullptr;
}

uint64_t Checkpoint::num_params() const {
    uint64_t n = 0;
    for (const TensorRef& t : tensors) n += t.num_elements();
    return n;
}

bool matrix_dtype_supported(const TensorRef& t) {
    return kernels::ref::dequant_supported(t.dtype) || (t.dtype == core::DType::kI8 && t.row_scale);
}

kernels::ref::WeightView weight_view_of(const TensorRef& t) {
    KILN_CHECK(t.shape.size() == 2) << "weight_view_of: '" << t.name << "' is not a matrix";
    kernels::ref::WeightView w =
        kernels::ref::make_weight_view(t.data, t.dtype, int64_t(t.shape[0]), int64_t(t.shape[1]));
    w.row_scale = t.row_scale;
    return w;
}

core::Status dequantize_tensor_to(const TensorRef& t, float* dst) {
    if (t.dtype != core::DType::kI8 || !t.row_scale)
        return kernels::ref::dequantize_row(t.dtype, t.data, dst, int64_t(t.num_elements()));
    if (t.shape.size() != 2 || t.num_bytes != t.num_elements())
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "': I8 data of the wrong shape or size";
    const kernels::ref::WeightView w = weight_view_of(t);
    for (int64_t r = 0; r < w.rows; ++r) kernels::ref::weight_row(w, r, dst + r * w.cols);
    return core::Status::ok();
}

core::Result<TensorRef> permute_tensor(const TensorRef& t, int64_t num_heads, RopeOrder to,
                                       std::vector<std::shared_ptr<const void>>* owners) {
    if (t.shape.empty() || t.shape[0] == 0 || t.num_bytes % t.shape[0] != 0)
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' of shape " << shape_string(t.shape)
                                                 << " cannot be split into rows for the RoPE permutation";
    auto buf = std::make_shared<std::vector<uint8_t>>(t.num_bytes);
    core::Status st =
        permute_rope_rows(t.data, buf->data(), t.shape[0], t.num_bytes / t.shape[0], uint64_t(num_heads), to);
    if (!st.is_ok()) return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "': " << st.message();
    TensorRef out = t;
    out.data = buf->data();
    out.storage.reset();  // out's bytes live in `owners`
    owners->push_back(std::move(buf));
    if (t.row_scale) {  // the scales follow their rows
        auto sc = std::make_shared<std::vector<float>>(size_t(t.shape[0]));
        st = permute_rope_rows(reinterpret_cast<const uint8_t*>(t.row_scale), reinterpret_cast<uint8_t*>(sc->data()),
                               t.shape[0], sizeof(float), uint64_t(num_heads), to);
        if (!st.is_ok()) return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "': " << st.message();
        out.row_scale = sc->data();
        owners->push_back(std::move(sc));
    }
    return out;
}

// Rows [r0, r0 + shape[0]) of `t` (row_bytes each; a 1-D shape is one row) as a tensor of its own:
// a view of the same bytes.
static TensorRef row_view(const TensorRef& t, std::string name, std::vector<uint64_t> shape, uint64_t r0,
                          uint64_t row_bytes) {
    TensorRef part = t;
    part.name = std::move(name);
    part.data = t.data + r0 * row_bytes;
    part.num_bytes = (shape.size() == 1 ? 1 : shape[0]) * row_bytes;
    part.shape = std::move(shape);
    if (t.row_scale) part.row_scale = t.row_scale + r0;
    return part;
}

// A tensor of `dtype` holding `buf` (converted at load), which is appended to `owners`.
static TensorRef owned_tensor(std::string name, core::DType dtype, std::vector<uint64_t> shape,
                              std::shared_ptr<std::vector<uint8_t>> buf, std::vector<std::shared_ptr<const void>>* owners) {
    TensorRef t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = buf->data();
    t.num_bytes = buf->size();
    owners->push_back(std::move(buf));
    return t;
}

static core::Result<std::vector<TensorRef>> split_experts(TensorRef t, const ModelConfig& c, const std::string& what,
                                                          const std::string& prefix,
                                                          std::vector<std::shared_ptr<const void>>* owners);

// A fused projection as kiln's separate tensors: row ranges of the same bytes (no copy). Phi-3's
// attn_qkv ([Q | KV | KV] rows) and its gate_up (HF) / llama.cpp's ffn_up of 2F rows ([gate | up]);
// stacked experts (split_experts); HF's [1, H] shared-expert gate as kiln's [H]; any other tensor
// comes back alone.
static core::Result<std::vector<TensorRef>> split_fused(TensorRef t, const ModelConfig& c,
                                                        std::vector<std::shared_ptr<const void>>* owners) {
    const size_t dot = t.name.size() < 8 ? std::string::npos : t.name.rfind('.', t.name.size() - 8);  // "blk.N."
    const std::string what = dot == std::string::npos ? "" : t.name.substr(dot + 1);
    if (what.ends_with("_exps.weight") || what.ends_with("_exps_oss.weight") || what.ends_with("_exps.bias") ||
        what.ends_with("_exps_oss.bias")) {
        const std::string prefix = t.name.substr(0, dot + 1);
        return split_experts(std::move(t), c, what, prefix, owners);
    }
    if (what == "ffn_gate_inp_shexp.weight" && t.shape.size() == 2 && t.shape[0] == 1) {  // HF's [1, H] Linear
        t.shape = {t.shape[1]};
        return std::vector<TensorRef>{std::move(t)};
    }
    std::vector<std::pair<std::string, int64_t>> parts;  // name suffix, rows
    const int64_t Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
    if (what == "attn_qkv.weight") {
        parts = {{"attn_q.weight", Q}, {"attn_k.weight", KV}, {"attn_v.weight", KV}};
    } else if (what == "ffn_gate_up.weight" || (c.arch == "phi3" && what == "ffn_up.weight" && !t.shape.empty() &&
                                                 t.shape[0] == uint64_t(2 * F))) {
        parts = {{"ffn_gate.weight", F}, {"ffn_up.weight", F}};
    } else {
        return std::vector<TensorRef>{std::move(t)};
    }
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    if (t.shape.size() != 2 || t.shape[0] != uint64_t(rows) || t.num_bytes % uint64_t(rows) != 0)
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' has shape " << shape_string(t.shape)
                                                 << ", expected [" << rows << ", " << c.hidden_size << "] (fused)";
    const uint64_t row_bytes = t.num_bytes / uint64_t(rows);
    const std::string prefix = t.name.substr(0, dot + 1);
    std::vector<TensorRef> out;
    int64_t r0 = 0;
    for (const auto& [suffix, n] : parts) {
        out.push_back(row_view(t, prefix + suffix, {uint64_t(n), t.shape[1]}, uint64_t(r0), row_bytes));
        r0 += n;
    }
    return out;
}

// gpt-oss's transformers layout, input-major: per expert [cols_in, rows_out * parts] with the parts'
// columns interleaved (gate, up, gate, up, ...), copied out as each part's [rows_out, cols_in] rows.
static core::Result<std::vector<TensorRef>> split_oss_experts(const TensorRef& t, const ModelConfig& c, bool gate_up,
                                                              const std::string& prefix,
                                                              std::vector<std::shared_ptr<const void>>* owners) {
    const int64_t E = c.num_experts, F = c.expert_intermediate_size, H = c.hidden_size;
    const uint64_t in = uint64_t(gate_up ? H : F), out_cols = uint64_t(gate_up ? 2 * F : H);
    const size_t es = t.dtype == core::DType::kF32 ? 4 : t.dtype == core::DType::kBF16 || t.dtype == core::DType::kF16 ? 2 : 0;
    if (es == 0 || t.row_scale)
        return core::error(StatusCode::kUnsupported) << "tensor '" << t.name << "': gpt-oss experts of type "
                                                     << core::dtype_name(t.dtype) << " (supported: f32, f16, bf16)";
    if (t.shape != std::vector<uint64_t>{uint64_t(E), in, out_cols} || t.num_bytes != uint64_t(E) * in * out_cols * es)
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' has shape " << shape_string(t.shape)
                                                 << ", expected [" << E << ", " << in << ", " << out_cols << "]";
    const int64_t parts = gate_up ? 2 : 1;
    const uint64_t rows = out_cols / uint64_t(parts);
    std::vector<TensorRef> out;
    for (int64_t e = 0; e < E; ++e) {
        const uint8_t* src = t.data + uint64_t(e) * in * out_cols * es;
        for (int64_t part = 0; part < parts; ++part) {
            auto buf = std::make_shared<std::vector<uint8_t>>(rows * in * es);
            for (uint64_t r = 0; r < rows; ++r)
                for (uint64_t i = 0; i < in; ++i)
                    std::memcpy(buf->data() + (r * in + i) * es, src + (i * out_cols + r * uint64_t(parts) + uint64_t(part)) * es, es);
            out.push_back(owned_tensor(
                prefix + (gate_up ? (part == 0 ? "ffn_gate." : "ffn_up.") : "ffn_down.") + std::to_string(e) + ".weight",
                t.dtype, {rows, in}, std::move(buf), owners));
        }
    }
    return out;
}

// gpt-oss's experts as published (transformers' Mxfp4GptOssExperts): model.layers.N.mlp.experts.
// {gate_up,down}_proj_blocks [E, rows, cols / 32, 16] U8 with _scales [E, rows, cols / 32] E8M0,
// output-major, gate_up's rows interleaved (gate, up, gate, ...); element 2i of a block is byte i's
// low nibble, 2i + 1 its high one. Repacked into ggml MXFP4 blocks (e | qs[16], qs[j] = element j
// | element j + 16 << 4) as kiln's per-expert tensors.
static core::Result<std::vector<TensorRef>> oss_mxfp4_experts(const formats::SafetensorsSet& st, size_t blocks_idx,
                                                              const ModelConfig& c,
                                                              std::vector<std::shared_ptr<const void>>* owners) {
    const formats::SafetensorsTensorInfo& bi = st.tensor(blocks_idx);
    const std::string base = bi.name.substr(0, bi.name.size() - std::strlen("_blocks"));
    const formats::SafetensorsTensorInfo* si = st.find_tensor(base + "_scales");
    const bool gate_up = base.ends_with(".mlp.experts.gate_up_proj"), down = base.ends_with(".mlp.experts.down_proj");
    const std::string layer = base.starts_with("model.layers.") ? base.substr(13, base.find('.', 13) - 13) : "";
    if (!si || (!gate_up && !down) || layer.empty() || layer.size() > 6 ||
        layer.find_first_not_of("0123456789") != std::string::npos)
        return core::error(StatusCode::kUnsupported) << "tensor '" << bi.name << "': not gpt-oss's MXFP4 expert "
                                                     << "blocks with their _scales";
    const uint64_t E = uint64_t(c.num_experts), F = uint64_t(c.expert_intermediate_size), H = uint64_t(c.hidden_size);
    const uint64_t rows = gate_up ? 2 * F : H, cols = gate_up ? H : F, G = cols / 32;
    if (cols % 32 != 0 || bi.dtype != core::DType::kU8 || si->dtype != core::DType::kU8 ||
        bi.shape != std::vector<uint64_t>{E, rows, G, 16} || si->shape != std::vector<uint64_t>{E, rows, G})
        return core::error(StatusCode::kCorrupt) << "tensors '" << bi.name << "' " << shape_string(bi.shape) << " and '"
                                                 << si->name << "' " << shape_string(si->shape) << ": expected U8 ["
                                                 << E << ", " << rows << ", " << G << ", 16] and [" << E << ", " << rows
                                                 << ", " << G << "]";
    const uint8_t* blocks = st.find_data(bi.name);
    const uint8_t* scales = st.find_data(si->name);
    const std::string prefix = "blk." + layer + ".";
    const uint64_t parts = gate_up ? 2 : 1, part_rows = rows / parts, row_bytes = G * 17;
    std::vector<TensorRef> out;
    for (uint64_t e = 0; e < E; ++e) {
        for (uint64_t part = 0; part < parts; ++part) {
            auto buf = std::make_shared<std::vector<uint8_t>>(part_rows * row_bytes);
            for (uint64_t r = 0; r < part_rows; ++r) {
                const uint64_t src_row = e * rows + r * parts + part;
                for (uint64_t g = 0; g < G; ++g) {
                    const uint8_t* in = blocks + (src_row * G + g) * 16;
                    uint8_t* o = buf->data() + r * row_bytes + g * 17;
                    uint8_t elem[32];
                    for (int i = 0; i < 16; ++i) elem[2 * i] = in[i] & 15, elem[2 * i + 1] = in[i] >> 4;
                    o[0] = scales[src_row * G + g];
                    for (int j = 0; j < 16; ++j) o[1 + j] = uint8_t(elem[j] | (elem[j + 16] << 4));
                }
            }
            out.push_back(owned_tensor(
                prefix + (gate_up ? (part == 0 ? "ffn_gate." : "ffn_up.") : "ffn_down.") + std::to_string(e) + ".weight",
                core::DType::kMxfp4, {part_rows, cols}, std::move(buf), owners));
        }
    }
    // The blocks were read once, here: their file pages need not stay resident.
    core::release_mapped_pages(blocks, size_t(bi.num_bytes));
    core::release_mapped_pages(scales, size_t(si->num_bytes));
    return out;
}

// Stacked expert biases [E, n] as per-expert [n] vectors (views); gpt-oss's gate_up bias [E, 2F]
// (gate and up interleaved) copied out as the gate's and the up's.
static core::Result<std::vector<TensorRef>> split_expert_biases(const TensorRef& t, const ModelConfig& c,
                                                                const std::string& what, const std::string& prefix,
                                                                std::vector<std::shared_ptr<const void>>* owners) {
    const int64_t E = c.num_experts, F = c.expert_intermediate_size, H = c.hidden_size;
    const bool interleaved = what == "ffn_gate_up_exps_oss.bias";
    const std::string stem = what.substr(0, what.find("_exps"));  // ffn_gate, ffn_up, ffn_down
    const uint64_t n = uint64_t(interleaved ? 2 * F : stem == "ffn_down" ? H : F);
    const size_t es = core::dtype_bytes(t.dtype, 1).value_or(0);
    if ((stem != "ffn_gate" && stem != "ffn_up" && stem != "ffn_down" && !interleaved) || es == 0 ||
        core::dtype_info(t.dtype).is_quantized || t.shape != std::vector<uint64_t>{uint64_t(E), n} ||
        t.num_bytes != uint64_t(E) * n * es)
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' (" << core::dtype_name(t.dtype) << " "
                                                 << shape_string(t.shape) << ") is not [" << E << ", " << n
                                                 << "] expert biases";
    std::vector<TensorRef> out;
    for (int64_t e = 0; e < E; ++e) {
        const uint8_t* src = t.data + uint64_t(e) * n * es;
        if (!interleaved) {
            out.push_back(row_view(t, prefix + stem + "." + std::to_string(e) + ".bias", {n}, uint64_t(e), n * es));
            continue;
        }
        for (int part = 0; part < 2; ++part) {
            auto buf = std::make_shared<std::vector<uint8_t>>(size_t(F) * es);
            for (int64_t i = 0; i < F; ++i) std::memcpy(buf->data() + size_t(i) * es, src + size_t(2 * i + part) * es, es);
            out.push_back(owned_tensor(prefix + (part == 0 ? "ffn_gate." : "ffn_up.") + std::to_string(e) + ".bias",
                                       t.dtype, {uint64_t(F)}, std::move(buf), owners));
        }
    }
    return out;
}

// Stacked experts as kiln's per-expert tensors: GGUF's ffn_{gate,up,down}_exps [E, rows, cols] and
// transformers' fused gate_up_proj [E, 2F, H] (each expert's gate rows, then its up rows) as row
// views (no copy) -> blk.N.ffn_{gate,up,down}.E.weight; biases and gpt-oss's layouts above.
static core::Result<std::vector<TensorRef>> split_experts(TensorRef t, const ModelConfig& c, const std::string& what,
                                                          const std::string& prefix,
                                                          std::vector<std::shared_ptr<const void>>* owners) {
    if (what.ends_with(".bias")) return split_expert_biases(t, c, what, prefix, owners);
    if (what == "ffn_gate_up_exps_oss.weight") return split_oss_experts(t, c, true, prefix, owners);
    if (what == "ffn_down_exps_oss.weight") return split_oss_experts(t, c, false, prefix, owners);
    const int64_t E = c.num_experts, F = c.expert_intermediate_size, H = c.hidden_size;
    std::vector<std::pair<std::string, int64_t>> parts;  // per expert: name stem, rows
    int64_t cols = H;
    if (what == "ffn_gate_exps.weight") {
        parts = {{"ffn_gate", F}};
    } else if (what == "ffn_up_exps.weight") {
        parts = {{"ffn_up", F}};
    } else if (what == "ffn_down_exps.weight") {
        parts = {{"ffn_down", H}};
        cols = F;
    } else if (what == "ffn_gate_up_exps.weight") {
        parts = {{"ffn_gate", F}, {"ffn_up", F}};
    } else {
        return std::vector<TensorRef>{std::move(t)};
    }
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    if (E <= 0 || t.shape.size() != 3 || t.shape[0] != uint64_t(E) || t.shape[1] != uint64_t(rows) ||
        t.shape[2] != uint64_t(cols) || t.num_bytes % uint64_t(E * rows) != 0)
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' has shape " << shape_string(t.shape)
                                                 << ", expected [" << E << ", " << rows << ", " << cols << "] (experts)";
    const uint64_t row_bytes = t.num_bytes / uint64_t(E * rows);
    std::vector<TensorRef> out;
    for (int64_t e = 0; e < E; ++e) {
        int64_t r0 = e * rows;
        for (const auto& [stem, n] : parts) {
            out.push_back(row_view(t, prefix + stem + "." + std::to_string(e) + ".weight", {uint64_t(n), uint64_t(cols)},
                                   uint64_t(r0), row_bytes));
            r0 += n;
        }
    }
    return out;
}

// An f32 copy of a norm weight with 1 added to every element (Gemma's 1 + w).
static core::Result<TensorRef> shift_norm_weight(const TensorRef& t, std::vector<std::shared_ptr<const void>>* owners) {
    const uint64_t n = t.num_elements();
    if (t.shape.size() != 1 || core::dtype_bytes(t.dtype, n) != t.num_bytes)
        return core::error(StatusCode::kCorrupt) << "tensor '" << t.name << "' of shape " << shape_string(t.shape)
                                                 << " is not a norm weight vector";
    auto buf = std::make_shared<std::vector<float>>(size_t(n));
    KILN_RETURN_IF_ERROR(kernels::ref::dequantize_row(t.dtype, t.data, buf->data(), int64_t(n)));
    for (float& v : *buf) v += 1.0f;
    TensorRef out = t;
    out.dtype = core::DType::kF32;
    out.data = reinterpret_cast<const uint8_t*>(buf->data());
    out.num_bytes = n * 4;
    out.storage.reset();
    owners->push_back(std::move(buf));
    return out;
}

core::Result<Checkpoint> load_gguf_checkpoint(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
    auto gguf = std::make_shared<formats::GgufFile>(std::move(file));
    Checkpoint ck;
    ck.format = "gguf";
    ck.path = path;
    ck.owners.push_back(gguf);
    ck.gguf = gguf;
    KILN_ASSIGN_OR_RETURN(ck.config, config_from_gguf(*gguf));
    const std::string arch = gguf->get_string("general.architecture").value_or("");
    const bool neox = gguf_arch_uses_neox_rope(arch);
    std::set<std::string> names;
    for (const formats::GgufTensorInfo& info : gguf->tensors()) {
        TensorRef t{info.name, info.dtype, info.shape, gguf->tensor_data(info), info.num_bytes, nullptr, {}};
        t.name = gguf_to_canonical_name(t.name, ck.config);
        KILN_ASSIGN_OR_RETURN(std::vector<TensorRef> parts, split_fused(std::move(t), ck.config, &ck.owners));
        for (TensorRef& part : parts) {
            const int64_t heads = neox ? rope_permute_heads(part.name, ck.config) : 0;
            KILN_RETURN_IF_ERROR(add_tensor(&ck, &names, std::move(part), heads));
        }
    }
    for (const std::string& key : gguf->keys()) {
        if (key == "general.architecture" || key == "general.alignment" || key.rfind(arch + ".", 0) == 0) continue;
        ck.gguf_metadata.emplace_back(key, *gguf->find(key));
    }
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(ck));
    return ck;
}

core::Result<Checkpoint> load_hf_checkpoint(const std::string& path) {
    std::error_code ec;
    fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
    fs::path config_path = dir / "config.json";
    if (!fs::exists(config_path, ec))
        return core::error(StatusCode::kNotFound) << path << ": no config.json in " << dir.string()
                                                  << " (an HF checkpoint needs it for the hyper-parameters)";
    KILN_ASSIGN_OR_RETURN(formats::HfConfig hf, formats::load_hf_config(config_path.string()));
    Checkpoint ck;
    ck.format = "safetensors";
    ck.path = path;
    KILN_ASSIGN_OR_RETURN(ck.config, config_from_hf(hf));
    KILN_ASSIGN_OR_RETURN(formats::SafetensorsSet set, formats::SafetensorsSet::open(path));
    auto st = std::make_shared<formats::SafetensorsSet>(std::move(set));
    ck.owners.push_back(st);
    KILN_ASSIGN_OR_RETURN(std::optional<CompressedConfig> quantized, read_quantization_config(config_path.string()));
    // compressed-tensors: the parts of each quantized Linear, by module (compressed_tensors.h).
    std::map<std::string, std::map<std::string, TensorPart>> modules;
    if (quantized) {
        for (size_t i = 0; i < st->num_tensors(); ++i) {
            const formats::SafetensorsTensorInfo& info = st->tensor(i);
            TensorPart p{info.dtype, info.shape, st->tensor_data(i), info.num_bytes};
            if (auto split = split_quant_part(info.name)) {
                modules[split->first][split->second] = p;
            } else if (info.name.size() > 7 && info.name.ends_with(".weight")) {
                modules[info.name.substr(0, info.name.size() - 7)]["weight"] = p;
            }
        }
        for (auto it = modules.begin(); it != modules.end();)  // a module is quantized when it has scales
            it = it->second.count("weight_scale") || it->second.count("scales") ? std::next(it) : modules.erase(it);
    }
    std::set<std::string> names;
    for (size_t i = 0; i < st->num_tensors(); ++i) {
        const formats::SafetensorsTensorInfo& info = st->tensor(i);
        if (is_hf_ignored_tensor(info.name)) continue;
        if (ck.config.arch == "gpt_oss" && (info.name.ends_with("_blocks") || info.name.ends_with("_scales"))) {
            // gpt-oss's experts as OpenAI publishes them: MXFP4 blocks and their scales, read as a pair.
            if (info.name.ends_with("_scales")) continue;
            KILN_ASSIGN_OR_RETURN(std::vector<TensorRef> parts, oss_mxfp4_experts(*st, i, ck.config, &ck.owners));
            for (TensorRef& part : parts) KILN_RETURN_IF_ERROR(add_tensor(&ck, &names, std::move(part), 0));
            continue;
        }
        TensorRef t{info.name, info.dtype, info.shape, st->tensor_data(i), info.num_bytes, nullptr, {}};
        if (!modules.empty()) {
            const auto split = split_quant_part(info.name);
            const std::string module = split                            ? split->first
                                       : info.name.ends_with(".weight") ? info.name.substr(0, info.name.size() - 7)
                                                                        : std::string();
            auto mod = modules.find(module);
            // A calibrated KV cache scale (llmcompressor's self_attn.k_scale, ModelOpt's on k_proj):
            // read past, kiln scales its K/V cache per token (kernels/ref/kv_quant.h).
            if (mod == modules.end() && split && (split->second == "k_scale" || split->second == "v_scale")) continue;
            if (mod != modules.end()) {
                // The module's weight is built once, at its main part; its other parts are consumed.
                const bool main = split ? split->second == "weight_packed" || split->second == "qweight" : true;
                if (!main) continue;
                auto w = decompress_weight(*quantized, module, mod->second, &ck.owners);
                if (!w.is_ok()) return core::error(w.status().code()) << path << ": " << w.status().message();
                t = std::move(w).value();
                // The parts are read once, here: their file pages need not stay resident.
                for (const auto& [part_name, part] : mod->second) core::release_mapped_pages(part.data, size_t(part.num_bytes));
            }
        }
        std::string name = hf_to_gguf_name(t.name, ck.config.arch).value_or(t.name);
        if (name == "output.weight" && ck.config.tie_word_embeddings) continue;  // a saved copy of the embedding
        t.name = name;
        const formats::ArchNames* family = formats::find_arch_by_model_type(ck.config.arch);
        if (family && family->norm_plus_one && name.ends_with("norm.weight")) {
            // Gemma's RMSNorm multiplies by (1 + w): stored with the 1 added, as llama.cpp does.
            KILN_ASSIGN_OR_RETURN(t, shift_norm_weight(t, &ck.owners));
        }
        KILN_ASSIGN_OR_RETURN(std::vector<TensorRef> parts, split_fused(std::move(t), ck.config, &ck.owners));
        for (TensorRef& part : parts) {
            const int64_t heads = rope_permute_heads(part.name, ck.config);
            KILN_RETURN_IF_ERROR(add_tensor(&ck, &names, std::move(part), heads));
        }
    }
    auto tok = st->metadata().find(kGgufTokenizerMetadataKey);
    if (tok != st->metadata().end()) {
        KILN_ASSIGN_OR_RETURN(ck.gguf_metadata, gguf_metadata_from_json(tok->second, path));
    }
    if (fs::exists(dir / "tokenizer.json", ec)) ck.tokenizer_path = (dir / "tokenizer.json").string();
    if (fs::exists(dir / "generation_config.json", ec)) {
        KILN_ASSIGN_OR_RETURN(ck.generation_config,
                              formats::load_generation_config((dir / "generation_config.json").string()));
    }
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(ck));
    return ck;
}

core::Result<Checkpoint> load_llama2c_checkpoint(const std::string& path) {
    KILN_ASSIGN_OR_RETURN(formats::Llama2cFile file, formats::Llama2cFile::open(path));
    auto f = std::make_shared<formats::Llama2cFile>(std::move(file));
    Checkpoint ck;
    ck.format = "llama2c";
    ck.path = path;
    ck.owners.push_back(f);
    KILN_ASSIGN_OR_RETURN(ck.config, config_from_llama2c(f->header()));
    // Whole arrays become tensors; stacked per-layer arrays are sliced.
    auto whole = [&](const char* array, const char* name) {
        const formats::Llama2cArray* a = f->find(array);
        ck.tensors.push_back({name, core::DType::kF32, a->shape, f->array_data(*a), a->num_bytes, nullptr, {}});
    };
    auto layer_slice = [&](const char* array, const char* suffix, uint64_t layer_idx) {
        const formats::Llama2cArray* a = f->find(array);
        std::vector<uint64_t> shape(a->shape.begin() + 1, a->shape.end());
        uint64_t bytes = a->num_bytes / a->shape[0];
        ck.tensors.push_back({"blk." + std::to_string(layer_idx) + "." + suffix, core::DType::kF32, shape,
                              f->array_data(*a) + layer_idx * bytes, bytes, nullptr, {}});
    };
    whole("token_embedding_table", "token_embd.weight");
    for (uint64_t l = 0; l < uint64_t(ck.config.num_layers); ++l) {
        layer_slice("rms_att_weight", "attn_norm.weight", l);
        layer_slice("wq", "attn_q.weight", l);
        layer_slice("wk", "attn_k.weight", l);
        layer_slice("wv", "attn_v.weight", l);
        layer_slice("wo", "attn_output.weight", l);
        layer_slice("rms_ffn_weight", "ffn_norm.weight", l);
        layer_slice("w1", "ffn_gate.weight", l);
        layer_slice("w2", "ffn_down.weight", l);
        layer_slice("w3", "ffn_up.weight", l);
    }
    whole("rms_final_weight", "output_norm.weight");
    if (!f->header().shared_classifier) whole("wcls", "output.weight");
    KILN_RETURN_IF_ERROR(check_checkpoint_tensors(ck));
    return ck;
}

core::Status keep_first_layers(Checkpoint& ck, int64_t n) {
    if (n < 1 || n >= ck.config.num_layers)
        return core::error(core::StatusCode::kInvalidArgument)
               << "keeping the first " << n << " layers of " << ck.path << ", which has " << ck.config.num_layers
               << ": the count must be in [1, " << ck.config.num_layers - 1 << "]";
    std::erase_if(ck.tensors, [&](const TensorRef& t) {
        if (!t.name.starts_with("blk.")) return false;
        return std::stoll(t.name.substr(4)) >= n;  // "blk.<i>.<name>"
    });
    ck.config.num_layers = n;
    ck.config.max_window_layers = std::min(ck.config.max_window_layers, n);
    return core::Status::ok();
}

core::Result<Checkpoint> load_checkpoint(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) return load_hf_checkpoint(path);
    std::ifstream in(path, std::ios::binary);
    if (!in) return core::error(StatusCode::kNotFound) << path << ": cannot open";
    uint8_t head[9] = {};
    in.read(reinterpret_cast<char*>(head), sizeof(head));
    size_t got = size_t(in.gcount());
    uint64_t file_size = fs::file_size(path, ec);
    if (got >= 4 && std::string(reinterpret_cast<char*>(head), 4) == "GGUF") return load_gguf_checkpoint(path);
    if (ends_with(path, ".gguf")) return load_gguf_checkpoint(path);
    if (ends_with(path, ".safetensors")) return load_hf_checkpoint(path);
    if (got == 9 && head[8] == '{') {
        uint64_t header_len = core::load_u64_le(head);
        if (!ec && header_len <= file_size - 8) return load_hf_checkpoint(path);
    }
    return load_llama2c_checkpoint(path);
}

namespace {

// Weight matrices go through kernels::ref::dequantize_row; norm weights and biases are read as
// plain floats.
enum class Role { kMatrix, kVector };

class TensorChecker {
public:
    explicit TensorChecker(const Checkpoint& ck) : ck_(ck) {
        for (const TensorRef& t : ck.tensors) by_name_.emplace(t.name, &t);
    }

    core::Status expect(const std::string& name, const std::vector<uint64_t>& shape, Role role) const {
        auto it = by_name_.find(name);
        if (it == by_name_.end())
            return core::error(StatusCode::kCorrupt)
                   << ck_.path << ": missing tensor '" << name << "' (expected shape " << shape_string(shape) << ")";
        const TensorRef& t = *it->second;
        if (t.shape != shape)
            return core::error(StatusCode::kCorrupt) << ck_.path << ": tensor '" << name << "' has shape "
                                                     << shape_string(t.shape) << ", expected " << shape_string(shape);
        if (role == Role::kMatrix && !matrix_dtype_supported(t))
            return core::error(StatusCode::kUnsupported)
                   << ck_.path << ": tensor '" << name << "' is " << core::dtype_name(t.dtype)
                   << ", which kiln cannot dequantize (weight matrices must be f32, f16, bf16 or a GGML q*_0/q*_1/"
                      "q*_k type)";
        if (role == Role::kVector && !is_plain_float(t.dtype))
            return core::error(StatusCode::kUnsupported)
                   << ck_.path << ": tensor '" << name << "' is " << core::dtype_name(t.dtype)
                   << "; norm weights and biases must be f32, f16 or bf16";
        return core::Status::ok();
    }

private:
    const Checkpoint& ck_;
    std::unordered_map<std::string, const TensorRef*> by_name_;
};

}  // namespace

core::Status check_checkpoint_tensors(const Checkpoint& ck) {
    TensorChecker check(ck);
    for (const TensorSpec& t : checkpoint_tensors(ck.config))
        KILN_RETURN_IF_ERROR(check.expect(t.name, t.shape, t.matrix ? Role::kMatrix : Role::kVector));
    return core::Status::ok();
}

core::Status copy_to_anonymous(loader::Checkpoint& ck, const std::vector<std::string>& keep) {
    auto copied = [&](const loader::TensorRef& t) { return std::find(keep.begin(), keep.end(), t.name) == keep.end(); };
    uint64_t total = 0;
    for (const loader::TensorRef& t : ck.tensors)
        if (copied(t)) total += (t.num_bytes + 63) / 64 * 64;
    if (total == 0) return core::Status::ok();
    // 2 MiB aligned; huge pages once loaded (core::start_huge_page_collapse, called by create_model)
    auto mapped = core::map_huge_pages(size_t(total), core::HugePages::kDeferred);
    if (!mapped.is_ok())
        return core::error(core::StatusCode::kOutOfMemory)
               << ck.path << ": cannot allocate " << total << " bytes for the weights";
    std::shared_ptr<void> owner = std::move(mapped).value();
    uint8_t* dst = static_cast<uint8_t*>(owner.get());
    for (loader::TensorRef& t : ck.tensors) {
        if (!copied(t)) continue;
        std::memcpy(dst, t.data, size_t(t.num_bytes));
        core::release_mapped_pages(t.data, size_t(t.num_bytes));
        t.storage.reset();  // a converted tensor's own buffer: the copy replaces it
        t.data = dst;
        dst += (t.num_bytes + 63) / 64 * 64;
    }
    ck.owners.push_back(std::move(owner));
    return core::Status::ok();
}

uint64_t release_tensor_bytes(Checkpoint& ck, const std::vector<std::string>& names) {
    uint64_t released = 0;
    for (TensorRef& t : ck.tensors) {
        if (std::find(names.begin(), names.end(), t.name) == names.end()) continue;
        if (t.storage) {
            t.storage.reset();
            t.data = nullptr;
            released += t.num_bytes;
        } else {
            released += core::release_mapped_pages(t.data, size_t(t.num_bytes));
        }
    }
    return released;
}

}  // namespace kiln::loader
