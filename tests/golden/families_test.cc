// Every architecture kiln runs (Llama, Llama with llama3 RoPE scaling, Mistral with a sliding
// window, Qwen2 with q/k/v biases, Qwen3 with q/k RMSNorm, Gemma 2 with soft-capping, Gemma 3 text,
// Phi-3 with LongRoPE's short and long factors; the mixtures of experts Mixtral, Qwen2-MoE with its
// shared expert, Qwen3-MoE and OLMoE) against Hugging Face transformers: tiny random-weight
// models built by AutoModelForCausalLM.from_config and their float32 eager logits
// (scripts/gen_family_goldens.py; tests/golden/data/families/<name>/). kiln loads each safetensors
// folder, and its GGUF conversion (loader::convert_checkpoint, f32), runs the f32-activation path, and
// must give every logit at every position of three prompts within 1e-4 of that prompt's logit range
// (max - min over its logits), and the same 32 greedy tokens. The llama3-rope model also runs from the
// GGUF form llama.cpp's convert_hf_to_gguf.py writes for Llama 3.1 / 3.2: no rope.scaling keys and a
// rope_freqs.weight tensor of per-frequency factors, computed here with that script's formula; the
// phi3-long model from the layout that script gives Phi-3 (fused tensors, factor tensors). Each
// family is also batch-invariant over a paged cache (alone = batched = chunked, bit for bit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "loader/checkpoint.h"
#include "loader/convert.h"
#include "model/cpu_model.h"
#include "quant/mx.h"
#include "quant_tools/quantize.h"
#include "loader/compressed_tensors.h"
#include "support/logit_goldens.h"
#include "support/test_support.h"

namespace kiln::model {
namespace {

using test::check_model;
using test::Golden;
using test::load_golden;

std::string family_dir(const std::string& name) {
    const std::string here = __FILE__;
    return here.substr(0, here.rfind('/')) + "/data/families/" + name;
}

// The family folder `dir` converted to an f32 GGUF at `out` (loader::convert_checkpoint).
core::Status to_f32_gguf(const std::string& dir, const std::string& out) {
    loader::ConvertOptions o;
    o.to = "gguf";
    o.dtype = core::DType::kF32;
    return loader::convert_checkpoint(dir, out, o);
}

// An HF folder `out` holding `tensors` (model.safetensors) and family folder `dir`'s config.json.
core::Status write_hf_folder(const std::string& dir, const std::string& out,
                             const std::vector<formats::SafetensorsTensorIn>& tensors) {
    std::filesystem::create_directories(out);
    std::filesystem::copy_file(dir + "/config.json", out + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    return formats::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}});
}

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, MatchTransformersFromSafetensorsAndGguf) {
    const std::string dir = family_dir(GetParam());
    Golden g;
    ASSERT_TRUE(load_golden(dir, &g)) << dir;
    ASSERT_EQ(g.prompts.size(), 3u);
    auto ck = loader::load_checkpoint(dir);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    check_model(*ck, g, GetParam() + " (safetensors)");

    const std::string gguf = test::temp_dir("families_" + GetParam()) + "/model.gguf";
    const core::Status st = to_f32_gguf(dir, gguf);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    auto ck2 = loader::load_checkpoint(gguf);
    ASSERT_TRUE(ck2.is_ok()) << ck2.status().to_string();
    check_model(*ck2, g, GetParam() + " (gguf)");
}

// llama.cpp's convert_hf_to_gguf.py (LlamaModel, rope_type llama3): one factor per RoPE frequency,
// 1 for wavelengths below original_len / high_freq_factor, `factor` above original_len /
// low_freq_factor, 1 / ((1 - smooth) / factor + smooth) between; stored as f32.
std::vector<float> llamacpp_rope_factors(const ModelConfig& c) {
    constexpr double kPi = 3.14159265358979323846;
    const auto& rs = c.rope_scaling;
    const double low_wavelen = double(rs.original_max_position_embeddings) / rs.low_freq_factor;
    const double high_wavelen = double(rs.original_max_position_embeddings) / rs.high_freq_factor;
    std::vector<float> out;
    for (int64_t i = 0; i < c.head_dim / 2; ++i) {
        const double freq = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.head_dim));
        const double wavelen = 2 * kPi / freq;
        double f = 1.0;
        if (wavelen > low_wavelen) {
            f = rs.factor;
        } else if (wavelen >= high_wavelen) {
            const double smooth = (double(rs.original_max_position_embeddings) / wavelen - rs.low_freq_factor) /
                                  (rs.high_freq_factor - rs.low_freq_factor);
            f = 1.0 / ((1.0 - smooth) / rs.factor + smooth);
        }
        out.push_back(float(f));
    }
    return out;
}

TEST(Families, Llama3RopeFromAGgufWithRopeFreqs) {
    const std::string dir = family_dir("llama3-rope");
    Golden g;
    ASSERT_TRUE(load_golden(dir, &g)) << dir;
    const std::string tmp = test::temp_dir("families_rope_freqs");
    ASSERT_TRUE(to_f32_gguf(dir, tmp + "/scaled.gguf").is_ok());
    auto src = formats::GgufFile::open(tmp + "/scaled.gguf");
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto src_ck = loader::load_checkpoint(tmp + "/scaled.gguf");
    ASSERT_TRUE(src_ck.is_ok());
    ASSERT_EQ(src_ck->config.rope_scaling.type, "llama3");
    const std::vector<float> factors = llamacpp_rope_factors(src_ck->config);
    formats::GgufWriter w;
    int dropped = 0;
    for (const std::string& key : src->keys()) {
        if (key.rfind("llama.rope.scaling.", 0) == 0) {
            ++dropped;
            continue;
        }
        w.set(key, *src->find(key));
    }
    EXPECT_GE(dropped, 4);
    for (const formats::GgufTensorInfo& t : src->tensors())
        w.add_tensor(t.name, t.dtype, t.shape, src->tensor_data(t), t.num_bytes);
    w.add_tensor("rope_freqs.weight", core::DType::kF32, {factors.size()}, factors.data(), factors.size() * 4);
    ASSERT_TRUE(w.write(tmp + "/rope_freqs.gguf").is_ok());
    auto ck = loader::load_checkpoint(tmp + "/rope_freqs.gguf");
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_TRUE(ck->config.rope_scaling.type.empty());
    EXPECT_EQ(ck->config.rope_freq_factors, factors);
    check_model(*ck, g, "llama3-rope (gguf, rope_freqs.weight)");
    // Converting keeps the factors in GGUF and refuses the Hugging Face layout, which has no place for them.
    ASSERT_TRUE(to_f32_gguf(tmp + "/rope_freqs.gguf", tmp + "/again.gguf").is_ok());
    auto again = loader::load_checkpoint(tmp + "/again.gguf");
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
    EXPECT_EQ(again->config.rope_freq_factors, factors);
    loader::ConvertOptions hf;
    hf.to = "safetensors";
    EXPECT_EQ(loader::convert_checkpoint(tmp + "/rope_freqs.gguf", tmp + "/hf", hf).code(), core::StatusCode::kUnsupported);
}

// The layout llama.cpp's convert_hf_to_gguf.py gives Phi-3 (Phi3MiniModel): Q/K/V fused in
// blk.N.attn_qkv, gate and up fused in blk.N.ffn_up (2F rows, gate first), LongRoPE's factors as the
// tensors rope_factors_short / rope_factors_long (no scaling type key). kiln splits the fused tensors
// at load and reads the factors from the tensors: the same logits as transformers.
TEST(Families, Phi3FromALlamaCppStyleGguf) {
    const std::string dir = family_dir("phi3-long");
    Golden g;
    ASSERT_TRUE(load_golden(dir, &g)) << dir;
    const std::string tmp = test::temp_dir("families_phi3_fused");
    ASSERT_TRUE(to_f32_gguf(dir, tmp + "/kiln.gguf").is_ok());
    auto src = formats::GgufFile::open(tmp + "/kiln.gguf");
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    formats::GgufWriter w;
    std::vector<float> short_f, long_f;
    for (const std::string& key : src->keys()) {
        if (key == "phi3.rope.scaling.short_factor") short_f = *src->get_float_array(key);
        if (key == "phi3.rope.scaling.long_factor") long_f = *src->get_float_array(key);
        if (key == "phi3.rope.scaling.short_factor" || key == "phi3.rope.scaling.long_factor" ||
            key == "phi3.rope.scaling.type")
            continue;
        w.set(key, *src->find(key));
    }
    ASSERT_EQ(short_f.size(), 4u);
    ASSERT_EQ(long_f.size(), 4u);
    std::vector<std::vector<uint8_t>> fused;  // kept alive until write
    auto find = [&](const std::string& name) {
        for (const formats::GgufTensorInfo& t : src->tensors())
            if (t.name == name) return &t;
        return static_cast<const formats::GgufTensorInfo*>(nullptr);
    };
    auto fuse = [&](const std::string& out, std::initializer_list<std::string> parts) {
        std::vector<uint8_t> bytes;
        uint64_t rows = 0, cols = 0;
        for (const std::string& p : parts) {
            const formats::GgufTensorInfo* t = find(p);
            ASSERT_NE(t, nullptr) << p;
            const uint8_t* d = src->tensor_data(*t);
            bytes.insert(bytes.end(), d, d + t->num_bytes);
            rows += t->shape[0];
            cols = t->shape[1];
        }
        fused.push_back(std::move(bytes));
        w.add_tensor(out, core::DType::kF32, {rows, cols}, fused.back().data(), fused.back().size());
    };
    fused.reserve(16);
    for (const formats::GgufTensorInfo& t : src->tensors()) {
        const std::string& n = t.name;
        if (n.ends_with("attn_q.weight")) {
            const std::string b = n.substr(0, n.size() - std::string("attn_q.weight").size());
            fuse(b + "attn_qkv.weight", {b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"});
        } else if (n.ends_with("ffn_gate.weight")) {
            const std::string b = n.substr(0, n.size() - std::string("ffn_gate.weight").size());
            fuse(b + "ffn_up.weight", {b + "ffn_gate.weight", b + "ffn_up.weight"});
        } else if (!n.ends_with("attn_k.weight") && !n.ends_with("attn_v.weight") && !n.ends_with("ffn_up.weight")) {
            w.add_tensor(n, t.dtype, t.shape, src->tensor_data(t), t.num_bytes);
        }
    }
    w.add_tensor("rope_factors_short.weight", core::DType::kF32, {4}, short_f.data(), 16);
    w.add_tensor("rope_factors_long.weight", core::DType::kF32, {4}, long_f.data(), 16);
    ASSERT_TRUE(w.write(tmp + "/llamacpp.gguf").is_ok());
    auto ck = loader::load_checkpoint(tmp + "/llamacpp.gguf");
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->config.rope_scaling.type, "longrope");
    EXPECT_EQ(ck->find("blk.0.attn_qkv.weight"), nullptr);
    ASSERT_NE(ck->find("blk.1.ffn_gate.weight"), nullptr);
    check_model(*ck, g, "phi3-long (llama.cpp-style gguf)");
    // Neither fused Phi-3 nor Gemma's shifted norms have a safetensors writer yet: refused by name.
    loader::ConvertOptions hf;
    hf.to = "safetensors";
    EXPECT_EQ(loader::convert_checkpoint(tmp + "/llamacpp.gguf", tmp + "/hf", hf).code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(loader::convert_checkpoint(family_dir("gemma3"), tmp + "/hf2", hf).code(),
              core::StatusCode::kUnsupported);
}

// transformers 5's fused expert layout: per layer mlp.experts.gate_up_proj [E, 2F, H] (each expert's
// gate rows, then its up rows) and mlp.experts.down_proj [E, H, F] instead of one tensor per expert
// and projection. The qwen3-moe folder rewritten that way loads to the same model (kiln splits the
// stacks into row views). Converted to safetensors by kiln (per-expert names again, Mixtral's w1/w2/w3
// for mixtral) and back, the mixtral and qwen2-moe models still match transformers; their GGUF holds
// llama.cpp's stacked ffn_*_exps tensors and expert_count keys.
TEST(Families, MoeLayoutsFusedExpertsGgufStacksAndSafetensorsRoundTrip) {
    const std::string tmp = test::temp_dir("families_moe_layouts");
    {
        const std::string dir = family_dir("qwen3-moe");
        Golden g;
        ASSERT_TRUE(load_golden(dir, &g)) << dir;
        auto set = formats::SafetensorsSet::open(dir);
        ASSERT_TRUE(set.is_ok()) << set.status().to_string();
        auto ck = loader::load_checkpoint(dir);
        ASSERT_TRUE(ck.is_ok());
        const loader::ModelConfig& c = ck->config;
        const uint64_t E = uint64_t(c.num_experts), F = uint64_t(c.expert_intermediate_size), H = uint64_t(c.hidden_size);
        std::vector<formats::SafetensorsTensorIn> out;
        std::vector<std::vector<float>> fused;
        fused.reserve(size_t(2 * c.num_layers));
        for (size_t i = 0; i < set->num_tensors(); ++i) {
            const formats::SafetensorsTensorInfo& t = set->tensor(i);
            if (t.name.find(".mlp.experts.") == std::string::npos)
                out.push_back({t.name, t.dtype, t.shape, set->tensor_data(i), t.num_bytes});
        }
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
            auto rows = [&](uint64_t e, const char* proj) {
                const uint8_t* d = set->find_data(p + std::to_string(e) + "." + proj + ".weight");
                EXPECT_NE(d, nullptr) << proj;
                return reinterpret_cast<const float*>(d);
            };
            std::vector<float> gate_up, down;
            for (uint64_t e = 0; e < E; ++e) {
                gate_up.insert(gate_up.end(), rows(e, "gate_proj"), rows(e, "gate_proj") + F * H);
                gate_up.insert(gate_up.end(), rows(e, "up_proj"), rows(e, "up_proj") + F * H);
                down.insert(down.end(), rows(e, "down_proj"), rows(e, "down_proj") + H * F);
            }
            fused.push_back(std::move(gate_up));
            out.push_back({p + "gate_up_proj", core::DType::kF32, {E, 2 * F, H}, fused.back().data(), fused.back().size() * 4});
            fused.push_back(std::move(down));
            out.push_back({p + "down_proj", core::DType::kF32, {E, H, F}, fused.back().data(), fused.back().size() * 4});
        }
        const std::string fdir = tmp + "/fused";
        ASSERT_TRUE(write_hf_folder(dir, fdir, out).is_ok());
        auto fck = loader::load_checkpoint(fdir);
        ASSERT_TRUE(fck.is_ok()) << fck.status().to_string();
        check_model(*fck, g, "qwen3-moe (fused 3-D experts)");
    }
    for (const std::string name : {"mixtral", "qwen2-moe"}) {
        const std::string dir = family_dir(name);
        Golden g;
        ASSERT_TRUE(load_golden(dir, &g)) << dir;
        const std::string gguf = tmp + "/" + name + ".gguf";
        ASSERT_TRUE(to_f32_gguf(dir, gguf).is_ok());
        auto file = formats::GgufFile::open(gguf);
        ASSERT_TRUE(file.is_ok());
        const std::string arch = name == "mixtral" ? "llama" : "qwen2moe";
        EXPECT_EQ(file->get_string("general.architecture"), arch);
        EXPECT_EQ(file->get_int(arch + ".expert_count"), 4);
        EXPECT_EQ(file->get_int(arch + ".expert_used_count"), 2);
        const formats::GgufTensorInfo* gate = file->find_tensor("blk.1.ffn_gate_exps.weight");
        ASSERT_NE(gate, nullptr);
        auto ck = loader::load_checkpoint(dir);
        ASSERT_TRUE(ck.is_ok());
        EXPECT_EQ(gate->shape, (std::vector<uint64_t>{4, uint64_t(ck->config.expert_intermediate_size),
                                                      uint64_t(ck->config.hidden_size)}));
        EXPECT_EQ(file->find_tensor("blk.1.ffn_gate.0.weight"), nullptr);
        if (name == "qwen2-moe") {
            const formats::GgufTensorInfo* sg = file->find_tensor("blk.0.ffn_gate_inp_shexp.weight");
            ASSERT_NE(sg, nullptr);
            EXPECT_EQ(sg->shape, (std::vector<uint64_t>{uint64_t(ck->config.hidden_size)}));  // llama.cpp's {n_embd}
        }
        loader::ConvertOptions hf;
        hf.to = "safetensors";
        const std::string hdir = tmp + "/" + name + "-hf";
        ASSERT_TRUE(loader::convert_checkpoint(gguf, hdir, hf).is_ok());
        auto st = formats::SafetensorsSet::open(hdir);
        ASSERT_TRUE(st.is_ok());
        EXPECT_NE(st->find_tensor(name == "mixtral" ? "model.layers.0.block_sparse_moe.experts.3.w2.weight"
                                                    : "model.layers.0.mlp.experts.3.down_proj.weight"),
                  nullptr);
        auto back = loader::load_checkpoint(hdir);
        ASSERT_TRUE(back.is_ok()) << back.status().to_string();
        EXPECT_EQ(back->config.num_experts, ck->config.num_experts);
        EXPECT_EQ(back->config.norm_topk_prob, ck->config.norm_topk_prob);
        EXPECT_EQ(back->config.shared_expert_intermediate_size, ck->config.shared_expert_intermediate_size);
        check_model(*back, g, name + " (gguf -> safetensors)");
    }
}

// gpt-oss's experts as OpenAI publishes them: MXFP4 blocks [E, rows, cols / 32, 16] with E8M0 scales,
// output-major, gate and up rows interleaved, element 2i in byte i's low nibble. The tiny model's
// experts are quantized into that layout here (quant::quantize_mxfp4, the OCP rounding) and decoded
// again with transformers' formula (convert_moe_packed_tensors: FP4_VALUES[nibble] * 2^(scale - 127))
// into an f32 folder in transformers' bf16 layout; kiln's MXFP4 repack at load must give the logits
// the decoded f32 folder gives.
TEST(Families, GptOssFromPublishedMxfp4Experts) {
    const std::string dir = family_dir("gpt-oss");
    Golden g;
    ASSERT_TRUE(load_golden(dir, &g)) << dir;
    auto set = formats::SafetensorsSet::open(dir);
    ASSERT_TRUE(set.is_ok()) << set.status().to_string();
    auto ck = loader::load_checkpoint(dir);
    ASSERT_TRUE(ck.is_ok());
    const loader::ModelConfig& c = ck->config;
    const int64_t E = c.num_experts, F = c.expert_intermediate_size, H = c.hidden_size;
    constexpr float kFp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    std::vector<formats::SafetensorsTensorIn> mx, ref;
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<std::vector<float>> floats;
    bytes.reserve(64), floats.reserve(64);
    for (size_t i = 0; i < set->num_tensors(); ++i) {
        const formats::SafetensorsTensorInfo& t = set->tensor(i);
        const bool gate_up = t.name.ends_with("mlp.experts.gate_up_proj"), down = t.name.ends_with("mlp.experts.down_proj");
        if (!gate_up && !down) {
            mx.push_back({t.name, t.dtype, t.shape, set->tensor_data(i), t.num_bytes});
            ref.push_back(mx.back());
            continue;
        }
        const int64_t in = gate_up ? H : F, rows = gate_up ? 2 * F : H, G = in / 32;
        const float* w = reinterpret_cast<const float*>(set->tensor_data(i));  // [E, in, rows]
        std::vector<uint8_t> blocks, scales;
        std::vector<float> decoded(size_t(E * in * rows));  // [E, in, rows], transformers' layout again
        for (int64_t e = 0; e < E; ++e) {
            std::vector<float> out_major(size_t(rows * in));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t k = 0; k < in; ++k) out_major[size_t(r * in + k)] = w[(e * in + k) * rows + r];
            auto q = quant::quantize_mxfp4(out_major, rows, in);
            ASSERT_TRUE(q.is_ok());
            blocks.insert(blocks.end(), q->data.begin(), q->data.end());
            scales.insert(scales.end(), q->scales.begin(), q->scales.end());
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t k = 0; k < in; ++k) {
                    const uint8_t byte = q->data[size_t(r * (in / 2) + k / 2)];
                    const float v = kFp4[k % 2 ? byte >> 4 : byte & 15];
                    decoded[size_t((e * in + k) * rows + r)] =
                        std::ldexp(v, int(q->scales[size_t(r * G + k / 32)]) - 127);
                }
        }
        bytes.push_back(std::move(blocks));
        mx.push_back({t.name + "_blocks", core::DType::kU8, {uint64_t(E), uint64_t(rows), uint64_t(G), 16},
                      bytes.back().data(), bytes.back().size()});
        bytes.push_back(std::move(scales));
        mx.push_back({t.name + "_scales", core::DType::kU8, {uint64_t(E), uint64_t(rows), uint64_t(G)},
                      bytes.back().data(), bytes.back().size()});
        floats.push_back(std::move(decoded));
        ref.push_back({t.name, core::DType::kF32, t.shape, floats.back().data(), floats.back().size() * 4});
    }
    const std::string tmp = test::temp_dir("families_gpt_oss_mxfp4");
    std::vector<std::vector<float>> logits;
    for (const auto& [name, tensors] : {std::pair{"mxfp4", &mx}, std::pair{"ref", &ref}}) {
        const std::string d = tmp + "/" + name;
        ASSERT_TRUE(write_hf_folder(dir, d, *tensors).is_ok());
        auto m_ck = loader::load_checkpoint(d);
        ASSERT_TRUE(m_ck.is_ok()) << name << ": " << m_ck.status().to_string();
        if (std::string(name) == "mxfp4") {
            EXPECT_EQ(m_ck->find("blk.1.ffn_up.3.weight")->dtype, core::DType::kMxfp4);
        }
        core::ThreadPool pool(2);
        ops::LinearOptions f32;
        f32.f32_activations = true;
        auto model = CpuModel::create(*m_ck, &pool, f32);
        ASSERT_TRUE(model.is_ok()) << model.status().to_string();
        KvCache cache((*model)->config(), int64_t(g.prompts[2].size()));
        auto l = (*model)->forward(g.prompts[2], cache, true);
        ASSERT_TRUE(l.is_ok());
        logits.push_back(*l);
    }
    const auto [lo, hi] = std::minmax_element(logits[1].begin(), logits[1].end());
    double worst = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) worst = std::max(worst, double(std::abs(logits[0][i] - logits[1][i])));
    EXPECT_LE(worst, 1e-4 * (double(*hi) - double(*lo)));
    std::printf("[ gpt-oss mxfp4 experts vs their f32 decoding ] max |diff| %.3g over a logit range %.3g\n", worst,
                double(*hi) - double(*lo));
}

// kiln quantize on mixtures of experts, round to nearest: every expert's (and the shared expert's)
// projections are quantized, the routers stay f32 and are listed in quantization_config's ignore,
// and the folder loads back close to the f32 model. Bounds: the measured worst logit error over the
// three prompts, in units of the prompt's logit range, with ~1.5-2x margin (measured: int8 0.011 -
// 0.023, mixtral w4-g32 0.43, mxfp4 0.41; the dense llama / mistral models give 0.014 at int8 and
// 0.17 - 0.18 at w4-g32: a wrong expert's discrete choice amplifies 4-bit weight error here). The
// int8 cases are the ones that catch an expert's weights written under another's name.
TEST(Families, MoeExpertsQuantizeRoundToNearest) {
    struct Case {
        const char* family;
        const char* format;
        double bound;  // max |logit error| / logit range
    };
    const Case cases[] = {{"mixtral", "int8", 0.03},   {"mixtral", "w4-g32", 0.6},  {"mixtral", "mxfp4", 0.6},
                          {"qwen2-moe", "int8", 0.03}, {"qwen3-moe", "int8", 0.03}, {"olmoe", "int8", 0.04}};
    const std::string tmp = test::temp_dir("families_moe_quantize");
    core::ThreadPool pool(2);
    for (const Case& c : cases) {
        const std::string what = std::string(c.family) + " " + c.format;
        const std::string dir = family_dir(c.family);
        Golden g;
        ASSERT_TRUE(load_golden(dir, &g)) << dir;
        auto src = loader::load_checkpoint(dir);
        ASSERT_TRUE(src.is_ok());
        quant_tools::QuantizeOptions o;
        auto scheme = loader::parse_quant_scheme(c.format);
        ASSERT_TRUE(scheme.is_ok());
        o.scheme = *scheme;
        const std::string out = tmp + "/" + c.family + "-" + c.format;
        auto report = quant_tools::quantize_checkpoint(*src, out, o, &pool);
        ASSERT_TRUE(report.is_ok()) << what << ": " << report.status().to_string();
        const int64_t L = src->config.num_layers, E = src->config.num_experts;
        const int64_t shared = src->config.shared_expert_intermediate_size > 0 ? 3 : 0;
        auto q = loader::load_checkpoint(out);
        ASSERT_TRUE(q.is_ok()) << what << ": " << q.status().to_string();
        if (E > 0) {
            EXPECT_EQ(report->quantized, L * (4 + 3 * E + shared)) << what;
            ASSERT_NE(q->find("blk.1.ffn_down.3.weight"), nullptr) << what;
            EXPECT_NE(q->find("blk.1.ffn_down.3.weight")->dtype, core::DType::kF32) << what;
            EXPECT_EQ(q->find("blk.1.ffn_gate_inp.weight")->dtype, core::DType::kF32) << what;
        }
        ops::LinearOptions f32;
        f32.f32_activations = true;
        auto model = CpuModel::create(*q, &pool, f32);
        ASSERT_TRUE(model.is_ok()) << what << ": " << model.status().to_string();
        double worst = 0;
        for (size_t p = 0; p < g.prompts.size(); ++p) {
            KvCache cache((*model)->config(), int64_t(g.prompts[p].size()));
            auto l = (*model)->forward(g.prompts[p], cache, true);
            ASSERT_TRUE(l.is_ok());
            const auto [lo, hi] = std::minmax_element(g.logits[p].begin(), g.logits[p].end());
            for (size_t i = 0; i < l->size(); ++i)
                worst = std::max(worst, std::abs(double((*l)[i]) - double(g.logits[p][i])) / (double(*hi) - double(*lo)));
        }
        EXPECT_LE(worst, c.bound) << what;
        std::printf("[ %s ] max |logit error| / range %.4f (bound %.2f)\n", what.c_str(), worst, c.bound);
    }
}

// GPTQ on a mixture of experts: each expert's Hessian comes from the calibration tokens routed to it.
// On the tiny Mixtral (top-2 of 4) with 1024 calibration tokens every expert gets enough rows, and
// GPTQ's logits are closer to the f32 model's than round-to-nearest's at the same w4-g32 with zero
// points; with 24 tokens some experts get too few and are rounded to nearest instead, and the report
// counts them. The calibration ids are a fixed pseudo-random sequence (the tiny models have no
// tokenizer).
TEST(Families, MoeGptqCalibratesEachExpertOnItsTokens) {
    const std::string dir = family_dir("mixtral");
    Golden g;
    ASSERT_TRUE(load_golden(dir, &g)) << dir;
    auto src = loader::load_checkpoint(dir);
    ASSERT_TRUE(src.is_ok());
    core::ThreadPool pool(2);
    std::vector<int32_t> calib(1024);
    uint32_t state = 12345;
    for (int32_t& t : calib) state = state * 1103515245u + 12345u, t = int32_t(3 + (state >> 16) % 253);
    const std::string tmp = test::temp_dir("families_moe_gptq");
    auto error_of = [&](const std::string& out) {
        auto q = loader::load_checkpoint(out);
        EXPECT_TRUE(q.is_ok()) << q.status().to_string();
        ops::LinearOptions f32;
        f32.f32_activations = true;
        auto model = CpuModel::create(*q, &pool, f32);
        EXPECT_TRUE(model.is_ok());
        double sum = 0;
        size_t n = 0;
        for (size_t p = 0; p < g.prompts.size(); ++p) {
            KvCache cache((*model)->config(), int64_t(g.prompts[p].size()));
            auto l = (*model)->forward(g.prompts[p], cache, true);
            for (size_t i = 0; i < l->size(); ++i, ++n) sum += std::pow(double((*l)[i]) - double(g.logits[p][i]), 2);
        }
        return std::sqrt(sum / double(n));
    };
    quant_tools::QuantizeOptions rtn;
    rtn.scheme = *loader::parse_quant_scheme("w4-g32");
    rtn.scheme.zero_point = true;
    ASSERT_TRUE(quant_tools::quantize_checkpoint(*src, tmp + "/rtn", rtn, &pool).is_ok());
    quant_tools::QuantizeOptions gptq = rtn;
    gptq.gptq = true;
    gptq.calib_tokens = calib;
    gptq.calibration.chunk_tokens = 64;
    auto report = quant_tools::quantize_checkpoint(*src, tmp + "/gptq", gptq, &pool);
    ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    EXPECT_EQ(report->rtn_experts, 0);
    const double e_rtn = error_of(tmp + "/rtn"), e_gptq = error_of(tmp + "/gptq");
    std::printf("[ mixtral w4-g32 zero points ] logit RMS error: round to nearest %.4f, GPTQ per expert %.4f\n", e_rtn,
                e_gptq);
    EXPECT_LT(e_gptq, e_rtn);
    gptq.calib_tokens.resize(24);  // 48 routed rows over 8 (layer, expert) inputs: some below min_expert_rows
    auto few = quant_tools::quantize_checkpoint(*src, tmp + "/few", gptq, &pool);
    ASSERT_TRUE(few.is_ok()) << few.status().to_string();
    EXPECT_GT(few->rtn_experts, 0);
    EXPECT_LE(few->rtn_experts, 8);
    EXPECT_EQ(few->quantized, 32);
}

// Broken MoE files fail to load with an error naming what is wrong: a GGUF expert stack of the wrong
// shape, more experts per token than experts, an HF folder missing one expert's projection, gpt-oss
// MXFP4 blocks without their scales.
TEST(Families, MoeBadFilesAreClearErrors) {
    const std::string tmp = test::temp_dir("families_moe_bad");
    ASSERT_TRUE(to_f32_gguf(family_dir("mixtral"), tmp + "/good.gguf").is_ok());
    auto src = formats::GgufFile::open(tmp + "/good.gguf");
    ASSERT_TRUE(src.is_ok());
    // Rewrites good.gguf with key `key` set to `value` (when set) and tensor `drop_rows`'s first dimension one short.
    auto rewrite = [&](const std::string& out, const std::string& key, std::optional<formats::GgufValue> value,
                       const std::string& short_tensor) {
        formats::GgufWriter w;
        for (const std::string& k : src->keys()) w.set(k, k == key && value ? *value : *src->find(k));
        for (const formats::GgufTensorInfo& t : src->tensors()) {
            std::vector<uint64_t> shape = t.shape;
            uint64_t bytes = t.num_bytes;
            if (t.name == short_tensor) bytes -= bytes / shape[0], shape[0] -= 1;
            w.add_tensor(t.name, t.dtype, shape, src->tensor_data(t), bytes);
        }
        return w.write(out);
    };
    ASSERT_TRUE(rewrite(tmp + "/stack.gguf", "", std::nullopt, "blk.1.ffn_down_exps.weight").is_ok());
    auto stack = loader::load_checkpoint(tmp + "/stack.gguf");
    ASSERT_FALSE(stack.is_ok());
    EXPECT_EQ(stack.status().code(), core::StatusCode::kCorrupt);
    EXPECT_NE(stack.status().message().find("blk.1.ffn_down_exps.weight"), std::string::npos) << stack.status().message();
    ASSERT_TRUE(rewrite(tmp + "/used.gguf", "llama.expert_used_count", formats::gguf_u32(5), "").is_ok());
    auto used = loader::load_checkpoint(tmp + "/used.gguf");
    ASSERT_FALSE(used.is_ok());
    EXPECT_NE(used.status().message().find("num_experts_used"), std::string::npos) << used.status().message();

    // An HF folder without one expert's up_proj.
    auto set = formats::SafetensorsSet::open(family_dir("qwen2-moe"));
    ASSERT_TRUE(set.is_ok());
    std::vector<formats::SafetensorsTensorIn> kept;
    for (size_t i = 0; i < set->num_tensors(); ++i) {
        const formats::SafetensorsTensorInfo& t = set->tensor(i);
        if (t.name != "model.layers.1.mlp.experts.2.up_proj.weight")
            kept.push_back({t.name, t.dtype, t.shape, set->tensor_data(i), t.num_bytes});
    }
    const std::string hdir = tmp + "/missing";
    ASSERT_TRUE(write_hf_folder(family_dir("qwen2-moe"), hdir, kept).is_ok());
    auto missing = loader::load_checkpoint(hdir);
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("blk.1.ffn_up.2.weight"), std::string::npos) << missing.status().message();

    // gpt-oss MXFP4 blocks whose scales are not in the folder.
    const std::string odir = tmp + "/oss";
    const std::vector<uint8_t> blocks(4 * 64 * 1 * 16, 0x11);
    const std::vector<formats::SafetensorsTensorIn> oss = {
        {"model.layers.0.mlp.experts.gate_up_proj_blocks", core::DType::kU8, {4, 64, 1, 16}, blocks.data(), blocks.size()}};
    ASSERT_TRUE(write_hf_folder(family_dir("gpt-oss"), odir, oss).is_ok());
    auto no_scales = loader::load_checkpoint(odir);
    ASSERT_FALSE(no_scales.is_ok());
    EXPECT_NE(no_scales.status().message().find("_scales"), std::string::npos) << no_scales.status().message();
}

// Batch invariance for every family's blocks (GeGLU, post-norms, soft-caps, LongRoPE, fused
// projections included): a prompt's logits are the same bits alone, batched behind another sequence
// and prefilled in two chunks, over a paged f32 cache (block size 4, blocks not in order), with the
// default (packed, quantized-activation) kernels.
TEST_P(Families, BatchInvariantOverAPagedCache) {
    const std::string dir = family_dir(GetParam());
    Golden g;
    ASSERT_TRUE(load_golden(dir, &g)) << dir;
    auto ck = loader::load_checkpoint(dir);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    core::ThreadPool pool(2);
    auto model = CpuModel::create(*ck, &pool);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const ModelConfig& c = (*model)->config();
    constexpr int64_t kBlock = 4, kBlocks = 24;
    std::vector<std::vector<float>> k(size_t(c.num_layers)), v(size_t(c.num_layers));
    KvLayers kv;
    kv.block_size = kBlock;
    kv.num_slots = kBlocks * kBlock;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        k[size_t(l)].assign(size_t(kv.num_slots * c.kv_dim()), 0.0f);
        v[size_t(l)].assign(size_t(kv.num_slots * c.kv_dim()), 0.0f);
        kv.k.push_back(k[size_t(l)].data());
        kv.v.push_back(v[size_t(l)].data());
    }
    const std::vector<int32_t>& a = g.prompts[2];  // 19 tokens
    const std::vector<int32_t>& b = g.prompts[1];  // 7 tokens
    const std::vector<int32_t> table_a = {9, 2, 17, 5, 11}, table_b = {3, 20};
    const int64_t na = int64_t(a.size()), nb = int64_t(b.size());
    std::vector<float> alone, batched, chunk1, chunk2;
    const BatchSeq sa{0, na, table_a, na};
    ASSERT_TRUE((*model)->forward_batch(a, std::span<const BatchSeq>(&sa, 1), kv, alone).is_ok());
    std::vector<int32_t> ba(b);
    ba.insert(ba.end(), a.begin(), a.end());
    const std::vector<int32_t> table_a2 = {0, 7, 13, 1, 22};
    const BatchSeq two[] = {{0, nb, table_b, nb}, {0, na, table_a2, na}};
    ASSERT_TRUE((*model)->forward_batch(ba, two, kv, batched).is_ok());
    const size_t V = size_t(c.vocab_size);
    ASSERT_EQ(batched.size(), size_t(nb + na) * V);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + int64_t(size_t(nb) * V)))
        << GetParam() << ": batched logits differ from the sequence alone";
    const std::vector<int32_t> table_a3 = {4, 15, 6, 19, 8};
    const BatchSeq first{0, 5, table_a3, 5}, rest{5, na - 5, table_a3, na - 5};
    ASSERT_TRUE((*model)->forward_batch(std::span<const int32_t>(a).first(5), std::span<const BatchSeq>(&first, 1), kv,
                                        chunk1)
                    .is_ok());
    ASSERT_TRUE((*model)->forward_batch(std::span<const int32_t>(a).subspan(5), std::span<const BatchSeq>(&rest, 1), kv,
                                        chunk2)
                    .is_ok());
    chunk1.insert(chunk1.end(), chunk2.begin(), chunk2.end());
    EXPECT_EQ(chunk1, alone) << GetParam() << ": chunked prefill differs from one pass";
}

INSTANTIATE_TEST_SUITE_P(Transformers, Families,
                         ::testing::Values("llama", "llama3-rope", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
                                           "phi3-long", "mixtral", "qwen2-moe", "qwen3-moe", "olmoe", "gpt-oss"),
                         [](const auto& info) {
                             std::string n = info.param;
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n;
                         });

}  // namespace
}  // namespace kiln::model
