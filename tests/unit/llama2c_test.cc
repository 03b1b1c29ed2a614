// llama2.c checkpoint reader: the real stories260K file, and hand-made corrupt headers / truncations.
#include "formats/llama2c.h"

#include <gtest/gtest.h>

#include <cstring>

#include "loader/checkpoint.h"
#include "support/test_support.h"

namespace kiln::formats {
namespace {

using core::StatusCode;

std::string stories_path() {
    return test::testdata("models/stories260K/stories260K.bin");
}

std::vector<uint8_t> header_bytes(std::vector<int32_t> h) {
    std::vector<uint8_t> b(h.size() * 4);
    std::memcpy(b.data(), h.data(), b.size());
    return b;
}

// A whole tiny model: header plus zero floats of the right length.
std::vector<uint8_t> tiny_model(int32_t dim, int32_t hidden, int32_t layers, int32_t heads, int32_t kv, int32_t vocab,
                                int32_t seq) {
    std::vector<uint8_t> b = header_bytes({dim, hidden, layers, heads, kv, vocab, seq});
    int64_t kv_dim = int64_t(dim) / heads * kv, v = vocab < 0 ? -vocab : vocab, hs = dim / heads;
    int64_t floats = v * dim +
                     layers * (2 * dim + 2 * int64_t(dim) * dim + 2 * kv_dim * dim + 3 * int64_t(hidden) * dim) + dim +
                     seq * hs;
    if (vocab < 0) floats += v * dim;
    b.resize(b.size() + size_t(floats) * 4);
    for (size_t i = 28; i + 4 <= b.size(); i += 4) {  // recognisable values: float(index)
        float f = float((i - 28) / 4);
        std::memcpy(&b[i], &f, 4);
    }
    return b;
}

TEST(Llama2c, Stories260KHeaderAndArrays) {
    if (!test::file_exists(stories_path())) KILN_SKIP_MISSING() << "test data missing";
    auto f = Llama2cFile::open(stories_path());
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const Llama2cHeader& h = f->header();
    EXPECT_EQ(h.dim, 64);
    EXPECT_EQ(h.hidden_dim, 172);
    EXPECT_EQ(h.n_layers, 5);
    EXPECT_EQ(h.n_heads, 8);
    EXPECT_EQ(h.n_kv_heads, 4);
    EXPECT_EQ(h.vocab_size, 512);
    EXPECT_EQ(h.seq_len, 512);
    EXPECT_TRUE(h.shared_classifier);
    EXPECT_EQ(h.head_size(), 8);
    EXPECT_EQ(h.kv_dim(), 32);
    ASSERT_NE(f->find("wk"), nullptr);
    EXPECT_EQ(f->find("wk")->shape, (std::vector<uint64_t>{5, 32, 64}));
    EXPECT_EQ(f->find("wcls"), nullptr);
    const Llama2cArray& last = f->arrays().back();
    EXPECT_EQ(last.offset + last.num_bytes, 1056540u);  // the file ends with the RoPE tables
}

TEST(Llama2c, Stories260KAsCheckpoint) {
    if (!test::file_exists(stories_path())) KILN_SKIP_MISSING() << "test data missing";
    auto ck = loader::load_checkpoint(stories_path());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->format, "llama2c");
    const loader::ModelConfig& c = ck->config;
    EXPECT_EQ(c.arch, "llama");
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.intermediate_size, 172);
    EXPECT_EQ(c.num_layers, 5);
    EXPECT_EQ(c.num_heads, 8);
    EXPECT_EQ(c.num_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.max_seq_len, 512);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(ck->find("output.weight"), nullptr);
    ASSERT_NE(ck->find("blk.4.ffn_down.weight"), nullptr);
    EXPECT_EQ(ck->find("blk.4.ffn_down.weight")->shape, (std::vector<uint64_t>{64, 172}));
    // 1 + 5 * 9 + 1 tensors; parameters as counted by llama2.c (without the RoPE tables).
    EXPECT_EQ(ck->tensors.size(), 47u);
    EXPECT_EQ(ck->num_params(), uint64_t(512 * 64 + 5 * (64 + 64 * 64 * 2 + 32 * 64 * 2 + 64 + 3 * 172 * 64) + 64));

    // Layer slices point at the right rows: blk.1.attn_q is wq[1].
    auto raw = Llama2cFile::open(stories_path());
    const Llama2cArray* wq = raw->find("wq");
    const loader::TensorRef* q1 = ck->find("blk.1.attn_q.weight");
    ASSERT_EQ(q1->num_bytes, 64u * 64 * 4);
    EXPECT_EQ(0, std::memcmp(q1->data, raw->array_data(*wq) + 64 * 64 * 4, q1->num_bytes));
    EXPECT_NE(0, std::memcmp(q1->data, raw->array_data(*wq), q1->num_bytes));
}

TEST(Llama2c, UntiedClassifierFollows) {
    std::vector<uint8_t> b = tiny_model(8, 12, 2, 2, 1, -10, 4);
    auto f = Llama2cFile::parse(b.data(), b.size(), "untied.bin");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_FALSE(f->header().shared_classifier);
    EXPECT_EQ(f->header().vocab_size, 10);
    ASSERT_NE(f->find("wcls"), nullptr);
    EXPECT_EQ(f->find("wcls")->offset + 10 * 8 * 4, b.size());

    std::string dir = test::temp_dir("llama2c_untied");
    test::write_file(dir + "/untied.bin", b);
    auto ck = loader::load_checkpoint(dir + "/untied.bin");
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_FALSE(ck->config.tie_word_embeddings);
    ASSERT_NE(ck->find("output.weight"), nullptr);
}

TEST(Llama2c, BadHeaderValuesNameTheField) {
    auto expect_error = [](std::vector<int32_t> h, const std::string& needle) {
        std::vector<uint8_t> b = header_bytes(h);
        b.resize(b.size() + 4096);
        auto f = Llama2cFile::parse(b.data(), b.size(), "bad.bin");
        ASSERT_FALSE(f.is_ok()) << needle;
        EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
        EXPECT_NE(f.status().message().find("bad.bin"), std::string::npos);
        EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().message();
    };
    expect_error({0, 172, 5, 8, 4, 512, 512}, "dim 0");
    expect_error({64, -1, 5, 8, 4, 512, 512}, "hidden_dim -1");
    expect_error({64, 172, 100000, 8, 4, 512, 512}, "n_layers");
    expect_error({64, 172, 5, 0, 4, 512, 512}, "n_heads");
    expect_error({64, 172, 5, 8, 0, 512, 512}, "n_kv_heads");
    expect_error({64, 172, 5, 8, 4, 0, 512}, "vocab_size");
    expect_error({64, 172, 5, 8, 4, INT32_MIN, 512}, "vocab_size");
    expect_error({64, 172, 5, 8, 4, 512, -5}, "seq_len");
    expect_error({64, 172, 5, 7, 7, 512, 512}, "does not divide dim");
    expect_error({64, 172, 5, 8, 3, 512, 512}, "does not divide n_heads");
    expect_error({64, 172, 5, 8, 16, 512, 512}, "n_kv_heads 16");
    expect_error({6, 4, 1, 2, 1, 4, 4}, "odd");
}

TEST(Llama2c, ShortHeaderAndVersionedExport) {
    std::vector<uint8_t> b(20);
    auto f = Llama2cFile::parse(b.data(), b.size(), "short.bin");
    ASSERT_FALSE(f.is_ok());
    EXPECT_NE(f.status().message().find("28-byte"), std::string::npos);
    std::vector<uint8_t> v1 = header_bytes({0x616b3432, 1, 64, 172, 5, 8, 4});
    f = Llama2cFile::parse(v1.data(), v1.size(), "v1.bin");
    EXPECT_EQ(f.status().code(), StatusCode::kUnsupported);
}

TEST(Llama2c, TruncationNamesTheArray) {
    if (!test::file_exists(stories_path())) KILN_SKIP_MISSING() << "test data missing";
    std::vector<uint8_t> full = test::read_file(stories_path());
    auto expect_cut = [&](size_t len, const std::string& array) {
        auto f = Llama2cFile::parse(full.data(), len, "cut.bin");
        ASSERT_FALSE(f.is_ok()) << len;
        EXPECT_NE(f.status().message().find("array " + array + " "), std::string::npos) << f.status().message();
        EXPECT_NE(f.status().message().find("past the end"), std::string::npos);
    };
    expect_cut(28, "token_embedding_table");
    expect_cut(28 + 512 * 64 * 4, "rms_att_weight");
    expect_cut(full.size() - 1, "freq_cis_imag");
    size_t wq_end = 28 + (512 * 64 + 5 * 64 + 5 * 64 * 64) * 4;
    expect_cut(wq_end + 5, "wk");
    // Every length short of the file fails (cheap: the check is arithmetic).
    for (size_t len = 0; len < full.size(); len += 997)
        EXPECT_FALSE(Llama2cFile::parse(full.data(), len, "cut.bin").is_ok()) << len;
    EXPECT_TRUE(Llama2cFile::parse(full.data(), full.size(), "ok.bin").is_ok());
}

}  // namespace
}  // namespace kiln::formats
