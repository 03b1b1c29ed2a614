// GGUF reader/writer: writer -> reader round trips of every value type (nested arrays included) and
// of tensors of several dtypes, a hand-built v2 file, the typed accessors, and the real vocab files
// in ../shared/testdata/vocab (which must also re-serialize byte for byte).
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "formats/ggml_type.h"
#include "formats/gguf_writer.h"
#include "gguf_bytes.h"
#include "support/test_support.h"

namespace kiln::formats {
namespace {

using core::DType;

GgufFile parse_ok(const std::vector<uint8_t>& bytes, const std::string& name = "mem.gguf") {
    core::Result<GgufFile> r = GgufFile::parse(bytes.data(), bytes.size(), name);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return GgufFile();
    return std::move(r).value();
}

// One value of every type, including nested and empty arrays and awkward floats/strings.
std::vector<std::pair<std::string, GgufValue>> all_values() {
    return {
        {"t.u8", gguf_u8(250)},
        {"t.i8", gguf_i8(-128)},
        {"t.u16", gguf_u16(65535)},
        {"t.i16", gguf_i16(-32768)},
        {"t.u32", gguf_u32(4000000000u)},
        {"t.i32", gguf_i32(-2000000000)},
        {"t.u64", gguf_u64(std::numeric_limits<uint64_t>::max())},
        {"t.i64", gguf_i64(std::numeric_limits<int64_t>::min())},
        {"t.f32", gguf_f32(-1.5e-7f)},
        {"t.f32_nan", gguf_f32(std::numeric_limits<float>::quiet_NaN())},
        {"t.f64", gguf_f64(3.141592653589793)},
        {"t.bool_true", gguf_bool(true)},
        {"t.bool_false", gguf_bool(false)},
        {"t.string", gguf_string(std::string("h\xc3\xa9llo\0world\n", 13))},
        {"t.empty_string", gguf_string("")},
        {"t.strings", gguf_string_array({"a", "", "ccc"})},
        {"t.f32s", gguf_f32_array({1.0f, -2.5f, INFINITY})},
        {"t.i32s", gguf_i32_array({1, -2, 2147483647})},
        {"t.empty_array", gguf_array(GgufType::kU64, {})},
        {"t.bools", gguf_array(GgufType::kBool, {gguf_bool(true), gguf_bool(false)})},
        {"t.u8s", gguf_array(GgufType::kU8, {gguf_u8(0), gguf_u8(255)})},
        {"t.nested", gguf_array(GgufType::kArray, {gguf_i32_array({1, 2}), gguf_i32_array({}),
                                                   gguf_array(GgufType::kString, {gguf_string("x")})})},
        {"t.deep",
         gguf_array(GgufType::kArray, {gguf_array(GgufType::kArray, {gguf_array(GgufType::kF64, {gguf_f64(-0.0)})})})},
    };
}

TEST(Gguf, RoundTripEveryValueType) {
    GgufWriter w;
    for (auto& [k, v] : all_values()) w.set(k, v);
    w.set("t.u8", gguf_u8(7));  // replaces in place, keeps first-insertion order
    GgufFile g = parse_ok(w.to_bytes());
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.alignment(), 32u);
    EXPECT_TRUE(g.tensors().empty());
    std::vector<std::pair<std::string, GgufValue>> want = all_values();
    want[0].second = gguf_u8(7);
    ASSERT_EQ(g.keys().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(g.keys()[i], want[i].first);
        const GgufValue* v = g.find(want[i].first);
        ASSERT_NE(v, nullptr) << want[i].first;
        EXPECT_TRUE(*v == want[i].second)
            << want[i].first << ": " << v->to_string() << " vs " << want[i].second.to_string();
    }
    EXPECT_EQ(g.find("t.nested")->array[0].array[1].i, 2);
    EXPECT_EQ(g.find("t.deep")->array[0].array[0].elem_type, GgufType::kF64);
}

TEST(Gguf, Accessors) {
    GgufWriter w;
    for (auto& [k, v] : all_values()) w.set(k, v);
    GgufFile g = parse_ok(w.to_bytes());
    EXPECT_EQ(g.get_int("t.u32"), 4000000000);
    EXPECT_EQ(g.get_int("t.i8"), -128);
    EXPECT_EQ(g.get_int("t.bool_true"), 1);
    EXPECT_EQ(g.get_int("t.u64"), std::nullopt);  // does not fit in int64
    EXPECT_EQ(g.get_int("t.f32"), std::nullopt);
    EXPECT_EQ(g.get_float("t.f32"), double(-1.5e-7f));
    EXPECT_EQ(g.get_float("t.i16"), -32768.0);
    EXPECT_EQ(g.get_bool("t.bool_false"), false);
    EXPECT_EQ(g.get_bool("t.u8"), std::nullopt);
    EXPECT_EQ(g.get_string("t.empty_string"), "");
    EXPECT_EQ(g.get_string("t.u8"), std::nullopt);
    EXPECT_EQ(g.get_string("missing"), std::nullopt);
    EXPECT_EQ(g.get_string_array("t.strings"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(g.get_string_array("t.i32s"), std::nullopt);
    EXPECT_EQ(g.get_int_array("t.i32s"), (std::vector<int64_t>{1, -2, 2147483647}));
    EXPECT_EQ(g.get_int_array("t.u8s"), (std::vector<int64_t>{0, 255}));
    EXPECT_EQ(g.get_int_array("t.strings"), std::nullopt);
    EXPECT_EQ(g.get_float_array("t.f32s"), (std::vector<float>{1.0f, -2.5f, INFINITY}));
    EXPECT_EQ(g.get_float_array("t.nested"), std::nullopt);
    EXPECT_EQ(g.find("t.strings")->to_string(2), "[\"a\", \"\", ... (3 string)]");
    EXPECT_EQ(g.find("t.f32s")->to_string(), "[1, -2.5, inf]");
    EXPECT_EQ(g.find("t.bool_true")->to_string(), "true");
}

TEST(Gguf, RoundTripTensorsAndFile) {
    std::vector<float> f32 = {1, 2, 3, 4, 5, 6};
    std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x00, 0xff, 0x7b};
    std::vector<uint8_t> q4_0(2 * 2 * 18), q4_k(144), bf16(2), i32(12);
    for (size_t i = 0; i < q4_0.size(); ++i) q4_0[i] = uint8_t(i * 7);
    for (size_t i = 0; i < q4_k.size(); ++i) q4_k[i] = uint8_t(i * 13 + 1);
    bf16 = {0x80, 0x3f};
    for (size_t i = 0; i < i32.size(); ++i) i32[i] = uint8_t(i);

    GgufWriter w;
    w.set("general.architecture", gguf_string("test"));
    w.set("general.alignment", gguf_u32(64));
    w.add_tensor("a.f32", DType::kF32, {2, 3}, f32.data(), 24);
    w.add_tensor("b.f16", DType::kF16, {4}, f16.data(), 8);
    w.add_tensor("c.q4_0", DType::kQ4_0, {2, 64}, q4_0.data(), q4_0.size());
    w.add_tensor("d.q4_k", DType::kQ4_K, {1, 1, 1, 256}, q4_k.data(), q4_k.size());
    w.add_tensor("e.bf16_scalar", DType::kBF16, {}, bf16.data(), 2);
    w.add_tensor("f.i32", DType::kI32, {3}, i32.data(), 12);
    w.add_tensor("g.empty", DType::kF32, {0, 4}, nullptr, 0);

    const std::string path = test::temp_dir("gguf_test") + "/t.gguf";
    ASSERT_TRUE(w.write(path).is_ok());
    EXPECT_EQ(test::read_file(path), w.to_bytes());
    core::Result<GgufFile> opened = GgufFile::open(path);
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    const GgufFile& g = *opened;
    EXPECT_EQ(g.alignment(), 64u);
    EXPECT_EQ(g.data_offset() % 64, 0u);
    EXPECT_EQ(g.path(), path);

    struct Want {
        const char* name;
        DType dtype;
        uint32_t ggml;
        std::vector<uint64_t> shape;
        const void* data;
        uint64_t bytes;
    };
    const Want want[] = {
        {"a.f32", DType::kF32, 0, {2, 3}, f32.data(), 24},
        {"b.f16", DType::kF16, 1, {4}, f16.data(), 8},
        {"c.q4_0", DType::kQ4_0, 2, {2, 64}, q4_0.data(), 72},
        {"d.q4_k", DType::kQ4_K, 12, {1, 1, 1, 256}, q4_k.data(), 144},
        {"e.bf16_scalar", DType::kBF16, 30, {}, bf16.data(), 2},
        {"f.i32", DType::kI32, 26, {3}, i32.data(), 12},
        {"g.empty", DType::kF32, 0, {0, 4}, nullptr, 0},
    };
    ASSERT_EQ(g.tensors().size(), 7u);
    for (size_t i = 0; i < 7; ++i) {
        const GgufTensorInfo& t = g.tensors()[i];
        EXPECT_EQ(t.name, want[i].name);
        EXPECT_EQ(g.find_tensor(want[i].name), &t);
        EXPECT_EQ(t.dtype, want[i].dtype) << t.name;
        EXPECT_EQ(t.ggml_type, want[i].ggml) << t.name;
        EXPECT_EQ(t.shape, want[i].shape) << t.name;
        EXPECT_EQ(t.num_bytes, want[i].bytes) << t.name;
        EXPECT_EQ(t.offset % 64, 0u) << t.name;
        if (want[i].bytes) {
            EXPECT_EQ(std::memcmp(g.tensor_data(t), want[i].data, want[i].bytes), 0) << t.name;
        }
    }
    EXPECT_EQ(g.tensors()[0].num_elements(), 6u);
    EXPECT_EQ(g.tensors()[4].num_elements(), 1u);
    EXPECT_EQ(g.find_tensor("nope"), nullptr);

    // Copying kv and tensors into a new writer reproduces the file exactly.
    GgufWriter copy;
    for (const std::string& k : g.keys()) copy.set(k, *g.find(k));
    for (const GgufTensorInfo& t : g.tensors())
        copy.add_tensor(t.name, t.dtype, t.shape, g.tensor_data(t), t.num_bytes);
    EXPECT_EQ(copy.to_bytes(), test::read_file(path));
}

TEST(Gguf, HandBuiltV2) {
    // v2 has the same layout as v3: 64-bit counts and lengths.
    test::GgufBytes b;
    b.header(2, 1, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 2);
    b.tensor("w", {4, 2}, 0, 0).pad_to(32);
    for (int i = 0; i < 8; ++i) b.f32(float(i));
    GgufFile g = parse_ok(b.bytes, "v2.gguf");
    EXPECT_EQ(g.version(), 2u);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("llama.block_count"), 2);
    ASSERT_EQ(g.tensors().size(), 1u);
    EXPECT_EQ(g.tensors()[0].shape, (std::vector<uint64_t>{2, 4}));  // reversed into row-major order
    EXPECT_EQ(g.data_offset(), b.size() - 32);
    float last;
    std::memcpy(&last, g.tensor_data(g.tensors()[0]) + 28, 4);
    EXPECT_EQ(last, 7.0f);
}

TEST(Gguf, WriterRejectsMalformedValues) {
    GgufWriter w;
    w.set("general.alignment", gguf_u32(48));
    EXPECT_EQ(w.write(test::temp_dir("gguf_writer_bad") + "/x.gguf").code(), core::StatusCode::kInvalidArgument);
    GgufWriter w2;
    w2.set("k", gguf_array(GgufType::kI32, {gguf_u8(1)}));
    EXPECT_EQ(w2.validate().code(), core::StatusCode::kInvalidArgument);
    GgufWriter w3;
    w3.set("general.alignment", gguf_u64(64));
    EXPECT_FALSE(w3.validate().is_ok());
}

TEST(Gguf, GgmlTypeMapping) {
    for (uint32_t id :
         {0u, 1u, 2u, 3u, 6u, 7u, 8u, 9u, 10u, 11u, 12u, 13u, 14u, 15u, 20u, 23u, 24u, 25u, 26u, 27u, 28u, 30u, 34u, 35u, 39u}) {
        std::optional<DType> d = dtype_from_ggml(id);
        ASSERT_TRUE(d.has_value()) << id;
        EXPECT_EQ(ggml_from_dtype(*d), id);
    }
    for (uint32_t id : {4u, 5u, 16u, 17u, 21u, 29u, 31u, 36u, 40u, 1000u}) EXPECT_FALSE(dtype_from_ggml(id)) << id;
    EXPECT_EQ(dtype_from_ggml(12), DType::kQ4_K);
    EXPECT_EQ(dtype_from_ggml(39), DType::kMxfp4);
    EXPECT_FALSE(ggml_from_dtype(DType::kNvfp4));  // kiln-internal block
    EXPECT_STREQ(ggml_type_name(20), "iq4_nl");
    EXPECT_FALSE(ggml_from_dtype(DType::kF8E4M3));
}

TEST(Gguf, FuzzSeedsParse) {
    // The seed corpus (scripts/gen_fuzz_seeds.py, written by gguf-py) must be valid files.
    const std::filesystem::path dir = std::filesystem::path(__FILE__).parent_path().parent_path() / "fuzz/corpus/gguf";
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".gguf") continue;
        core::Result<GgufFile> r = GgufFile::open(entry.path().string());
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        ++count;
    }
    EXPECT_GE(count, 4);
    core::Result<GgufFile> all = GgufFile::open((dir / "all_types.gguf").string());
    ASSERT_TRUE(all.is_ok());
    EXPECT_EQ(all->get_int("t.u32"), 4000000000);
    EXPECT_EQ(all->find("t.nested")->array[1].array[0].i, 3);
    EXPECT_EQ(all->find_tensor("q4_k")->dtype, DType::kQ4_K);
    EXPECT_EQ(all->find_tensor("f32")->shape, (std::vector<uint64_t>{2, 4}));
}

class GgufVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocab, OpensAndReserializesExactly) {
    const std::string path = test::testdata(std::string("vocab/ggml-vocab-") + GetParam() + ".gguf");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << path << " missing";
    core::Result<GgufFile> r = GgufFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const GgufFile& g = *r;
    EXPECT_EQ(g.version(), 3u);
    EXPECT_TRUE(g.tensors().empty());
    const bool spm = std::string(GetParam()) == "llama-spm";
    EXPECT_EQ(g.get_string("tokenizer.ggml.model"), spm ? "llama" : "gpt2");
    std::optional<std::vector<std::string>> tokens = g.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    std::optional<std::vector<int64_t>> types = g.get_int_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.has_value());
    EXPECT_EQ(types->size(), tokens->size());
    if (spm) {
        EXPECT_EQ(tokens->size(), 32000u);
        EXPECT_EQ(g.get_int("llama.vocab_size"), 32000);
        EXPECT_EQ(g.get_float_array("tokenizer.ggml.scores")->size(), tokens->size());
        EXPECT_EQ(g.get_bool("tokenizer.ggml.add_bos_token"), true);
        EXPECT_EQ(g.get_bool("tokenizer.ggml.add_eos_token"), false);
        EXPECT_EQ((*tokens)[1], "<s>");
    } else {
        EXPECT_TRUE(g.get_string_array("tokenizer.ggml.merges").has_value());
    }
    if (std::string(GetParam()) == "llama-bpe") {
        EXPECT_EQ(g.get_int("llama.vocab_size"), int64_t(tokens->size()));
        EXPECT_EQ(tokens->size(), 128256u);
        EXPECT_EQ(g.get_float("llama.rope.freq_base"), 500000.0);
    }
    if (std::string(GetParam()) == "gpt-2") {
        EXPECT_EQ(tokens->size(), 50257u);
    }
    if (std::string(GetParam()) == "qwen2") {
        EXPECT_EQ(tokens->size(), 151936u);
    }

    GgufWriter w;
    for (const std::string& k : g.keys()) w.set(k, *g.find(k));
    EXPECT_TRUE(w.to_bytes() == test::read_file(path)) << "re-serialized metadata differs from " << path;
}

INSTANTIATE_TEST_SUITE_P(All, GgufVocab, ::testing::Values("gpt-2", "llama-bpe", "llama-spm", "qwen2"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

}  // namespace
}  // namespace kiln::formats
