// quantize_checkpoint: f32 copy -> (AWQ: calibrate, search scales, fold, clip) -> (GPTQ: calibrate,
// quantize column by column) -> write with compress_weight (or GPTQ's codes).
#include "quant_tools/quantize.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "quant_tools/awq_block.h"
#include "kernels/ref/transformer.h"
#include "model/transformer.h"
#include "loader/convert.h"
#include "quant_tools/gptq_calibrate.h"
#include "model/cpu_model.h"
#include "loader/weight_names.h"
#include "quant/awq.h"
#include "quant/awq_clip.h"
#include "quant/gptq.h"
#include "quant/smoothquant.h"

namespace kiln::quant_tools {
namespace {

namespace fs = std::filesystem;
using core::StatusCode;

constexpr const char* kProjections[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

// The HF module of a layer projection's weight ("model.layers.3.mlp.up_proj"), or "": attention's
// q/k/v/o, the MLP's gate/up/down, and in a mixture of experts each expert's (mlp.experts.N.gate_proj,
// Mixtral's block_sparse_moe.experts.N.w1 / w3 / w2) and the shared expert's; never a router
// (mlp.gate, block_sparse_moe.gate, mlp.shared_expert_gate), which stays unquantized.
std::string projection_module(const std::string& hf_name) {
    if (!hf_name.starts_with("model.layers.") || !hf_name.ends_with(".weight")) return "";
    const std::string module = hf_name.substr(0, hf_name.size() - 7);
    for (const char* p : kProjections)
        if (module.ends_with(std::string(".") + p)) return module;
    const size_t dot = module.rfind('.');
    const std::string last = module.substr(dot + 1);
    const bool mlp = last == "gate_proj" || last == "up_proj" || last == "down_proj";
    const bool mixtral = last == "w1" || last == "w2" || last == "w3";
    if (mlp && module.ends_with(".mlp.shared_expert." + last)) return module;
    if (!mlp && !mixtral) return "";
    const size_t dot2 = module.rfind('.', dot - 1);  // ".experts.<N>.<last>"
    const std::string idx = dot2 == std::string::npos ? "" : module.substr(dot2 + 1, dot - dot2 - 1);
    if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) return "";
    return module.substr(0, dot2 + 1).ends_with(mlp ? ".mlp.experts." : ".block_sparse_moe.experts.") ? module : "";
}

// A mixture of experts' routers, by HF module: compressed-tensors' quantization_config lists them
// under "ignore" (they are Linear modules left in float, as llm-compressor's MoE recipes leave them).
std::vector<std::string> router_modules(const Checkpoint& ck) {
    std::vector<std::string> out;
    for (const TensorRef& t : ck.tensors) {
        if (!t.name.ends_with(".ffn_gate_inp.weight") && !t.name.ends_with(".ffn_gate_inp_shexp.weight")) continue;
        const std::string hf = loader::gguf_to_hf_name(t.name, ck.config.arch).value_or("");
        if (hf.ends_with(".weight")) out.push_back(hf.substr(0, hf.size() - 7));
    }
    return out;
}

// A --skip entry names a module exactly or by its last parts ("mlp.down_proj", "down_proj").
bool is_skipped(const std::string& module, const std::vector<std::string>& skip) {
    for (const std::string& s : skip)
        if (module == s || module.ends_with("." + s)) return true;
    return false;
}

// Writable f32 views of checkpoint tensors (copied out of the source on first use).
class Mutable {
public:
    explicit Mutable(Checkpoint& ck) : ck_(ck) {}
    bool has(const std::string& name) const { return ck_.find(name) != nullptr; }
    const ModelConfig& config() const { return ck_.config; }
    core::Result<std::span<float>> get(const std::string& name) {
        auto it = bufs_.find(name);
        if (it != bufs_.end()) return std::span<float>(*it->second);
        for (TensorRef& t : ck_.tensors) {
            if (t.name != name) continue;
            if (t.dtype != core::DType::kF32)
                return core::error(StatusCode::kInternal) << "tensor '" << name << "' is not f32";
            auto buf = std::make_shared<std::vector<float>>(t.num_elements());
            std::copy_n(reinterpret_cast<const float*>(t.data), buf->size(), buf->data());
            t.data = reinterpret_cast<const uint8_t*>(buf->data());
            ck_.owners.push_back(buf);
            bufs_[name] = buf;
            return std::span<float>(*buf);
        }
        return core::error(StatusCode::kNotFound) << "the checkpoint has no tensor '" << name << "'";
    }

private:
    Checkpoint& ck_;
    std::map<std::string, std::shared_ptr<std::vector<float>>> bufs_;
};

struct Group {
    const char* name;
    LinearInput input;
    std::vector<std::string> members;  // kiln names of the weights reading that input
    std::string norm;                  // fold into this norm weight, or
    std::string prev;                  // into the rows (and bias) of this projection
};

// Folds per-input-channel scales s [in] into a group (quant/awq.h "Folding contract"): every member's
// column j times s_j (skipped members too: exact in f32), the producer of the input divided by s_j
// (the norm's weight, or the previous projection's rows and bias).
core::Status fold_scales(Mutable& mut, const Group& g, const std::vector<float>& s, int64_t in) {
    for (const std::string& m : g.members) {
        KILN_ASSIGN_OR_RETURN(std::span<float> w, mut.get(m));
        for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % size_t(in)];
    }
    if (!g.norm.empty()) {
        KILN_ASSIGN_OR_RETURN(std::span<float> nw, mut.get(g.norm));
        for (int64_t j = 0; j < in; ++j) nw[size_t(j)] /= s[size_t(j)];
        return core::Status::ok();
    }
    KILN_ASSIGN_OR_RETURN(std::span<float> pw, mut.get(g.prev + ".weight"));
    const int64_t cols = int64_t(pw.size()) / in;
    for (int64_t j = 0; j < in; ++j)
        for (int64_t i = 0; i < cols; ++i) pw[size_t(j * cols + i)] /= s[size_t(j)];
    if (mut.has(g.prev + ".bias")) {
        KILN_ASSIGN_OR_RETURN(std::span<float> b, mut.get(g.prev + ".bias"));
        for (int64_t j = 0; j < in; ++j) b[size_t(j)] /= s[size_t(j)];
    }
    return core::Status::ok();
}

// AWQ clipping (quant/awq_clip.h) for one layer, after all its scales are folded: on the final f32
// weights and on the inputs they now see (x / s), every quantized member except q and k (AutoAWQ
// skips them: their error passes through the q.k product).
core::Status clip_layer(Mutable& mut, const LayerActivations& a, const std::vector<Group>& groups,
                        const std::vector<std::vector<float>>& group_scales, const QuantizeOptions& o,
                        core::ThreadPool* pool, QuantizeReport* report) {
    quant::AwqClipOptions co;
    co.group_size = o.scheme.group_size;
    co.mode = o.scheme.zero_point ? quant::Int4Mode::kAsymmetric : quant::Int4Mode::kSymmetric;
    co.max_samples = o.calibration.max_samples;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
        const size_t k = size_t(groups[gi].input);
        const int64_t in = a.cols[k], n = a.rows[k];
        if (n == 0) continue;
        std::vector<float> x = a.x[k];  // [n, in] -> x / s
        if (!group_scales[gi].empty()) {
            for (size_t i = 0; i < x.size(); ++i) x[i] /= group_scales[gi][i % size_t(in)];
        }
        for (const std::string& m : groups[gi].members) {
            if (m.find(".attn_q.") != std::string::npos || m.find(".attn_k.") != std::string::npos) continue;
            if (is_skipped(projection_module(loader::gguf_to_hf_name(m).value_or(m)), o.skip)) continue;
            KILN_ASSIGN_OR_RETURN(std::span<float> w, mut.get(m));
            const int64_t rows = int64_t(w.size()) / in;
            KILN_ASSIGN_OR_RETURN(quant::AwqClipResult r, quant::awq_clip_search(w, rows, in, x, n, co, pool));
            KILN_RETURN_IF_ERROR(quant::apply_awq_clip(w, rows, in, r));
            report->clip.push_back({m, r.base_error, r.clip_error});
        }
    }
    return core::Status::ok();
}

bool member_skipped(const std::string& kiln_name, const QuantizeOptions& o, const std::string& arch = "") {
    return is_skipped(projection_module(loader::gguf_to_hf_name(kiln_name, arch).value_or(kiln_name)), o.skip);
}

// gate/up scales by the whole MLP's output error (quant_tools/awq_block.h), down in fp32.
core::Result<quant::AwqResult> search_mlp(Mutable& mut, const Group& g, int64_t l, const LayerActivations& a,
                                          const quant::AwqOptions& awq, const QuantizeOptions& o,
                                          core::ThreadPool* pool) {
    const size_t k = size_t(LinearInput::kGateUp);
    AwqMlpBlock b;
    KILN_ASSIGN_OR_RETURN(b.gate, mut.get(g.members[0]));
    KILN_ASSIGN_OR_RETURN(b.up, mut.get(g.members[1]));
    KILN_ASSIGN_OR_RETURN(b.down, mut.get("blk." + std::to_string(l) + ".ffn_down.weight"));
    b.hidden = a.cols[k];
    b.inter = int64_t(b.gate.size()) / b.hidden;
    b.quantize_gate = !member_skipped(g.members[0], o);
    b.quantize_up = !member_skipped(g.members[1], o);
    b.gelu = mut.config().gelu_mlp;
    return awq_search_mlp(b, a.x[k], a.rows[k], awq, pool);
}

// q/k/v scales by the whole attention block's output error on whole calibration sequences, o in fp32.
core::Result<quant::AwqResult> search_attn(Mutable& mut, const Group& g, int64_t l, const ModelConfig& c,
                                           const std::vector<double>& inv_freq, const LayerActivations& a,
                                           const quant::AwqOptions& awq, const QuantizeOptions& o,
                                           core::ThreadPool* pool) {
    const size_t k = size_t(LinearInput::kQkv);
    const std::string p = "blk." + std::to_string(l) + ".";
    AwqAttnBlock b;
    KILN_ASSIGN_OR_RETURN(b.q, mut.get(g.members[0]));
    KILN_ASSIGN_OR_RETURN(b.k, mut.get(g.members[1]));
    KILN_ASSIGN_OR_RETURN(b.v, mut.get(g.members[2]));
    KILN_ASSIGN_OR_RETURN(b.o, mut.get(p + "attn_output.weight"));
    if (mut.has(p + "attn_q.bias")) {
        KILN_ASSIGN_OR_RETURN(b.bq, mut.get(p + "attn_q.bias"));
    }
    if (mut.has(p + "attn_k.bias")) {
        KILN_ASSIGN_OR_RETURN(b.bk, mut.get(p + "attn_k.bias"));
    }
    if (mut.has(p + "attn_v.bias")) {
        KILN_ASSIGN_OR_RETURN(b.bv, mut.get(p + "attn_v.bias"));
    }
    if (c.qk_norm) {
        KILN_ASSIGN_OR_RETURN(b.q_norm, mut.get(p + "attn_q_norm.weight"));
        KILN_ASSIGN_OR_RETURN(b.k_norm, mut.get(p + "attn_k_norm.weight"));
    }
    b.hidden = a.cols[k];
    b.num_heads = c.num_heads;
    b.num_kv_heads = c.num_kv_heads;
    b.head_dim = c.head_dim;
    b.window = c.window_for_layer(l);
    b.norm_eps = float(c.rms_norm_eps);
    b.inv_freq = inv_freq;
    if (c.local_rope_layer(l)) {  // the sliding layers' own RoPE base (Gemma 3)
        kernels::ref::RopeParams local;
        local.theta = c.rope_local_theta;
        b.inv_freq = kernels::ref::rope_inv_freqs(c.head_dim, local);
    }
    b.q_scale = model::attention_q_scale(c);
    b.softcap = float(c.attn_softcap);
    b.quantize_q = !member_skipped(g.members[0], o);
    b.quantize_k = !member_skipped(g.members[1], o);
    b.quantize_v = !member_skipped(g.members[2], o);
    return awq_search_attn(b, a.qkv_seq, a.seq_lens, quant::channel_mean_abs(a.x[k], a.rows[k], b.hidden), awq, pool);
}

core::Status run_awq(Checkpoint& ck, const QuantizeOptions& o, core::ThreadPool* pool, QuantizeReport* report) {
    const ModelConfig& c = ck.config;
    if (o.calib_tokens.empty()) return core::error(StatusCode::kInvalidArgument) << "AWQ needs calibration text";
    auto progress = [&](int64_t d, int64_t t) {
        if (o.progress) o.progress("calibrate", d, t);
    };
    CalibrationOptions co = o.calibration;
    co.max_seq_tokens = o.awq_attn_loss ? o.awq_attn_tokens : 0;
    KILN_ASSIGN_OR_RETURN(std::vector<LayerActivations> acts,
                          collect_activations(ck, o.calib_tokens, pool, co, progress));
    Mutable mut(ck);
    quant::AwqOptions awq;
    awq.group_size = o.scheme.group_size;
    awq.mode = o.scheme.zero_point ? quant::Int4Mode::kAsymmetric : quant::Int4Mode::kSymmetric;
    awq.max_samples = o.calibration.max_samples;
    awq.duo_scaling = o.awq_duo_scaling;
    std::vector<double> inv_freq;
    if (o.awq_attn_loss) {
        KILN_ASSIGN_OR_RETURN(inv_freq, awq_rope_inv_freq(c));
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
        auto n = [&](const char* what) { return "blk." + std::to_string(l) + "." + what; };
        std::vector<Group> groups = {
            {"qkv",
             LinearInput::kQkv,
             {n("attn_q.weight"), n("attn_k.weight"), n("attn_v.weight")},
             n("attn_norm.weight"),
             ""},
            {"o", LinearInput::kAttnOut, {n("attn_output.weight")}, "", n("attn_v")},
            {"gate_up", LinearInput::kGateUp, {n("ffn_gate.weight"), n("ffn_up.weight")}, n("ffn_norm.weight"), ""},
            {"down", LinearInput::kDown, {n("ffn_down.weight")}, "", n("ffn_up")}};
        if (c.q_dim() != c.kv_dim()) groups.erase(groups.begin() + 1);  // GQA: v's rows do not map to o's input
        std::vector<std::vector<float>> group_scales(groups.size());    // [in] each; empty = 1 (not folded)
        for (const Group& g : groups) {
            const LayerActivations& a = acts[size_t(l)];
            const size_t k = size_t(g.input);
            const int64_t in = a.cols[k], rows_x = a.rows[k];
            std::vector<std::span<const float>> weights;
            std::vector<int64_t> out_rows;
            for (const std::string& m : g.members) {
                if (is_skipped(projection_module(loader::gguf_to_hf_name(m).value_or(m)), o.skip)) continue;
                KILN_ASSIGN_OR_RETURN(std::span<float> w, mut.get(m));
                weights.push_back(w);
                out_rows.push_back(int64_t(w.size()) / in);
            }
            if (weights.empty() || rows_x == 0) continue;
            quant::AwqResult r;
            if (g.input == LinearInput::kGateUp && o.awq_mlp_loss) {
                KILN_ASSIGN_OR_RETURN(r, search_mlp(mut, g, l, a, awq, o, pool));
            } else if (g.input == LinearInput::kQkv && o.awq_attn_loss && !a.seq_lens.empty()) {
                KILN_ASSIGN_OR_RETURN(r, search_attn(mut, g, l, c, inv_freq, a, awq, o, pool));
            } else {
                KILN_ASSIGN_OR_RETURN(r, quant::awq_search(weights, out_rows, in, a.x[k], rows_x, awq, pool));
            }
            report->awq.push_back({l, g.name, r.best_alpha, r.rtn_error, r.awq_error});
            const int64_t per_layer = int64_t(groups.size());
            if (o.progress)
                o.progress("awq", l * per_layer + int64_t(&g - groups.data()) + 1, c.num_layers * per_layer);
            if (!r.scaled) continue;  // s = 1: nothing to fold
            group_scales[size_t(&g - groups.data())] = r.scales;
            KILN_RETURN_IF_ERROR(fold_scales(mut, g, r.scales, in));
        }
        if (o.awq_clip) KILN_RETURN_IF_ERROR(clip_layer(mut, acts[size_t(l)], groups, group_scales, o, pool, report));
    }
    return core::Status::ok();
}

// SmoothQuant for INT8: q/k/v and gate/up scales from the per-channel activation maxima over all
// calibration tokens and the weights' column maxima (quant/smoothquant.h), folded into the norms.
core::Status run_smoothquant(Checkpoint& ck, const QuantizeOptions& o, core::ThreadPool* pool) {
    const ModelConfig& c = ck.config;
    if (o.calib_tokens.empty()) return core::error(StatusCode::kInvalidArgument) << "SmoothQuant needs calibration text";
    auto progress = [&](int64_t d, int64_t t) {
        if (o.progress) o.progress("calibrate", d, t);
    };
    KILN_ASSIGN_OR_RETURN(std::vector<LayerActivations> acts,
                          collect_activations(ck, o.calib_tokens, pool, o.calibration, progress));
    Mutable mut(ck);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        auto n = [&](const char* what) { return "blk." + std::to_string(l) + "." + what; };
        const Group groups[] = {
            {"qkv",
             LinearInput::kQkv,
             {n("attn_q.weight"), n("attn_k.weight"), n("attn_v.weight")},
             n("attn_norm.weight"),
             ""},
            {"gate_up", LinearInput::kGateUp, {n("ffn_gate.weight"), n("ffn_up.weight")}, n("ffn_norm.weight"), ""}};
        for (const Group& g : groups) {
            const LayerActivations& a = acts[size_t(l)];
            const size_t k = size_t(g.input);
            const int64_t in = a.cols[k];
            std::vector<std::span<const float>> weights;
            for (const std::string& m : g.members) {
                if (member_skipped(m, o)) continue;
                KILN_ASSIGN_OR_RETURN(std::span<float> w, mut.get(m));
                weights.push_back(w);
            }
            if (weights.empty() || a.abs_max[k].empty()) continue;
            KILN_ASSIGN_OR_RETURN(std::vector<float> s,
                                  quant::smoothquant_scales(a.abs_max[k], weights, in, o.smoothquant_alpha));
            KILN_RETURN_IF_ERROR(fold_scales(mut, g, s, in));
        }
    }
    return core::Status::ok();
}

// llama.c checkpoints carry no tokenizer: embed tok512.bin / tokenizer.bin (or the given one).
core::Status embed_llama2c_tokenizer(Checkpoint& ck, const std::string& explicit_path) {
    std::string path = explicit_path;
    if (path.empty()) {
        const fs::path dir = fs::path(ck.path).parent_path();
        for (const char* f : {"tok512.bin", "tokenizer.bin"})
            if (std::error_code ec; fs::exists(dir / f, ec)) {
                path = (dir / f).string();
                break;
            }
    }
    if (path.empty())
        return core::error(StatusCode::kNotFound)
               << ck.path << ": a llama2.c model needs its tokenizer (--tokenizer FILE, or tok512.bin beside it)";
    KILN_ASSIGN_OR_RETURN(loader::GgufMetadata tok, loader::read_llama2c_tokenizer(path, ck.config.vocab_size));
    for (auto& kv : tok) ck.gguf_metadata.push_back(std::move(kv));
    ck.config.bos_token_id = 1;
    ck.config.eos_token_ids = {2};
    return core::Status::ok();
}

}  // namespace

core::Result<QuantizeReport> quantize_checkpoint(const Checkpoint& source, const std::string& out_dir,
                                                 const QuantizeOptions& o, core::ThreadPool* pool) {
    if (o.awq && o.scheme.format != loader::QuantFormat::kPackedInt)
        return core::error(StatusCode::kInvalidArgument) << "AWQ applies to the INT4 formats (awq-w4-gN) only";
    if (o.gptq && o.scheme.format != loader::QuantFormat::kPackedInt)
        return core::error(StatusCode::kInvalidArgument) << "GPTQ applies to the INT4 formats (gptq-w4-gN) only";
    if (o.smoothquant_alpha >= 0 && o.scheme.format != loader::QuantFormat::kInt8)
        return core::error(StatusCode::kInvalidArgument) << "SmoothQuant applies to int8 only";
    if (source.config.moe() && (o.awq || o.smoothquant_alpha >= 0))
        return core::error(StatusCode::kUnsupported)
               << source.path << ": AWQ and SmoothQuant of mixture-of-experts models are not supported yet (their "
               << "scales fold into the norm every expert shares); use gptq-w4-gN or a round-to-nearest format";
    KILN_ASSIGN_OR_RETURN(Checkpoint ck, loader::to_f32_checkpoint(source));
    if (ck.format == "llama2c") KILN_RETURN_IF_ERROR(embed_llama2c_tokenizer(ck, o.tokenizer_path));
    // --skip names are checked before any calibration runs.
    std::vector<std::string> ignore = {"lm_head"};
    int64_t total = 0;
    for (const TensorRef& t : ck.tensors) {
        const std::string module = projection_module(loader::gguf_to_hf_name(t.name, ck.config.arch).value_or(t.name));
        if (module.empty()) continue;
        if (is_skipped(module, o.skip))
            ignore.push_back(module);
        else
            ++total;
    }
    for (const std::string& s : o.skip)
        if (std::none_of(ignore.begin(), ignore.end(), [&](const std::string& m) { return is_skipped(m, {s}); }))
            return core::error(StatusCode::kInvalidArgument) << "--skip " << s << " names no projection of the model";
    for (std::string& r : router_modules(ck)) ignore.push_back(std::move(r));
    QuantizeReport report;
    if (o.awq) KILN_RETURN_IF_ERROR(run_awq(ck, o, pool, &report));
    if (o.smoothquant_alpha >= 0) KILN_RETURN_IF_ERROR(run_smoothquant(ck, o, pool));
    quant::GptqOptions go;
    go.group_size = o.scheme.group_size;
    go.mode = o.scheme.zero_point ? quant::Int4Mode::kAsymmetric : quant::Int4Mode::kSymmetric;
    std::map<std::string, std::shared_ptr<const quant::GptqFactor>> factors;  // by HF module
    if (o.gptq) {
        GptqCalibrateOptions gc;
        gc.gptq = go;
        gc.calibration = o.calibration;
        gc.calibration.max_samples = o.gptq_samples;
        gc.sequential = o.gptq_sequential;
        gc.act_order = o.gptq_act_order;
        gc.skipped = [&](const std::string& name) { return member_skipped(name, o, ck.config.arch); };
        gc.progress = o.progress;
        KILN_ASSIGN_OR_RETURN(GptqFactors by_name, gptq_calibrate(ck, o.calib_tokens, gc, pool));
        for (auto& [name, f] : by_name)
            factors[projection_module(loader::gguf_to_hf_name(name, ck.config.arch).value_or(name))] = f;
        // Experts that got too few calibration tokens: rounded to nearest by the writer.
        for (int64_t l = 0; l < ck.config.num_layers; ++l)
            for (int64_t e = 0; e < ck.config.num_experts; ++e) {
                const std::string gate = "blk." + std::to_string(l) + ".ffn_gate." + std::to_string(e) + ".weight";
                if (!by_name.count(gate) && !member_skipped(gate, o, ck.config.arch)) ++report.rtn_experts;
            }
    }

    loader::HfWriteExtras extras;
    extras.quantization_config = loader::quantization_config_json(o.scheme, ignore);
    extras.transform = [&](const formats::SafetensorsTensorIn& t, std::vector<formats::SafetensorsTensorIn>* out,
                           std::vector<std::shared_ptr<const void>>* owners) -> core::Result<bool> {
        const std::string module = projection_module(t.name);
        if (module.empty()) return false;
        if (is_skipped(module, o.skip)) {
            ++report.kept;
            return false;
        }
        if (t.dtype != core::DType::kF32 || t.shape.size() != 2)
            return core::error(StatusCode::kInternal) << "'" << t.name << "' is not an f32 matrix";
        const int64_t rows = int64_t(t.shape[0]), cols = int64_t(t.shape[1]);
        std::span<const float> w(static_cast<const float*>(t.data), size_t(rows * cols));
        core::Status st;
        if (const auto f = factors.find(module); f != factors.end()) {
            auto q = quant::gptq_quantize_int4(w, rows, cols, *f->second, go, pool);
            st = q.is_ok() ? loader::write_int4_weight(*q, module, out, owners) : q.status();
        } else {
            st = loader::compress_weight(o.scheme, module, w, rows, cols, out, owners);
        }
        if (!st.is_ok()) return core::error(st.code()) << module << ": " << st.message();
        ++report.quantized;
        if (o.progress) o.progress("write", report.quantized, total);
        return true;
    };
    loader::ConvertOptions copts;
    copts.to = "safetensors";
    KILN_RETURN_IF_ERROR(loader::write_hf_checkpoint(ck, out_dir, copts, &extras));
    return report;
}

}  // namespace kiln::quant_tools
