// safetensors writer/reader round trips, HF layout details, sharded checkpoints, and interop with the
// reference implementation (python `safetensors`, skipped where it is not installed).
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "support/test_support.h"

namespace kiln::formats {
namespace {

using core::DType;
using core::StatusCode;

struct Owned {
    std::string name;
    DType dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> bytes;
};

std::vector<Owned> sample_tensors() {
    auto fill = [](size_t n, uint8_t seed) {
        std::vector<uint8_t> b(n);
        for (size_t i = 0; i < n; ++i) b[i] = uint8_t(seed + 31 * i);
        return b;
    };
    return {
        {"odd_bytes", DType::kI8, {3}, fill(3, 1)}, {"embed", DType::kF32, {2, 3}, fill(24, 2)},
        {"half", DType::kF16, {5}, fill(10, 3)},    {"brain", DType::kBF16, {2, 2}, fill(8, 4)},
        {"scalar", DType::kU8, {}, fill(1, 5)},     {"big_ints", DType::kI64, {1}, fill(8, 6)},
        {"empty", DType::kF32, {0, 4}, {}},         {"fp8", DType::kF8E4M3, {2}, fill(2, 7)},
    };
}

std::vector<SafetensorsTensorIn> as_inputs(const std::vector<Owned>& owned) {
    std::vector<SafetensorsTensorIn> in;
    for (const Owned& o : owned) in.push_back({o.name, o.dtype, o.shape, o.bytes.data(), o.bytes.size()});
    return in;
}

TEST(Safetensors, RoundTripKeepsEveryTensorAndMetadata) {
    std::vector<Owned> owned = sample_tensors();
    std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\xc3\xa9llo \"quoted\""}};
    std::string path = test::temp_dir("safetensors_roundtrip") + "/model.safetensors";
    ASSERT_TRUE(write_safetensors(path, as_inputs(owned), meta).is_ok());

    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ(f->metadata(), meta);
    ASSERT_EQ(f->tensors().size(), owned.size());
    for (const Owned& o : owned) {
        const SafetensorsTensorInfo* t = f->find_tensor(o.name);
        ASSERT_NE(t, nullptr) << o.name;
        EXPECT_EQ(t->dtype, o.dtype) << o.name;
        EXPECT_EQ(t->shape, o.shape) << o.name;
        ASSERT_EQ(t->num_bytes, o.bytes.size()) << o.name;
        if (!o.bytes.empty()) {
            EXPECT_EQ(0, std::memcmp(f->tensor_data(*t), o.bytes.data(), o.bytes.size())) << o.name;
        }
    }
    EXPECT_EQ(f->find_tensor("missing"), nullptr);

    // In memory image == file; header padded to 8 with spaces; tensors contiguous and aligned.
    auto bytes = safetensors_to_bytes(as_inputs(owned), meta);
    ASSERT_TRUE(bytes.is_ok());
    EXPECT_EQ(*bytes, test::read_file(path));
    EXPECT_EQ(f->data_offset() % 8, 0u);
    EXPECT_EQ((*bytes)[f->data_offset() - 1], ' ');
    uint64_t expect_offset = 0;
    for (const SafetensorsTensorInfo& t : f->tensors()) {
        EXPECT_EQ(t.offset, expect_offset) << t.name;
        EXPECT_EQ(t.offset % core::dtype_info(t.dtype).block_bytes, 0u) << t.name;
        expect_offset += t.num_bytes;
    }
    EXPECT_EQ(f->data_offset() + expect_offset, bytes->size());
}

TEST(Safetensors, ParseFromMemoryMatchesOpen) {
    std::vector<Owned> owned = sample_tensors();
    auto bytes = safetensors_to_bytes(as_inputs(owned), {});
    ASSERT_TRUE(bytes.is_ok());
    auto f = SafetensorsFile::parse(bytes->data(), bytes->size(), "mem");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_TRUE(f->metadata().empty());
    EXPECT_EQ(f->tensors().size(), owned.size());
}

TEST(Safetensors, HandBuiltLayoutIsReadExactly) {
    // The byte layout of the spec's example: 8-byte LE length, JSON, data.
    std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})";
    std::vector<uint8_t> bytes(8);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(n >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    float vals[2] = {1.5f, -2.25f};
    const uint8_t* vp = reinterpret_cast<const uint8_t*>(vals);
    bytes.insert(bytes.end(), vp, vp + 8);
    auto f = SafetensorsFile::parse(bytes.data(), bytes.size(), "hand");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const SafetensorsTensorInfo* a = f->find_tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->num_elements(), 2u);
    float got[2];
    std::memcpy(got, f->tensor_data(*a), 8);
    EXPECT_EQ(got[0], 1.5f);
    EXPECT_EQ(got[1], -2.25f);
    EXPECT_EQ(f->metadata().at("k"), "v");
}

TEST(Safetensors, WriterRejectsBadInput) {
    std::vector<uint8_t> data(18);
    auto st = safetensors_to_bytes({{"q", DType::kQ8_0, {32}, data.data(), 34}}, {});
    EXPECT_EQ(st.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(st.status().message().find("'q'"), std::string::npos);
    st = safetensors_to_bytes({{"x", DType::kF32, {4}, data.data(), 12}}, {});
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    st = safetensors_to_bytes({{"x", DType::kU8, {1}, data.data(), 1}, {"x", DType::kU8, {1}, data.data(), 1}}, {});
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    st = safetensors_to_bytes({{"__metadata__", DType::kU8, {1}, data.data(), 1}}, {});
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
}

// ---- sharded checkpoints ----

void write_shard(const std::string& path, const std::vector<Owned>& owned) {
    ASSERT_TRUE(write_safetensors(path, as_inputs(owned), {{"format", "pt"}}).is_ok());
}

TEST(SafetensorsSet, ShardedIndexFindsEveryTensorOnce) {
    std::string dir = test::temp_dir("safetensors_sharded");
    std::vector<Owned> all = sample_tensors();
    std::vector<Owned> a(all.begin(), all.begin() + 4), b(all.begin() + 4, all.end());
    write_shard(dir + "/model-00001-of-00002.safetensors", a);
    write_shard(dir + "/model-00002-of-00002.safetensors", b);
    std::string index = R"({"metadata": {"total_size": 51}, "weight_map": {)";
    for (size_t i = 0; i < all.size(); ++i)
        index += (i ? "," : "") + std::string("\"") + all[i].name + "\": \"model-0000" + (i < 4 ? "1" : "2") +
                 "-of-00002.safetensors\"";
    index += "}}";
    test::write_file(dir + "/model.safetensors.index.json", index);

    auto set = SafetensorsSet::open(dir);
    ASSERT_TRUE(set.is_ok()) << set.status().to_string();
    EXPECT_EQ(set->shards().size(), 2u);
    EXPECT_EQ(set->num_tensors(), all.size());
    for (const Owned& o : all) {
        const SafetensorsTensorInfo* t = set->find_tensor(o.name);
        ASSERT_NE(t, nullptr) << o.name;
        EXPECT_EQ(t->shape, o.shape);
        if (!o.bytes.empty()) {
            EXPECT_EQ(0, std::memcmp(set->find_data(o.name), o.bytes.data(), o.bytes.size())) << o.name;
        }
    }
    EXPECT_EQ(set->metadata().at("format"), "pt");
}

TEST(SafetensorsSet, DuplicateTensorAcrossShardsIsAnError) {
    std::string dir = test::temp_dir("safetensors_dup");
    std::vector<Owned> all = sample_tensors();
    write_shard(dir + "/a.safetensors", {all[0], all[1]});
    write_shard(dir + "/b.safetensors", {all[1], all[2]});
    test::write_file(dir + "/model.safetensors.index.json",
                     std::string(R"({"weight_map": {"odd_bytes": "a.safetensors", "embed": "a.safetensors",)") +
                         R"("half": "b.safetensors"}})");
    auto set = SafetensorsSet::open(dir);
    ASSERT_FALSE(set.is_ok());
    EXPECT_EQ(set.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(set.status().message().find("'embed'"), std::string::npos) << set.status().message();

    // Without an index every *.safetensors is a shard: the same duplicate is found.
    std::filesystem::remove(dir + "/model.safetensors.index.json");
    EXPECT_FALSE(SafetensorsSet::open(dir).is_ok());
}

TEST(SafetensorsSet, BadIndexEntriesAreErrors) {
    std::string dir = test::temp_dir("safetensors_bad_index");
    std::vector<Owned> all = sample_tensors();
    write_shard(dir + "/a.safetensors", {all[0]});
    auto expect_error = [&](const std::string& index, const std::string& needle) {
        test::write_file(dir + "/model.safetensors.index.json", index);
        auto set = SafetensorsSet::open(dir);
        ASSERT_FALSE(set.is_ok()) << index;
        EXPECT_NE(set.status().message().find(needle), std::string::npos) << set.status().message();
    };
    expect_error(R"({"weight_map": {"embed": "a.safetensors"}})", "'embed'");  // not in that shard
    expect_error(R"({"weight_map": {"odd_bytes": "../a.safetensors"}})", "plain file name");
    expect_error(R"({"weight_map": {"odd_bytes": "missing.safetensors"}})", "missing.safetensors");
    expect_error(R"({"weight_map": []})", "weight_map");
    expect_error(R"({"weight_map": {"odd_bytes": 3}})", "odd_bytes");
    expect_error("{nope", "JSON");
}

TEST(SafetensorsSet, SingleFileAndPlainDirectory) {
    std::string dir = test::temp_dir("safetensors_single");
    write_shard(dir + "/model.safetensors", sample_tensors());
    auto by_file = SafetensorsSet::open(dir + "/model.safetensors");
    ASSERT_TRUE(by_file.is_ok());
    auto by_dir = SafetensorsSet::open(dir);
    ASSERT_TRUE(by_dir.is_ok());
    EXPECT_EQ(by_dir->num_tensors(), sample_tensors().size());
    EXPECT_EQ(SafetensorsSet::open(test::temp_dir("safetensors_empty_dir")).status().code(), StatusCode::kNotFound);
}

// ---- interop with the reference implementation ----

bool python_safetensors_available() {
    return std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") == 0;
}

TEST(Safetensors, ReadsFileWrittenByPythonSafetensors) {
    if (!python_safetensors_available()) KILN_SKIP_MISSING() << "python3 with safetensors + numpy not installed";
    std::string path = test::temp_dir("safetensors_python") + "/py.safetensors";
    std::string cmd =
        "python3 -c \"import numpy as np; from safetensors.numpy import save_file; "
        "save_file({'w': np.arange(6, dtype=np.float32).reshape(2, 3), "
        "'b': np.array([1, -2, 3], dtype=np.int8), 'h': np.array([0.5, 2.0], dtype=np.float16)}, '" +
        path + "', metadata={'format': 'np'})\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ(f->metadata().at("format"), "np");
    const SafetensorsTensorInfo* w = f->find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dtype, DType::kF32);
    EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3}));
    float vals[6];
    std::memcpy(vals, f->tensor_data(*w), sizeof(vals));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(vals[i], float(i));
    const SafetensorsTensorInfo* b = f->find_tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->dtype, DType::kI8);
    EXPECT_EQ(int8_t(f->tensor_data(*b)[1]), -2);
    ASSERT_NE(f->find_tensor("h"), nullptr);
    EXPECT_EQ(f->find_tensor("h")->dtype, DType::kF16);
}

TEST(Safetensors, PythonSafetensorsReadsOurFile) {
    if (!python_safetensors_available()) KILN_SKIP_MISSING() << "python3 with safetensors + numpy not installed";
    std::vector<Owned> owned = {
        {"a", DType::kF32, {2, 2}, {}},
        {"c", DType::kI8, {3}, {1, 0xfe, 3}},
        {"b", DType::kF16, {3}, {}},
    };
    float fa[4] = {1, 2, 3, 4};
    owned[0].bytes.assign(reinterpret_cast<uint8_t*>(fa), reinterpret_cast<uint8_t*>(fa) + 16);
    uint16_t hb[3] = {0x3c00, 0x4000, 0xc200};  // 1, 2, -3
    owned[2].bytes.assign(reinterpret_cast<uint8_t*>(hb), reinterpret_cast<uint8_t*>(hb) + 6);
    std::string path = test::temp_dir("safetensors_python_reads") + "/ours.safetensors";
    ASSERT_TRUE(write_safetensors(path, as_inputs(owned), {{"format", "pt"}}).is_ok());
    std::string cmd =
        "python3 -c \"from safetensors.numpy import load_file; from safetensors import safe_open; "
        "t = load_file('" +
        path +
        "'); "
        "assert t['a'].tolist() == [[1, 2], [3, 4]], t; assert t['c'].tolist() == [1, -2, 3], t; "
        "assert t['b'].tolist() == [1, 2, -3], t; "
        "assert safe_open('" +
        path + "', 'np').metadata() == {'format': 'pt'}\"";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace kiln::formats
