// Checkpoint-level checks on small hand-made models: how GGUF metadata becomes a ModelConfig
// (llama.cpp's rope_freqs tensor, sliding windows, architecture names, token ids), the dtype checks
// of check_checkpoint_tensors, the attention output bias, and `kiln inspect` on GGUF strings that are
// not valid UTF-8.
#include "loader/checkpoint.h"
#include "loader/layer_tensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "support/test_support.h"

namespace kiln::loader {
namespace {

using core::DType;
using core::StatusCode;

ModelConfig tiny_config(const std::string& arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 32, c.hidden_size = 32, c.intermediate_size = 64, c.num_layers = 2;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 8, c.max_seq_len = 64;
    c.attention_bias = arch == "qwen2";
    c.qk_norm = arch == "qwen3";
    c.tie_word_embeddings = true;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    return c;
}

// Every tensor the config asks for, by canonical name.
std::vector<std::pair<std::string, std::vector<uint64_t>>> tensor_shapes(const ModelConfig& c) {
    const uint64_t h = uint64_t(c.hidden_size), v = uint64_t(c.vocab_size), i = uint64_t(c.intermediate_size);
    const uint64_t q = uint64_t(c.q_dim()), kv = uint64_t(c.kv_dim()), hd = uint64_t(c.head_dim);
    std::vector<std::pair<std::string, std::vector<uint64_t>>> out = {{"token_embd.weight", {v, h}},
                                                                      {"output_norm.weight", {h}}};
    if (!c.tie_word_embeddings) out.push_back({"output.weight", {v, h}});
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        out.insert(out.end(), {{p + "attn_norm.weight", {h}},
                               {p + "attn_q.weight", {q, h}},
                               {p + "attn_k.weight", {kv, h}},
                               {p + "attn_v.weight", {kv, h}},
                               {p + "attn_output.weight", {h, q}},
                               {p + "ffn_norm.weight", {h}},
                               {p + "ffn_gate.weight", {i, h}},
                               {p + "ffn_up.weight", {i, h}},
                               {p + "ffn_down.weight", {h, i}}});
        if (c.attention_bias)
            out.insert(out.end(), {{p + "attn_q.bias", {q}}, {p + "attn_k.bias", {kv}}, {p + "attn_v.bias", {kv}}});
        if (c.has_output_bias()) out.push_back({p + "attn_output.bias", {h}});
        if (c.qk_norm) out.insert(out.end(), {{p + "attn_q_norm.weight", {hd}}, {p + "attn_k_norm.weight", {hd}}});
    }
    return out;
}

// loader::checkpoint_tensors (the one list the loader checks and both models bind by) names the same
// tensors, shapes and order as the list above, which is spelled out independently, per family.
TEST(Checkpoint, TensorListMatchesEachFamily) {
    for (const char* arch : {"llama", "qwen2", "qwen3"}) {
        for (bool tied : {true, false}) {
            ModelConfig c = tiny_config(arch);
            c.tie_word_embeddings = tied;
            const auto want = tensor_shapes(c);
            const std::vector<TensorSpec> got = checkpoint_tensors(c);
            ASSERT_EQ(got.size(), want.size()) << arch << (tied ? " tied" : "");
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(got[i].name, want[i].first) << arch << " #" << i;
                EXPECT_EQ(got[i].shape, want[i].second) << got[i].name;
                EXPECT_EQ(got[i].matrix, got[i].shape.size() == 2) << got[i].name;
            }
        }
    }
}

// A complete zero-filled f32 GGUF image of `c`; `edit` may add keys or tensors before it is built.
std::vector<uint8_t> tiny_gguf(const ModelConfig& c, const std::function<void(formats::GgufWriter&)>& edit = {}) {
    static const std::vector<float> kZeros(size_t(64) * 64);
    formats::GgufWriter w;
    for (auto& [k, v] : config_to_gguf_metadata(c)) w.set(k, v);
    for (const auto& [name, shape] : tensor_shapes(c)) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        w.add_tensor(name, DType::kF32, shape, kZeros.data(), n * 4);
    }
    if (edit) edit(w);
    return w.to_bytes();
}

core::Result<ModelConfig> config_of(const std::vector<uint8_t>& bytes) {
    KILN_ASSIGN_OR_RETURN(formats::GgufFile g, formats::GgufFile::parse(bytes.data(), bytes.size(), "tiny.gguf"));
    return config_from_gguf(g);
}

// llama.cpp stores Llama-3 RoPE scaling as a rope_freqs.weight tensor (per-frequency divisors, no
// rope.scaling keys): kiln reads it into rope_freq_factors (families_test runs such a file against
// transformers). With scaling keys too, the keys are used. A wrong type, a wrong count or a
// non-positive factor is kCorrupt at load.
TEST(Checkpoint, GgufRopeFreqsAreRead) {
    static const float kFreqs[4] = {1, 1, 2, 8};
    auto with_freqs = [](formats::GgufWriter& w) { w.add_tensor("rope_freqs.weight", DType::kF32, {4}, kFreqs, 16); };
    auto r = config_of(tiny_gguf(tiny_config("llama"), with_freqs));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->rope_freq_factors, (std::vector<float>{1, 1, 2, 8}));
    EXPECT_TRUE(r->rope_scaling.type.empty());
    EXPECT_TRUE(r->validate().is_ok());

    ModelConfig scaled = tiny_config("llama");
    scaled.rope_scaling.type = "llama3";
    scaled.rope_scaling.factor = 8.0;
    scaled.rope_scaling.original_max_position_embeddings = 16;
    auto ok = config_of(tiny_gguf(scaled, with_freqs));
    ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
    EXPECT_EQ(ok->rope_scaling, scaled.rope_scaling);
    EXPECT_TRUE(ok->rope_freq_factors.empty());

    static const float kThree[3] = {1, 2, 3}, kBad[4] = {1, 0, 2, 3};
    auto three = config_of(tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
        w.add_tensor("rope_freqs.weight", DType::kF32, {3}, kThree, 12);
    }));
    ASSERT_FALSE(three.is_ok());
    EXPECT_EQ(three.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(three.status().message().find("head_dim 8 needs 4"), std::string::npos) << three.status().message();
    auto zero = config_of(tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
        w.add_tensor("rope_freqs.weight", DType::kF32, {4}, kBad, 16);
    }));
    ASSERT_FALSE(zero.is_ok());
    EXPECT_EQ(zero.status().code(), StatusCode::kCorrupt) << zero.status().to_string();
    static const uint16_t kHalf[4] = {0x3c00, 0x3c00, 0x4000, 0x4800};
    auto half = config_of(tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
        w.add_tensor("rope_freqs.weight", DType::kF16, {4}, kHalf, 8);
    }));
    ASSERT_FALSE(half.is_ok());
    EXPECT_EQ(half.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(half.status().message().find("rope_freqs.weight"), std::string::npos) << half.status().message();
}

TEST(Checkpoint, GgufSlidingWindowsRoundTrip) {
    ModelConfig qwen = tiny_config("qwen2");
    qwen.sliding_window = 16, qwen.max_window_layers = 1;
    auto q = config_of(tiny_gguf(qwen));
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    EXPECT_EQ(q->sliding_window, 16);
    EXPECT_EQ(q->max_window_layers, 1);
    EXPECT_EQ(q->window_for_layer(0), 0);
    EXPECT_EQ(q->window_for_layer(1), 16);

    ModelConfig mistral = tiny_config("mistral");
    mistral.sliding_window = 16;
    auto m = config_of(tiny_gguf(mistral));  // stored as GGUF "llama", as llama.cpp does
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_EQ(m->arch, "mistral");
    EXPECT_EQ(m->window_for_layer(0), 16);

    ModelConfig llama = tiny_config("llama");
    llama.sliding_window = 16;
    EXPECT_EQ(llama.validate().code(), StatusCode::kCorrupt);
}

TEST(Checkpoint, ArchitectureNamesAgreeAcrossFormats) {
    EXPECT_EQ(gguf_arch(tiny_config("mistral")), "llama");
    EXPECT_EQ(gguf_arch(tiny_config("qwen3")), "qwen3");
    EXPECT_TRUE(gguf_arch_uses_neox_rope("qwen2"));
    EXPECT_FALSE(gguf_arch_uses_neox_rope("llama"));
    EXPECT_NE(config_to_hf_json(tiny_config("qwen3")).find("\"Qwen3ForCausalLM\""), std::string::npos);
    EXPECT_EQ(tiny_config("gpt2").validate().code(), StatusCode::kUnsupported);

    auto gpt2 = config_of(tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
        w.set("general.architecture", formats::gguf_string("gpt2"));
    }));
    ASSERT_FALSE(gpt2.is_ok());
    EXPECT_EQ(gpt2.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(gpt2.status().message().find("supported: llama, qwen2, qwen3"), std::string::npos)
        << gpt2.status().message();
}

TEST(Checkpoint, GgufTokenIdsOutsideTheVocabularyAreErrors) {
    auto r = config_of(tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
        w.set("tokenizer.ggml.eos_token_id", formats::gguf_u32(32));
    }));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("eos_token_ids 32"), std::string::npos) << r.status().message();
}

Checkpoint tiny_checkpoint(const ModelConfig& c) {
    Checkpoint ck;
    ck.path = "tiny";
    ck.config = c;
    for (const auto& [name, shape] : tensor_shapes(c)) ck.tensors.push_back({name, DType::kF32, shape, nullptr, 0});
    return ck;
}

void set_dtype(Checkpoint* ck, const std::string& name, DType dtype) {
    for (TensorRef& t : ck->tensors)
        if (t.name == name) t.dtype = dtype;
}

// Matrices must be a dtype dequantize_row decodes, norms and biases plain floats.
TEST(Checkpoint, TensorDtypesAreChecked) {
    Checkpoint ck = tiny_checkpoint(tiny_config("qwen2"));
    ASSERT_TRUE(check_checkpoint_tensors(ck).is_ok());
    set_dtype(&ck, "blk.1.ffn_up.weight", DType::kQ4_K);
    set_dtype(&ck, "blk.0.attn_q.weight", DType::kBF16);
    set_dtype(&ck, "blk.0.attn_k.bias", DType::kF16);
    EXPECT_TRUE(check_checkpoint_tensors(ck).is_ok());

    struct Case {
        const char* tensor;
        DType dtype;
    };
    for (Case bad : {Case{"blk.1.ffn_down.weight", DType::kI8}, Case{"token_embd.weight", DType::kF8E4M3},
                     Case{"blk.0.ffn_norm.weight", DType::kF64}, Case{"output_norm.weight", DType::kQ8_0},
                     Case{"blk.1.attn_v.bias", DType::kI32}}) {
        Checkpoint b = tiny_checkpoint(tiny_config("qwen2"));
        set_dtype(&b, bad.tensor, bad.dtype);
        core::Status st = check_checkpoint_tensors(b);
        EXPECT_EQ(st.code(), StatusCode::kUnsupported) << bad.tensor << ": " << st.to_string();
        EXPECT_NE(st.message().find(std::string("'") + bad.tensor + "'"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(std::string(core::dtype_name(bad.dtype))), std::string::npos) << st.message();
    }
}

TEST(Checkpoint, OutputBiasIsRequiredWithAttentionBias) {
    ModelConfig c = tiny_config("llama");
    c.attention_bias = true;
    Checkpoint ck = tiny_checkpoint(c);
    ASSERT_TRUE(check_checkpoint_tensors(ck).is_ok());
    std::erase_if(ck.tensors, [](const TensorRef& t) { return t.name == "blk.1.attn_output.bias"; });
    core::Status st = check_checkpoint_tensors(ck);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find("missing tensor 'blk.1.attn_output.bias'"), std::string::npos) << st.message();
    // Qwen2's output projection has no bias.
    EXPECT_TRUE(check_checkpoint_tensors(tiny_checkpoint(tiny_config("qwen2"))).is_ok());
}

// Runs `cmd`, returning its exit status and stdout.
std::pair<int, std::string> run(const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {-1, out};
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    return {pclose(p), out};
}

// GGUF strings are not validated as UTF-8; inspect used to die in nlohmann's dump() on them.
TEST(Checkpoint, InspectPrintsStringsThatAreNotUtf8) {
    const std::string kiln = test::kiln_binary();
    if (!test::file_exists(kiln)) KILN_SKIP_MISSING() << kiln << " not built";
    const std::string dir = test::temp_dir("inspect_utf8");
    test::write_file(dir + "/loadable.gguf", tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
                         w.set("general.name", formats::gguf_string("bad \xff name"));
                         w.set("x.\xfe", formats::gguf_string("\xc3\x28"));
                     }));
    test::write_file(dir + "/raw.gguf", tiny_gguf(tiny_config("llama"), [](formats::GgufWriter& w) {
                         w.set("general.architecture", formats::gguf_string("gpt\xff"));
                     }));
    for (const char* file : {"/loadable.gguf", "/raw.gguf"}) {
        for (const char* flag : {"", " --json"}) {
            auto [rc, out] = run(kiln + " inspect " + dir + file + flag + " 2>&1");
            EXPECT_EQ(rc, 0) << file << flag << ":\n" << out;
            if (*flag) {
                EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos) << out;  // U+FFFD
            }
        }
    }
}

}  // namespace
}  // namespace kiln::loader
