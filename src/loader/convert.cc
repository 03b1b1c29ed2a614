// Checkpoint conversion (see convert.h).
#include "loader/convert.h"
#include "formats/architectures.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/bytes.h"
#include "core/mapped_file.h"
#include "core/numeric.h"
#include "formats/ggml_type.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "kernels/ref/dequant.h"
#include "loader/layer_tensors.h"

namespace kiln::loader {
namespace {

namespace fs = std::filesystem;
using core::DType;
using core::StatusCode;

bool is_castable(DType t) {
    return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// The dtype a tensor is written in.
DType output_dtype(const TensorRef& t, const ConvertOptions& opts) {
    if (!opts.dtype || !is_castable(t.dtype)) return t.dtype;
    return t.shape.size() <= 1 ? DType::kF32 : *opts.dtype;
}

const char* torch_dtype_name(DType t) {
    switch (t) {
        case DType::kF32:
            return "float32";
        case DType::kF16:
            return "float16";
        case DType::kBF16:
            return "bfloat16";
        default:
            return "";
    }
}

// `t` (float or block-quantized) dequantized to F32 into a buffer appended to `owners`.
core::Result<TensorRef> dequantize_tensor(const TensorRef& t, std::vector<std::shared_ptr<const void>>* owners) {
    const uint64_t n = t.num_elements();
    auto buf = std::make_shared<std::vector<float>>(n);
    core::Status st = dequantize_tensor_to(t, buf->data());
    if (!st.is_ok()) return core::error(st.code()) << "tensor '" << t.name << "': " << st.message();
    TensorRef out = t;
    out.dtype = DType::kF32;
    out.row_scale = nullptr;
    out.data = reinterpret_cast<const uint8_t*>(buf->data());
    out.num_bytes = n * 4;
    owners->push_back(std::move(buf));
    return out;
}

// Converts the dtype (if asked) and the Q/K row order (if `rope_heads` > 0) of one tensor. kiln's
// own block types (nvfp4, e4m3_b32, mxfp8: compressed-tensors weights as loaded) and I8 with row
// scales (compressed-tensors INT8) have no GGUF or safetensors form: they are written dequantized (F32, or --dtype).
core::Result<TensorRef> prepare_tensor(const TensorRef& in, const ConvertOptions& opts, int64_t rope_heads,
                                       std::vector<std::shared_ptr<const void>>* owners) {
    TensorRef t = in;
    if ((core::dtype_info(t.dtype).is_quantized && (opts.dequantize || !formats::ggml_from_dtype(t.dtype))) ||
        t.row_scale) {
        KILN_ASSIGN_OR_RETURN(t, dequantize_tensor(t, owners));
    }
    DType want = output_dtype(t, opts);
    if (want != t.dtype) {
        KILN_ASSIGN_OR_RETURN(t, cast_tensor(t, want, owners));
    }
    if (rope_heads > 0) {
        KILN_ASSIGN_OR_RETURN(t, permute_tensor(t, rope_heads, RopeOrder::kRotateHalf, owners));
    }
    return t;
}

class Progress {
public:
    Progress(bool on, size_t total, const std::string& out) : on_(on), total_(total) {
        if (on_) std::fprintf(stderr, "kiln convert: writing %zu tensors to %s\n", total, out.c_str());
    }
    void tensor(size_t idx, const TensorRef& t) const {
        if (on_)
            std::fprintf(stderr, "[%zu/%zu] %-40s %-6s %.1f MB\n", idx + 1, total_, t.name.c_str(),
                         std::string(core::dtype_name(t.dtype)).c_str(), double(t.num_bytes) / 1e6);
    }

private:
    bool on_;
    size_t total_;
};

bool is_tokenizer_key(const std::string& key) {
    return key.rfind("tokenizer.", 0) == 0;
}

// llama.cpp's general.file_type (enum llama_ftype) for an all-float conversion.
std::optional<uint32_t> file_type_for(DType t) {
    switch (t) {
        case DType::kF32:
            return 0;
        case DType::kF16:
            return 1;
        case DType::kBF16:
            return 32;
        default:
            return std::nullopt;
    }
}

}  // namespace

core::Result<TensorRef> cast_tensor(const TensorRef& t, DType to, std::vector<std::shared_ptr<const void>>* owners) {
    if (!is_castable(t.dtype) || !is_castable(to))
        return core::error(StatusCode::kUnsupported) << "tensor '" << t.name << "': cannot convert "
                                                     << core::dtype_name(t.dtype) << " to " << core::dtype_name(to);
    const uint64_t n = t.num_elements();
    const uint64_t in_size = core::dtype_info(t.dtype).block_bytes, out_size = core::dtype_info(to).block_bytes;
    auto buf = std::make_shared<std::vector<uint8_t>>(n * out_size);
    for (uint64_t i = 0; i < n; ++i) {
        const uint8_t* src = t.data + i * in_size;
        float v;
        if (t.dtype == DType::kF32) {
            std::memcpy(&v, src, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, src, 2);
            v = t.dtype == DType::kF16 ? core::fp16_to_f32(h) : core::bf16_to_f32(h);
        }
        uint8_t* dst = buf->data() + i * out_size;
        if (to == DType::kF32) {
            std::memcpy(dst, &v, 4);
        } else {
            uint16_t h = to == DType::kF16 ? core::f32_to_fp16(v) : core::f32_to_bf16(v);
            std::memcpy(dst, &h, 2);
        }
    }
    TensorRef out = t;
    out.dtype = to;
    out.data = buf->data();
    out.num_bytes = buf->size();
    owners->push_back(std::move(buf));
    return out;
}

core::Result<Checkpoint> to_f32_checkpoint(const Checkpoint& ck) {
    Checkpoint out = ck;
    for (TensorRef& t : out.tensors) {
        const core::DTypeInfo& info = core::dtype_info(t.dtype);
        if (t.dtype == DType::kF32 || (!(info.is_float || info.is_quantized) && !t.row_scale)) continue;
        KILN_ASSIGN_OR_RETURN(t, dequantize_tensor(t, &out.owners));
    }
    return out;
}

// GGUF holds a layer's experts stacked, blk.N.ffn_gate_exps.weight [E, F, H] and so on, as
// llama.cpp reads them; kiln's per-expert tensors (layer_tensors.h) are gathered here until a
// stack is complete. Experts loaded from such a stack are still adjacent and written in place;
// others are copied into one buffer.
class ExpertStacker {
public:
    explicit ExpertStacker(int64_t num_experts) : num_experts_(num_experts) {}
    // nullopt when `t` is not an expert's tensor; else the finished stack once its last expert came
    // (a tensor with an empty name until then).
    core::Result<std::optional<TensorRef>> add(const TensorRef& t, std::vector<std::shared_ptr<const void>>* owners) {
        const std::optional<ExpertTensorName> name = parse_expert_tensor_name(t.name);
        if (num_experts_ <= 0 || !name || name->expert >= num_experts_ || t.shape.size() != (name->bias ? 1u : 2u))
            return std::optional<TensorRef>();
        const bool bias = name->bias;
        const std::string& stem = name->stem;  // blk.N.ffn_gate
        const std::string key = stem + (bias ? ".bias" : ".weight");
        const int64_t e = name->expert;
        std::vector<TensorRef>& parts = pending_[key];
        parts.resize(size_t(num_experts_));
        parts[size_t(e)] = t;
        for (const TensorRef& p : parts)
            if (p.name.empty()) return std::optional<TensorRef>(TensorRef{});
        TensorRef out = parts[0];
        out.name = stem + (bias ? "_exps.bias" : "_exps.weight");
        out.shape = parts[0].shape;
        out.shape.insert(out.shape.begin(), uint64_t(num_experts_));
        out.num_bytes = parts[0].num_bytes * uint64_t(num_experts_);
        out.row_scale = nullptr;
        bool adjacent = true;
        for (int64_t i = 0; i < num_experts_; ++i) {
            const TensorRef& p = parts[size_t(i)];
            if (p.dtype != parts[0].dtype || p.shape != parts[0].shape || p.row_scale)
                return core::error(StatusCode::kUnsupported)
                       << "tensor '" << p.name << "' (" << core::dtype_name(p.dtype) << " " << core::shape_string(p.shape)
                       << ") differs from expert 0's (" << core::dtype_name(parts[0].dtype) << " "
                       << core::shape_string(parts[0].shape) << "): GGUF stacks a layer's experts into one tensor";
            adjacent = adjacent && p.data == parts[0].data + uint64_t(i) * parts[0].num_bytes;
        }
        if (!adjacent) {
            auto buf = std::make_shared<std::vector<uint8_t>>(out.num_bytes);
            for (int64_t i = 0; i < num_experts_; ++i)
                std::memcpy(buf->data() + uint64_t(i) * parts[0].num_bytes, parts[size_t(i)].data, parts[0].num_bytes);
            out.data = buf->data();
            owners->push_back(std::move(buf));
        }
        out.storage.reset();
        pending_.erase(key);
        return std::optional<TensorRef>(std::move(out));
    }
    // The stacks still missing experts (an incomplete checkpoint: check_checkpoint_tensors prevents it).
    bool complete() const { return pending_.empty(); }

private:
    int64_t num_experts_;
    std::map<std::string, std::vector<TensorRef>> pending_;
};

core::Status write_gguf_checkpoint(const Checkpoint& ck, const std::string& path, const ConvertOptions& opts) {
    formats::GgufWriter w;
    const std::string arch = gguf_arch(ck.config);
    GgufMetadata hyper = config_to_gguf_metadata(ck.config);
    w.set(hyper[0].first, hyper[0].second);  // general.architecture first, as llama.cpp writes it
    std::string name = ck.config.name;
    if (name.empty()) {  // the file or directory name, without extension
        fs::path p = fs::path(ck.path).lexically_normal();
        if (!p.has_filename()) p = p.parent_path();
        name = p.stem().string();
    }
    w.set("general.name", formats::gguf_string(name));
    const bool all_float = opts.dtype || opts.dequantize;  // the file type names the float type written
    if (all_float)
        if (std::optional<uint32_t> ft = file_type_for(opts.dtype.value_or(DType::kF32)))
            w.set("general.file_type", formats::gguf_u32(*ft));
    for (size_t i = 1; i < hyper.size(); ++i) w.set(hyper[i].first, hyper[i].second);
    for (const auto& [key, value] : ck.gguf_metadata) {
        if (key == "general.architecture" || key == "general.name" || key == "general.alignment" ||
            key.rfind(arch + ".", 0) == 0 || (all_float && key == "general.file_type"))
            continue;
        w.set(key, value);
    }
    if (!ck.find_metadata("tokenizer.ggml.model") && !ck.tokenizer_path.empty()) {
        KILN_ASSIGN_OR_RETURN(std::string json, core::read_text_file(ck.tokenizer_path));
        w.set("tokenizer.huggingface.json", formats::gguf_string(std::move(json)));
    }

    std::vector<std::shared_ptr<const void>> owners;
    const bool neox = gguf_arch_uses_neox_rope(arch);
    Progress progress(opts.progress, ck.tensors.size(), path);
    ExpertStacker experts(ck.config.num_experts);
    for (size_t i = 0; i < ck.tensors.size(); ++i) {
        const TensorRef& src = ck.tensors[i];
        int64_t heads = neox ? rope_permute_heads(src.name, ck.config) : 0;
        KILN_ASSIGN_OR_RETURN(TensorRef t, prepare_tensor(src, opts, heads, &owners));
        KILN_ASSIGN_OR_RETURN(std::optional<TensorRef> stacked, experts.add(t, &owners));
        if (stacked && stacked->name.empty()) continue;  // an expert of a stack not yet complete
        if (stacked) t = std::move(*stacked);
        t.name = canonical_to_gguf_name(t.name, ck.config);
        if (!formats::ggml_from_dtype(t.dtype))
            return core::error(StatusCode::kUnsupported) << ck.path << ": tensor '" << t.name << "': dtype "
                                                         << core::dtype_name(t.dtype) << " has no GGUF type";
        if (t.shape.size() > formats::kGgufMaxDims)
            return core::error(StatusCode::kUnsupported)
                   << ck.path << ": tensor '" << t.name << "' has " << t.shape.size()
                   << " dimensions; GGUF allows at most " << formats::kGgufMaxDims;
        if (t.shape.empty()) t.shape = {1};
        progress.tensor(i, t);
        w.add_tensor(t.name, t.dtype, t.shape, t.data, t.num_bytes);
    }
    if (!experts.complete())
        return core::error(StatusCode::kCorrupt) << ck.path << ": a layer is missing some of its experts' tensors";
    return w.write(path);
}

core::Status write_hf_checkpoint(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opts,
                                 const HfWriteExtras* extras) {
    // transformers has no per-frequency RoPE factors: the folder would load, and run, unscaled.
    if (!ck.config.rope_freq_factors.empty())
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": rope_freqs.weight (llama.cpp's form of Llama-3 RoPE scaling) has no Hugging Face "
               << "equivalent; keep this model in GGUF";
    const formats::ArchNames* family = formats::find_arch_by_model_type(ck.config.arch);
    if ((family && family->norm_plus_one) || ck.config.arch == "phi3" || ck.config.arch == "gpt_oss")
        return core::error(StatusCode::kUnsupported)
               << ck.path << ": writing " << ck.config.arch << " as safetensors is not supported yet (Gemma's norm "
               << "weights would need their +1 taken off, Phi-3's projections fusing again, gpt-oss's experts "
               << "transposing and interleaving again); keep this model in GGUF";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return core::error(StatusCode::kIo) << dir << ": cannot create directory: " << ec.message();

    std::vector<std::shared_ptr<const void>> owners;
    std::vector<formats::SafetensorsTensorIn> tensors;
    std::map<DType, uint64_t> bytes_by_dtype;  // of matrices, to name torch_dtype
    const fs::path out_file = fs::path(dir) / "model.safetensors";
    Progress progress(opts.progress, ck.tensors.size(), out_file.string());
    for (size_t i = 0; i < ck.tensors.size(); ++i) {
        const TensorRef& src = ck.tensors[i];
        if (core::dtype_info(src.dtype).is_quantized && formats::ggml_from_dtype(src.dtype) && !opts.dequantize)
            return core::error(StatusCode::kUnsupported)
                   << ck.path << ": tensor '" << src.name << "' is " << core::dtype_name(src.dtype)
                   << ": quantized GGUF tensors have no safetensors form; convert to GGUF instead, pass --dequantize, "
                      "or start from an unquantized checkpoint";
        KILN_ASSIGN_OR_RETURN(TensorRef t, prepare_tensor(src, opts, rope_permute_heads(src.name, ck.config), &owners));
        if (t.shape.size() >= 2) bytes_by_dtype[t.dtype] += t.num_bytes;
        progress.tensor(i, t);
        if (t.name.ends_with(".ffn_gate_inp_shexp.weight") && t.shape.size() == 1)
            t.shape = {1, t.shape[0]};  // HF's shared_expert_gate is a Linear(H, 1)
        formats::SafetensorsTensorIn out{gguf_to_hf_name(t.name, ck.config.arch).value_or(t.name), t.dtype, t.shape, t.data,
                                         t.num_bytes};
        if (extras && extras->transform) {
            KILN_ASSIGN_OR_RETURN(bool replaced, extras->transform(out, &tensors, &owners));
            if (replaced) continue;
        }
        tensors.push_back(std::move(out));
    }
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    GgufMetadata tokenizer;
    for (const auto& kv : ck.gguf_metadata)
        if (is_tokenizer_key(kv.first)) tokenizer.push_back(kv);
    if (!tokenizer.empty()) metadata[kGgufTokenizerMetadataKey] = gguf_metadata_to_json(tokenizer);
    core::Status st = formats::write_safetensors(out_file.string(), tensors, metadata);
    if (!st.is_ok()) return core::error(st.code()) << out_file.string() << ": " << st.message();

    DType main_dtype = DType::kF32;
    uint64_t most = 0;
    for (const auto& [dtype, bytes] : bytes_by_dtype)
        if (bytes > most) most = bytes, main_dtype = dtype;
    std::string config = config_to_hf_json(ck.config, torch_dtype_name(main_dtype));
    if (extras && !extras->quantization_config.empty()) {
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(config);
        j["quantization_config"] = nlohmann::ordered_json::parse(extras->quantization_config);
        config = j.dump(2) + "\n";
    }
    {
        const std::string config_path = (fs::path(dir) / "config.json").string();
        std::FILE* f = std::fopen(config_path.c_str(), "wb");
        if (!f) return core::error(StatusCode::kIo) << config_path << ": cannot create";
        bool ok = std::fwrite(config.data(), 1, config.size(), f) == config.size();
        ok &= std::fclose(f) == 0;
        if (!ok) return core::error(StatusCode::kIo) << config_path << ": write failed";
    }
    if (!ck.tokenizer_path.empty()) {
        fs::path src_dir = fs::path(ck.tokenizer_path).parent_path();
        for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
            if (!fs::exists(src_dir / file, ec)) continue;
            fs::copy_file(src_dir / file, fs::path(dir) / file, fs::copy_options::overwrite_existing, ec);
            if (ec)
                return core::error(StatusCode::kIo)
                       << (fs::path(dir) / file).string() << ": cannot copy: " << ec.message();
        }
    }
    return core::Status::ok();
}

core::Result<GgufMetadata> read_llama2c_tokenizer(const std::string& path, int64_t vocab_size) {
    KILN_ASSIGN_OR_RETURN(core::MappedFile file, core::MappedFile::open(path));
    const uint8_t* p = file.data();
    const size_t size = file.size();
    auto read_i32 = [&](size_t off) { return core::load_i32_le(p + off); };
    if (size < 4) return core::error(StatusCode::kCorrupt) << path << ": too short for a llama2.c tokenizer";
    if (vocab_size <= 0 || uint64_t(vocab_size) > (size - 4) / 8)
        return core::error(StatusCode::kCorrupt)
               << path << ": " << size << " bytes cannot hold " << vocab_size << " tokens (vocab size of the model)";
    const int32_t max_len = read_i32(0);
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    size_t off = 4;
    for (int64_t id = 0; id < vocab_size; ++id) {
        if (size - off < 8)
            return core::error(StatusCode::kCorrupt) << path << ": token " << id << " at byte offset " << off
                                                     << " runs past the end of the file (" << size << " bytes)";
        float score;
        std::memcpy(&score, p + off, 4);
        int32_t len = read_i32(off + 4);
        off += 8;
        if (len < 0 || len > max_len || size_t(len) > size - off)
            return core::error(StatusCode::kCorrupt)
                   << path << ": token " << id << " length " << len << " at byte offset " << off - 4
                   << " is negative, over max_len " << max_len << " or past the end of the file";
        std::string text(reinterpret_cast<const char*>(p + off), size_t(len));
        off += size_t(len);
        if (text == "\n<s>\n") text = "<s>";
        if (text == "\n</s>\n") text = "</s>";
        std::string spm;
        for (char c : text) spm += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
        bool is_byte = spm.size() == 6 && spm.rfind("<0x", 0) == 0 && spm[5] == '>' && std::isxdigit(uint8_t(spm[3])) &&
                       std::isxdigit(uint8_t(spm[4]));
        types.push_back(id == 0 ? 2 : (id <= 2 ? 3 : (is_byte ? 6 : 1)));
        tokens.push_back(std::move(spm));
        scores.push_back(score);
    }
    using namespace formats;
    return GgufMetadata{
        {"tokenizer.ggml.model", gguf_string("llama")},     {"tokenizer.ggml.tokens", gguf_string_array(tokens)},
        {"tokenizer.ggml.scores", gguf_f32_array(scores)},  {"tokenizer.ggml.token_type", gguf_i32_array(types)},
        {"tokenizer.ggml.bos_token_id", gguf_u32(1)},       {"tokenizer.ggml.eos_token_id", gguf_u32(2)},
        {"tokenizer.ggml.unknown_token_id", gguf_u32(0)},   {"tokenizer.ggml.add_bos_token", gguf_bool(true)},
        {"tokenizer.ggml.add_eos_token", gguf_bool(false)},
    };
}

core::Status check_convert_options(const ConvertOptions& opts) {
    if (opts.to != "gguf" && opts.to != "safetensors")
        return core::error(StatusCode::kInvalidArgument)
               << "convert: --to must be gguf or safetensors, not '" << opts.to << "'";
    if (opts.dtype && !is_castable(*opts.dtype))
        return core::error(StatusCode::kInvalidArgument)
               << "convert: --dtype must be f32, f16 or bf16, not " << core::dtype_name(*opts.dtype);
    return core::Status::ok();
}

core::Status convert_checkpoint(const std::string& in, const std::string& out, const ConvertOptions& opts) {
    KILN_RETURN_IF_ERROR(check_convert_options(opts));
    KILN_ASSIGN_OR_RETURN(Checkpoint ck, load_checkpoint(in));
    if (!opts.tokenizer_path.empty()) {
        KILN_ASSIGN_OR_RETURN(GgufMetadata tok, read_llama2c_tokenizer(opts.tokenizer_path, ck.config.vocab_size));
        GgufMetadata kept;
        for (auto& kv : ck.gguf_metadata)
            if (!is_tokenizer_key(kv.first)) kept.push_back(std::move(kv));
        for (auto& kv : tok) kept.push_back(std::move(kv));
        ck.gguf_metadata = std::move(kept);
        ck.config.bos_token_id = 1;
        ck.config.eos_token_ids = {2};
    }
    if (opts.num_layers > 0) {
        if (opts.num_layers >= ck.config.num_layers)
            return core::error(core::StatusCode::kInvalidArgument)
                   << "--layers " << opts.num_layers << ": " << in << " has " << ck.config.num_layers << " layers";
        KILN_RETURN_IF_ERROR(keep_first_layers(ck, opts.num_layers));
    }
    if (opts.to == "gguf") return write_gguf_checkpoint(ck, out, opts);
    return write_hf_checkpoint(ck, out, opts);
}

}  // namespace kiln::loader
