// Conversions between llama2.c, GGUF and HF safetensors: every tensor survives bit-exact, the HF
// Q/K permutation is applied on write and undone on load, the GGUF tokenizer rides through
// safetensors, --dtype rounds like core/numeric.h, and quantized tensors are kept or refused.
#include "loader/convert.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/numeric.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "kernels/ref/dequant.h"
#include "loader/checkpoint.h"
#include "loader/weight_names.h"
#include "support/test_support.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;

std::string stories() {
    return test::testdata("models/stories260K/stories260K.bin");
}
std::string tok512() {
    return test::testdata("models/stories260K/tok512.bin");
}

ConvertOptions to(const std::string& format, std::optional<DType> dtype = std::nullopt, std::string tokenizer = "") {
    ConvertOptions o;
    o.to = format;
    o.dtype = dtype;
    o.tokenizer_path = std::move(tokenizer);
    return o;
}

Checkpoint load_ok(const std::string& path) {
    auto ck = load_checkpoint(path);
    EXPECT_TRUE(ck.is_ok()) << path << ": " << ck.status().to_string();
    return ck.is_ok() ? std::move(ck).value() : Checkpoint{};
}

void expect_same_tensors(const Checkpoint& want, const Checkpoint& got) {
    EXPECT_EQ(want.tensors.size(), got.tensors.size());
    for (const TensorRef& w : want.tensors) {
        const TensorRef* g = got.find(w.name);
        ASSERT_NE(g, nullptr) << w.name << " missing in " << got.path;
        EXPECT_EQ(g->dtype, w.dtype) << w.name;
        EXPECT_EQ(g->shape, w.shape) << w.name;
        ASSERT_EQ(g->num_bytes, w.num_bytes) << w.name;
        EXPECT_EQ(0, std::memcmp(g->data, w.data, w.num_bytes)) << w.name << " differs in " << got.path;
    }
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.intermediate_size, b.intermediate_size);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.num_heads, b.num_heads);
    EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.max_seq_len, b.max_seq_len);
    EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
}

GgufMetadata tokenizer_keys(const Checkpoint& ck) {
    GgufMetadata out;
    for (const auto& kv : ck.gguf_metadata)
        if (kv.first.rfind("tokenizer.", 0) == 0) out.push_back(kv);
    return out;
}

// HF's permute(w, n_heads, dim1, dim2) = w.view(n_heads, dim1 / n_heads / 2, 2, dim2).transpose(1, 2),
// written as index arithmetic on [n_heads, 2, half] <- [n_heads, half, 2].
std::vector<uint8_t> hf_permute_reference(const uint8_t* w, uint64_t rows, uint64_t row_bytes, uint64_t heads) {
    std::vector<uint8_t> out(rows * row_bytes);
    uint64_t half = rows / heads / 2;
    for (uint64_t h = 0; h < heads; ++h)
        for (uint64_t a = 0; a < half; ++a)
            for (uint64_t b = 0; b < 2; ++b)
                std::memcpy(&out[((h * 2 + b) * half + a) * row_bytes], w + ((h * half + a) * 2 + b) * row_bytes,
                            row_bytes);
    return out;
}

TEST(Convert, BinToGgufToSafetensorsToGgufIsBitExact) {
    if (!test::file_exists(stories())) KILN_SKIP_MISSING() << "test data missing";
    const std::string dir = test::temp_dir("convert_chain");
    Checkpoint bin = load_ok(stories());

    ASSERT_TRUE(convert_checkpoint(stories(), dir + "/a.gguf", to("gguf", std::nullopt, tok512())).is_ok());
    Checkpoint g1 = load_ok(dir + "/a.gguf");
    EXPECT_EQ(g1.format, "gguf");
    expect_same_tensors(bin, g1);
    expect_same_config(bin.config, g1.config);
    EXPECT_EQ(g1.config.name, "stories260K");
    EXPECT_EQ(g1.config.bos_token_id, 1);
    EXPECT_EQ(g1.config.eos_token_ids, std::vector<int64_t>{2});

    // The llama2.c tokenizer became a SentencePiece-style GGUF vocabulary.
    auto gguf = formats::GgufFile::open(dir + "/a.gguf");
    ASSERT_TRUE(gguf.is_ok());
    EXPECT_EQ(gguf->get_string("general.architecture"), "llama");
    EXPECT_EQ(gguf->get_int("llama.attention.head_count_kv"), 4);
    EXPECT_EQ(gguf->get_string("tokenizer.ggml.model"), "llama");
    auto tokens = gguf->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    ASSERT_EQ(tokens->size(), 512u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ((*tokens)[1], "<s>");
    EXPECT_EQ((*tokens)[2], "</s>");
    EXPECT_EQ((*tokens)[3], "<0x00>");
    EXPECT_EQ((*tokens)[259], "\xe2\x96\x81t");
    auto types = gguf->get_int_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.has_value());
    EXPECT_EQ((*types)[0], 2);
    EXPECT_EQ((*types)[1], 3);
    EXPECT_EQ((*types)[2], 3);
    EXPECT_EQ((*types)[3], 6);
    EXPECT_EQ((*types)[258], 6);
    EXPECT_EQ((*types)[259], 1);
    auto scores = gguf->get_float_array("tokenizer.ggml.scores");
    ASSERT_TRUE(scores.has_value());
    EXPECT_EQ((*scores)[260], -1.0f);

    ASSERT_TRUE(convert_checkpoint(dir + "/a.gguf", dir + "/hf", to("safetensors")).is_ok());
    Checkpoint s = load_ok(dir + "/hf");
    EXPECT_EQ(s.format, "safetensors");
    expect_same_tensors(bin, s);
    expect_same_config(bin.config, s.config);
    EXPECT_EQ(tokenizer_keys(s), tokenizer_keys(g1));

    // On disk the HF file holds HF names and rotate-half Q/K rows.
    auto raw = formats::SafetensorsFile::open(dir + "/hf/model.safetensors");
    ASSERT_TRUE(raw.is_ok());
    EXPECT_EQ(raw->metadata().at("format"), "pt");
    for (const char* proj : {"q_proj", "k_proj"}) {
        const auto* t = raw->find_tensor(std::string("model.layers.3.self_attn.") + proj + ".weight");
        ASSERT_NE(t, nullptr) << proj;
        const TensorRef* canon = bin.find(std::string("blk.3.attn_") + proj[0] + ".weight");
        uint64_t heads = proj[0] == 'q' ? 8 : 4;
        std::vector<uint8_t> want = hf_permute_reference(canon->data, canon->shape[0], 64 * 4, heads);
        ASSERT_EQ(t->num_bytes, want.size());
        EXPECT_EQ(0, std::memcmp(raw->tensor_data(*t), want.data(), want.size())) << proj;
        EXPECT_NE(0, std::memcmp(raw->tensor_data(*t), canon->data, want.size())) << proj;
    }
    EXPECT_EQ(raw->find_tensor("lm_head.weight"), nullptr);  // tied

    ASSERT_TRUE(convert_checkpoint(dir + "/hf", dir + "/b.gguf", to("gguf")).is_ok());
    Checkpoint g2 = load_ok(dir + "/b.gguf");
    expect_same_tensors(bin, g2);
    expect_same_config(bin.config, g2.config);
    EXPECT_EQ(tokenizer_keys(g2), tokenizer_keys(g1));
}

TEST(Convert, BinToSafetensorsDirectly) {
    if (!test::file_exists(stories())) KILN_SKIP_MISSING() << "test data missing";
    const std::string dir = test::temp_dir("convert_bin_st");
    Checkpoint bin = load_ok(stories());
    ASSERT_TRUE(convert_checkpoint(stories(), dir + "/hf", to("safetensors")).is_ok());
    Checkpoint s = load_ok(dir + "/hf");
    expect_same_tensors(bin, s);
    expect_same_config(bin.config, s.config);
    EXPECT_TRUE(s.gguf_metadata.empty());  // no --tokenizer given
    auto hf = formats::load_hf_config(dir + "/hf/config.json");
    ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
    EXPECT_EQ(hf->architecture, "LlamaForCausalLM");
    EXPECT_EQ(hf->torch_dtype, "float32");
    EXPECT_TRUE(hf->tie_word_embeddings);
    // A single .safetensors path with config.json beside it loads the same.
    Checkpoint single = load_ok(dir + "/hf/model.safetensors");
    expect_same_tensors(bin, single);
}

// --layers N keeps the first N layers' tensors and every other tensor, bit for bit, and says N in the
// config; N at or above the source's count is an error.
TEST(Convert, FirstLayersOnly) {
    if (!test::file_exists(stories())) KILN_SKIP_MISSING() << "test data missing";
    const std::string dir = test::temp_dir("convert_layers");
    Checkpoint bin = load_ok(stories());
    ConvertOptions o = to("gguf");
    o.num_layers = 2;
    ASSERT_LT(o.num_layers, bin.config.num_layers);
    ASSERT_TRUE(convert_checkpoint(stories(), dir + "/two.gguf", o).is_ok());
    Checkpoint two = load_ok(dir + "/two.gguf");
    EXPECT_EQ(two.config.num_layers, 2);
    size_t kept = 0;
    for (const TensorRef& t : bin.tensors) {
        const bool layer = t.name.starts_with("blk.");
        const bool keep = !layer || std::stoi(t.name.substr(4)) < 2;
        const TensorRef* u = two.find(t.name);
        if (!keep) {
            EXPECT_EQ(u, nullptr) << t.name;
            continue;
        }
        ASSERT_NE(u, nullptr) << t.name;
        ASSERT_EQ(u->num_bytes, t.num_bytes) << t.name;
        EXPECT_EQ(std::memcmp(u->data, t.data, t.num_bytes), 0) << t.name;
        ++kept;
    }
    EXPECT_EQ(two.tensors.size(), kept);
    o.num_layers = bin.config.num_layers;
    EXPECT_EQ(convert_checkpoint(stories(), dir + "/all.gguf", o).code(), core::StatusCode::kInvalidArgument);
}

TEST(Convert, PythonReferencePermutationAgrees) {
    if (!test::file_exists(stories())) KILN_SKIP_MISSING() << "test data missing";
    if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0)
        KILN_SKIP_MISSING() << "python3 with safetensors + numpy not installed";
    const std::string dir = test::temp_dir("convert_python");
    ASSERT_TRUE(convert_checkpoint(stories(), dir, to("safetensors")).is_ok());
    // transformers' convert_llama_weights_to_hf.py permute, applied to the .bin's wq/wk with numpy.
    std::string script =
        "import numpy as np; from safetensors.numpy import load_file\n"
        "d = np.fromfile('" +
        stories() +
        "', dtype=np.int32, count=7); dim, hid, L, H, KV, V, S = d\n"
        "f = np.fromfile('" +
        stories() +
        "', dtype=np.float32, offset=28)\n"
        "kv = dim // H * KV; o = V * dim + L * dim\n"
        "wq = f[o:o + L * dim * dim].reshape(L, dim, dim); o += L * dim * dim\n"
        "wk = f[o:o + L * kv * dim].reshape(L, kv, dim)\n"
        "perm = lambda w, n, d1, d2: w.reshape(n, d1 // n // 2, 2, d2).transpose(0, 2, 1, 3).reshape(d1, d2)\n"
        "t = load_file('" +
        dir +
        "/model.safetensors')\n"
        "for l in range(L):\n"
        "    assert np.array_equal(t[f'model.layers.{l}.self_attn.q_proj.weight'], perm(wq[l], H, dim, dim))\n"
        "    assert np.array_equal(t[f'model.layers.{l}.self_attn.k_proj.weight'], perm(wk[l], KV, kv, dim))\n";
    test::write_file(dir + "/check.py", script);
    EXPECT_EQ(std::system(("python3 " + dir + "/check.py").c_str()), 0);
}

TEST(Convert, RopePermutationRoundTripOnOddShapes) {
    // 1 head of 6 rows: interleaved pairs (0,1) (2,3) (4,5) -> halves [0 2 4 | 1 3 5].
    std::vector<uint8_t> rows = {0, 1, 2, 3, 4, 5}, out(6), back(6);
    ASSERT_TRUE(permute_rope_rows(rows.data(), out.data(), 6, 1, 1, RopeOrder::kRotateHalf).is_ok());
    EXPECT_EQ(out, (std::vector<uint8_t>{0, 2, 4, 1, 3, 5}));
    ASSERT_TRUE(permute_rope_rows(out.data(), back.data(), 6, 1, 1, RopeOrder::kInterleaved).is_ok());
    EXPECT_EQ(back, rows);

    std::mt19937 rng(7);
    struct Case {
        uint64_t heads, head_dim, row_bytes;
    };
    for (Case c : {Case{1, 2, 1}, Case{3, 6, 7}, Case{5, 4, 3}, Case{2, 10, 13}, Case{7, 2, 34}}) {
        uint64_t n = c.heads * c.head_dim;
        std::vector<uint8_t> src(n * c.row_bytes), hf(src.size()), again(src.size());
        for (uint8_t& b : src) b = uint8_t(rng());
        ASSERT_TRUE(permute_rope_rows(src.data(), hf.data(), n, c.row_bytes, c.heads, RopeOrder::kRotateHalf).is_ok());
        EXPECT_EQ(hf, hf_permute_reference(src.data(), n, c.row_bytes, c.heads)) << c.heads << "x" << c.head_dim;
        ASSERT_TRUE(
            permute_rope_rows(hf.data(), again.data(), n, c.row_bytes, c.heads, RopeOrder::kInterleaved).is_ok());
        EXPECT_EQ(again, src) << c.heads << "x" << c.head_dim;
    }
    EXPECT_FALSE(permute_rope_rows(rows.data(), out.data(), 6, 1, 4, RopeOrder::kRotateHalf).is_ok());  // 6 % 4
    EXPECT_FALSE(permute_rope_rows(rows.data(), out.data(), 6, 1, 2, RopeOrder::kRotateHalf).is_ok());  // odd head
    EXPECT_FALSE(permute_rope_rows(rows.data(), out.data(), 6, 1, 0, RopeOrder::kRotateHalf).is_ok());
}

TEST(Convert, DtypeF16AndBf16RoundLikeCoreNumeric) {
    if (!test::file_exists(stories())) KILN_SKIP_MISSING() << "test data missing";
    const std::string dir = test::temp_dir("convert_dtype");
    Checkpoint bin = load_ok(stories());
    ASSERT_TRUE(convert_checkpoint(stories(), dir + "/f16.gguf", to("gguf", DType::kF16)).is_ok());
    ASSERT_TRUE(convert_checkpoint(stories(), dir + "/bf16", to("safetensors", DType::kBF16)).is_ok());
    Checkpoint f16 = load_ok(dir + "/f16.gguf");
    Checkpoint bf16 = load_ok(dir + "/bf16");
    for (const TensorRef& orig : bin.tensors) {
        for (const Checkpoint* ck : {&f16, &bf16}) {
            const TensorRef* t = ck->find(orig.name);
            ASSERT_NE(t, nullptr) << orig.name;
            if (orig.shape.size() == 1) {  // norm weights stay f32
                EXPECT_EQ(t->dtype, DType::kF32) << orig.name;
                EXPECT_EQ(0, std::memcmp(t->data, orig.data, orig.num_bytes)) << orig.name;
                continue;
            }
            const bool is_f16 = ck == &f16;
            ASSERT_EQ(t->dtype, is_f16 ? DType::kF16 : DType::kBF16) << orig.name;
            ASSERT_EQ(t->num_bytes * 2, orig.num_bytes);
            for (uint64_t i = 0; i < orig.num_elements(); ++i) {
                float v;
                uint16_t h;
                std::memcpy(&v, orig.data + 4 * i, 4);
                std::memcpy(&h, t->data + 2 * i, 2);
                ASSERT_EQ(h, is_f16 ? core::f32_to_fp16(v) : core::f32_to_bf16(v)) << orig.name << "[" << i << "]";
            }
        }
    }
    auto gguf = formats::GgufFile::open(dir + "/f16.gguf");
    EXPECT_EQ(gguf->get_int("general.file_type"), 1);
    auto hf = formats::load_hf_config(dir + "/bf16/config.json");
    EXPECT_EQ(hf->torch_dtype, "bfloat16");

    // f16 GGUF -> safetensors -> GGUF keeps f16 bits.
    ASSERT_TRUE(convert_checkpoint(dir + "/f16.gguf", dir + "/f16_hf", to("safetensors")).is_ok());
    ASSERT_TRUE(convert_checkpoint(dir + "/f16_hf", dir + "/f16_back.gguf", to("gguf")).is_ok());
    expect_same_tensors(f16, load_ok(dir + "/f16_back.gguf"));
}

TEST(Convert, QuantizedTensorsKeptInGgufAndRefusedBySafetensors) {
    if (!test::file_exists(stories())) KILN_SKIP_MISSING() << "test data missing";
    const std::string dir = test::temp_dir("convert_quant");
    Checkpoint bin = load_ok(stories());
    formats::GgufWriter w;
    for (auto& [k, v] : config_to_gguf_metadata(bin.config)) w.set(k, v);
    std::vector<uint8_t> q8(64 * 2 * 34);  // [64, 64] in Q8_0: 2 blocks of 34 bytes per row
    for (size_t i = 0; i < q8.size(); ++i) q8[i] = uint8_t(i * 13);
    for (const TensorRef& t : bin.tensors) {
        if (t.name == "blk.0.attn_q.weight")
            w.add_tensor(t.name, DType::kQ8_0, t.shape, q8.data(), q8.size());
        else
            w.add_tensor(t.name, t.dtype, t.shape, t.data, t.num_bytes);
    }
    ASSERT_TRUE(w.write(dir + "/q.gguf").is_ok());

    core::Status st = convert_checkpoint(dir + "/q.gguf", dir + "/hf", to("safetensors"));
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), StatusCode::kUnsupported);
    EXPECT_NE(st.message().find("blk.0.attn_q.weight"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("quantized"), std::string::npos) << st.message();

    ASSERT_TRUE(convert_checkpoint(dir + "/q.gguf", dir + "/q_f16.gguf", to("gguf", DType::kF16)).is_ok());
    Checkpoint back = load_ok(dir + "/q_f16.gguf");
    const TensorRef* q = back.find("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->dtype, DType::kQ8_0);
    ASSERT_EQ(q->num_bytes, q8.size());
    EXPECT_EQ(0, std::memcmp(q->data, q8.data(), q8.size()));
    EXPECT_EQ(back.find("blk.0.attn_k.weight")->dtype, DType::kF16);

    // --dequantize: the quantized tensor is written as floats, the values the scalar reference decodes.
    std::vector<float> want(64 * 64);
    ASSERT_TRUE(kernels::ref::dequantize_row(DType::kQ8_0, q8.data(), want.data(), int64_t(want.size())).is_ok());
    ConvertOptions deq = to("gguf");
    deq.dequantize = true;
    ASSERT_TRUE(convert_checkpoint(dir + "/q.gguf", dir + "/q_f32.gguf", deq).is_ok());
    Checkpoint f32 = load_ok(dir + "/q_f32.gguf");
    const TensorRef* d = f32.find("blk.0.attn_q.weight");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->dtype, DType::kF32);
    ASSERT_EQ(d->num_bytes, want.size() * 4);
    EXPECT_EQ(0, std::memcmp(d->data, want.data(), d->num_bytes));
    deq.to = "safetensors";  // and now it has a safetensors form
    EXPECT_TRUE(convert_checkpoint(dir + "/q.gguf", dir + "/hf_deq", deq).is_ok());
}

// A small random HF checkpoint of `arch` written with HF names (rotate-half Q/K as HF stores them).
struct HfModel {
    ModelConfig config;
    std::map<std::string, std::vector<uint8_t>> tensors;  // HF name -> f32 bytes
};

HfModel write_random_hf(const std::string& dir, const std::string& arch, bool attention_bias = false) {
    std::filesystem::create_directories(dir);
    HfModel m;
    ModelConfig& c = m.config;
    c.arch = arch;
    c.vocab_size = 32, c.hidden_size = 16, c.intermediate_size = 24, c.num_layers = 2;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = arch == "qwen3" ? 6 : 4, c.max_seq_len = 64;
    c.attention_bias = arch == "qwen2" || attention_bias;
    c.qk_norm = arch == "qwen3";
    c.tie_word_embeddings = arch != "llama";
    std::mt19937 rng(11);
    std::normal_distribution<float> dist;
    auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        std::vector<uint8_t> bytes(n * 4);
        for (uint64_t i = 0; i < n; ++i) {
            float v = dist(rng);
            std::memcpy(&bytes[4 * i], &v, 4);
        }
        m.tensors[name] = std::move(bytes);
        return shape;
    };
    std::map<std::string, std::vector<uint64_t>> shapes;
    uint64_t H = 16, Q = uint64_t(c.q_dim()), KV = uint64_t(c.kv_dim()), I = 24, hd = uint64_t(c.head_dim);
    shapes["model.embed_tokens.weight"] = add("model.embed_tokens.weight", {32, H});
    shapes["model.norm.weight"] = add("model.norm.weight", {H});
    if (!c.tie_word_embeddings) shapes["lm_head.weight"] = add("lm_head.weight", {32, H});
    for (int l = 0; l < 2; ++l) {
        std::string p = "model.layers." + std::to_string(l) + ".";
        for (auto [n, s] :
             std::vector<std::pair<std::string, std::vector<uint64_t>>>{{"input_layernorm.weight", {H}},
                                                                        {"self_attn.q_proj.weight", {Q, H}},
                                                                        {"self_attn.k_proj.weight", {KV, H}},
                                                                        {"self_attn.v_proj.weight", {KV, H}},
                                                                        {"self_attn.o_proj.weight", {H, Q}},
                                                                        {"post_attention_layernorm.weight", {H}},
                                                                        {"mlp.gate_proj.weight", {I, H}},
                                                                        {"mlp.up_proj.weight", {I, H}},
                                                                        {"mlp.down_proj.weight", {H, I}}})
            shapes[p + n] = add(p + n, s);
        if (c.attention_bias)
            for (auto [n, d] : {std::pair{"q", Q}, std::pair{"k", KV}, std::pair{"v", KV}})
                shapes[p + "self_attn." + n + "_proj.bias"] = add(p + "self_attn." + n + "_proj.bias", {d});
        if (c.has_output_bias()) shapes[p + "self_attn.o_proj.bias"] = add(p + "self_attn.o_proj.bias", {H});
        if (c.qk_norm) {
            shapes[p + "self_attn.q_norm.weight"] = add(p + "self_attn.q_norm.weight", {hd});
            shapes[p + "self_attn.k_norm.weight"] = add(p + "self_attn.k_norm.weight", {hd});
        }
    }
    shapes["model.layers.0.self_attn.rotary_emb.inv_freq"] = add("model.layers.0.self_attn.rotary_emb.inv_freq", {2});
    std::vector<formats::SafetensorsTensorIn> in;
    for (auto& [name, bytes] : m.tensors) in.push_back({name, DType::kF32, shapes[name], bytes.data(), bytes.size()});
    EXPECT_TRUE(formats::write_safetensors(dir + "/model.safetensors", in, {{"format", "pt"}}).is_ok());
    test::write_file(dir + "/config.json", config_to_hf_json(c, "float32"));
    return m;
}

TEST(Convert, HfArchitecturesRoundTripThroughGguf) {
    for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
        SCOPED_TRACE(arch);
        const std::string dir = test::temp_dir("convert_hf_" + arch);
        HfModel m = write_random_hf(dir + "/src", arch);
        Checkpoint src = load_ok(dir + "/src");
        expect_same_config(m.config, src.config);
        EXPECT_EQ(src.find("model.layers.0.self_attn.rotary_emb.inv_freq"), nullptr);
        // Loading undid the HF permutation: canonical q == inverse of the file's rows.
        const TensorRef* q = src.find("blk.1.attn_q.weight");
        ASSERT_NE(q, nullptr);
        std::vector<uint8_t> q_hf = hf_permute_reference(q->data, q->shape[0], q->num_bytes / q->shape[0], 4);
        EXPECT_EQ(q_hf, m.tensors["model.layers.1.self_attn.q_proj.weight"]);
        if (arch == "qwen3") {
            const TensorRef* qn = src.find("blk.0.attn_q_norm.weight");
            ASSERT_NE(qn, nullptr);
            EXPECT_EQ(hf_permute_reference(qn->data, 6, 4, 1), m.tensors["model.layers.0.self_attn.q_norm.weight"]);
        }

        ASSERT_TRUE(convert_checkpoint(dir + "/src", dir + "/m.gguf", to("gguf")).is_ok());
        Checkpoint g = load_ok(dir + "/m.gguf");
        expect_same_tensors(src, g);
        expect_same_config(src.config, g.config);
        // qwen2/qwen3 GGUF files keep HF's rotate-half rows (llama.cpp's NEOX RoPE); llama's are Meta's.
        auto raw = formats::GgufFile::open(dir + "/m.gguf");
        ASSERT_TRUE(raw.is_ok());
        const formats::GgufTensorInfo* rq = raw->find_tensor("blk.1.attn_q.weight");
        ASSERT_NE(rq, nullptr);
        const std::vector<uint8_t>& hf_bytes = m.tensors["model.layers.1.self_attn.q_proj.weight"];
        bool same_as_hf = std::memcmp(raw->tensor_data(*rq), hf_bytes.data(), hf_bytes.size()) == 0;
        EXPECT_EQ(same_as_hf, arch != "llama");

        ASSERT_TRUE(convert_checkpoint(dir + "/m.gguf", dir + "/back", to("safetensors")).is_ok());
        auto back = formats::SafetensorsFile::open(dir + "/back/model.safetensors");
        ASSERT_TRUE(back.is_ok());
        for (const auto& [name, bytes] : m.tensors) {
            if (name.find("inv_freq") != std::string::npos) continue;
            const formats::SafetensorsTensorInfo* t = back->find_tensor(name);
            ASSERT_NE(t, nullptr) << name;
            ASSERT_EQ(t->num_bytes, bytes.size()) << name;
            EXPECT_EQ(0, std::memcmp(back->tensor_data(*t), bytes.data(), bytes.size())) << name;
        }
    }
}

// LlamaAttention gives o_proj a bias too when attention_bias is set: it must load as
// blk.N.attn_output.bias, be required, and survive HF -> GGUF -> HF.
TEST(Convert, LlamaAttentionBiasKeepsTheOutputBias) {
    const std::string dir = test::temp_dir("convert_llama_bias");
    HfModel m = write_random_hf(dir + "/src", "llama", /*attention_bias=*/true);
    Checkpoint src = load_ok(dir + "/src");
    EXPECT_TRUE(src.config.has_output_bias());
    const TensorRef* ob = src.find("blk.1.attn_output.bias");
    ASSERT_NE(ob, nullptr);
    const std::vector<uint8_t>& want = m.tensors["model.layers.1.self_attn.o_proj.bias"];
    ASSERT_EQ(ob->num_bytes, want.size());
    EXPECT_EQ(0, std::memcmp(ob->data, want.data(), want.size()));

    ASSERT_TRUE(convert_checkpoint(dir + "/src", dir + "/m.gguf", to("gguf")).is_ok());
    Checkpoint g = load_ok(dir + "/m.gguf");
    expect_same_tensors(src, g);
    EXPECT_TRUE(g.config.has_output_bias());
    ASSERT_TRUE(convert_checkpoint(dir + "/m.gguf", dir + "/back", to("safetensors")).is_ok());
    auto back = formats::SafetensorsFile::open(dir + "/back/model.safetensors");
    ASSERT_TRUE(back.is_ok());
    const formats::SafetensorsTensorInfo* t = back->find_tensor("model.layers.1.self_attn.o_proj.bias");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(0, std::memcmp(back->tensor_data(*t), want.data(), want.size()));

    // Without it the checkpoint is incomplete.
    std::vector<formats::SafetensorsTensorIn> in;
    auto full = formats::SafetensorsFile::open(dir + "/src/model.safetensors");
    ASSERT_TRUE(full.is_ok());
    for (const auto& info : full->tensors())
        if (info.name != "model.layers.0.self_attn.o_proj.bias")
            in.push_back({info.name, info.dtype, info.shape, full->tensor_data(info), info.num_bytes});
    ASSERT_TRUE(formats::write_safetensors(dir + "/src/model2.safetensors", in, {}).is_ok());
    std::filesystem::rename(dir + "/src/model2.safetensors", dir + "/src/model.safetensors");
    auto ck = load_checkpoint(dir + "/src");
    ASSERT_FALSE(ck.is_ok());
    EXPECT_NE(ck.status().message().find("missing tensor 'blk.0.attn_output.bias'"), std::string::npos)
        << ck.status().message();
}

TEST(Convert, LoaderErrors) {
    const std::string dir = test::temp_dir("convert_errors");
    EXPECT_EQ(load_checkpoint(dir + "/missing.bin").status().code(), StatusCode::kNotFound);
    std::filesystem::create_directories(dir + "/noconfig");
    EXPECT_EQ(load_checkpoint(dir + "/noconfig").status().code(), StatusCode::kNotFound);

    HfModel m = write_random_hf(dir + "/partial", "llama");
    std::vector<formats::SafetensorsTensorIn> in;
    for (auto& [name, bytes] : m.tensors)
        if (name != "model.layers.1.mlp.up_proj.weight")
            in.push_back({name, DType::kF32, {bytes.size() / 4}, bytes.data(), bytes.size()});
    ASSERT_TRUE(formats::write_safetensors(dir + "/partial/model.safetensors", in, {}).is_ok());
    auto ck = load_checkpoint(dir + "/partial");
    ASSERT_FALSE(ck.is_ok());
    EXPECT_EQ(ck.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(ck.status().message().find("has shape"), std::string::npos) << ck.status().message();

    std::vector<uint8_t> junk(100, 0x41);
    test::write_file(dir + "/junk.bin", junk);
    EXPECT_EQ(load_checkpoint(dir + "/junk.bin").status().code(), StatusCode::kCorrupt);

    core::Status st = convert_checkpoint(stories(), dir + "/x", to("onnx"));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    st = convert_checkpoint(stories(), dir + "/x.gguf", to("gguf", DType::kQ4_0));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST(Convert, MissingTensorIsNamed) {
    const std::string dir = test::temp_dir("convert_missing");
    write_random_hf(dir, "llama");
    std::vector<formats::SafetensorsTensorIn> in;
    auto full = formats::SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(full.is_ok());
    for (const auto& t : full->tensors())
        if (t.name != "model.layers.1.mlp.up_proj.weight")
            in.push_back({t.name, t.dtype, t.shape, full->tensor_data(t), t.num_bytes});
    ASSERT_TRUE(formats::write_safetensors(dir + "/model2.safetensors", in, {}).is_ok());
    std::filesystem::rename(dir + "/model2.safetensors", dir + "/model.safetensors");
    auto ck = load_checkpoint(dir);
    ASSERT_FALSE(ck.is_ok());
    EXPECT_NE(ck.status().message().find("missing tensor 'blk.1.ffn_up.weight'"), std::string::npos)
        << ck.status().message();
}

TEST(MetadataJson, RoundTripsAwkwardValues) {
    using namespace formats;
    GgufMetadata md = {
        {"s", gguf_string("plain")},
        {"bad_utf8", gguf_string(std::string("\xff\xfe", 2))},
        {"nan", gguf_f32(std::numeric_limits<float>::quiet_NaN())},
        {"inf", gguf_f64(-std::numeric_limits<double>::infinity())},
        {"f", gguf_f32(0.1f)},
        {"u64", gguf_u64(UINT64_MAX)},
        {"i8", gguf_i8(-128)},
        {"b", gguf_bool(true)},
        {"nested",
         gguf_array(GgufType::kArray, {gguf_string_array({"a", std::string("\xc0", 1)}), gguf_i32_array({1, -2})})},
        {"\xfekey", gguf_u16(7)},
    };
    std::string json = gguf_metadata_to_json(md);
    auto back = gguf_metadata_from_json(json, "t");
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(*back, md);
    for (const char* bad :
         {"{}", "[1]", R"([{"key":"k","type":"u8","value":256}])", R"([{"key":"k","type":"i8","value":-129}])",
          R"([{"key":"k","type":"what","value":1}])", R"([{"key":"k","type":"string","value":{"hex":"zz"}}])",
          R"([{"key":"k","type":"array","value":[1]}])"})
        EXPECT_FALSE(gguf_metadata_from_json(bad, "t").is_ok()) << bad;
}

}  // namespace
}  // namespace kiln::loader
