// Hand-made corrupt GGUF images: each must fail with a Status (never crash, never allocate on an
// unchecked count) whose message names the file, the offending field and, where there is one, the
// byte offset. Layout facts per ggml docs/gguf.md: header is magic(4) version(4) tensor_count(8)
// kv_count(8), so the first kv starts at byte 24.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "gguf_bytes.h"

namespace kiln::formats {
namespace {

using core::DType;
using core::StatusCode;
using test::GgufBytes;

constexpr uint32_t kTypeU32 = 4, kTypeBool = 7, kTypeArray = 9, kTypeU64 = 10;
constexpr uint32_t kGgmlF32 = 0, kGgmlQ4_0 = 2;

void expect_error(const std::vector<uint8_t>& bytes, StatusCode code, std::initializer_list<std::string> parts) {
    core::Result<GgufFile> r = GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf");
    ASSERT_FALSE(r.is_ok()) << "parsed a corrupt file";
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    const std::string& msg = r.status().message();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

// A valid file whose last byte is the last byte of a tensor (so every strict prefix is truncated).
std::vector<uint8_t> small_valid_file() {
    static const float kData[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const uint8_t kQ[18] = {0x00, 0x38, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    GgufWriter w;
    w.set("general.architecture", gguf_string("llama"));
    w.set("a.u32", gguf_u32(7));
    w.set("a.nested", gguf_array(GgufType::kArray, {gguf_f32_array({1.5f}), gguf_f32_array({})}));
    w.set("a.bool", gguf_bool(true));
    w.add_tensor("q", DType::kQ4_0, {32}, kQ, 18);
    w.add_tensor("w", DType::kF32, {8}, kData, 32);
    return w.to_bytes();
}

TEST(GgufCorrupt, EveryTruncationFailsCleanly) {
    std::vector<uint8_t> file = small_valid_file();
    ASSERT_TRUE(GgufFile::parse(file.data(), file.size(), "ok.gguf").is_ok());
    for (size_t len = 0; len < file.size(); ++len) {
        std::vector<uint8_t> prefix(file.begin(), file.begin() + std::ptrdiff_t(len));
        core::Result<GgufFile> r = GgufFile::parse(prefix.data(), prefix.size(), "bad.gguf");
        ASSERT_FALSE(r.is_ok()) << "prefix of " << len << " bytes parsed";
        EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().to_string();
        EXPECT_NE(r.status().message().find("byte offset"), std::string::npos) << r.status().message();
    }
    expect_error({}, StatusCode::kCorrupt, {"truncated reading magic at byte offset 0"});
    EXPECT_FALSE(GgufFile::parse(nullptr, 0, "bad.gguf").is_ok());
}

TEST(GgufCorrupt, BadMagicAndVersions) {
    GgufBytes b;
    b.raw("GGUX", 4).u32(3).u64(0).u64(0);
    expect_error(b.bytes, StatusCode::kCorrupt, {"bad magic", "byte offset 0"});
    expect_error(GgufBytes().header(1, 0, 0).bytes, StatusCode::kUnsupported, {"version 1", "byte offset 4"});
    expect_error(GgufBytes().header(4, 0, 0).bytes, StatusCode::kUnsupported, {"version 4"});
    expect_error(GgufBytes().header(0x03000000, 0, 0).bytes, StatusCode::kUnsupported, {"big-endian"});
}

TEST(GgufCorrupt, HugeCounts) {
    expect_error(GgufBytes().header(3, uint64_t(1) << 40, 0).zeros(64).bytes, StatusCode::kCorrupt,
                 {"header longer than the file", "tensor_count 1099511627776", "byte offset 8"});
    expect_error(GgufBytes().header(3, 0, ~uint64_t(0)).bytes, StatusCode::kCorrupt, {"kv_count"});
    // Each count alone fits, together they do not.
    expect_error(GgufBytes().header(3, 2, 2).zeros(60).bytes, StatusCode::kCorrupt, {"header longer than the file"});
}

TEST(GgufCorrupt, HugeStringLength) {
    GgufBytes key;
    key.header(3, 0, 1).u64(uint64_t(1) << 60).zeros(16);
    expect_error(key.bytes, StatusCode::kCorrupt,
                 {"key of metadata entry #0", "length 1152921504606846976", "byte offset 24"});
    GgufBytes val;
    val.header(3, 0, 1).str("k").u32(8).u64(~uint64_t(0) - 3).zeros(8);
    expect_error(val.bytes, StatusCode::kCorrupt, {"value of key 'k'", "byte offset 37"});
}

TEST(GgufCorrupt, HugeArrayCount) {
    GgufBytes b;
    b.header(3, 0, 1).str("arr").u32(kTypeArray).u32(kTypeU32).u64(uint64_t(1) << 62).zeros(32);
    expect_error(b.bytes, StatusCode::kCorrupt,
                 {"value of key 'arr'", "array count 4611686018427387904", "byte offset 43"});
    // Strings take at least 8 bytes each: 4 strings cannot fit in 31 bytes.
    GgufBytes s;
    s.header(3, 0, 1).str("s").u32(kTypeArray).u32(8).u64(4).zeros(31);
    expect_error(s.bytes, StatusCode::kCorrupt, {"array count 4"});
    // More elements in all than kGgufMaxMetadataElements, each one byte: refused before allocating.
    GgufBytes many;
    many.header(3, 0, 1).str("m").u32(kTypeArray).u32(0).u64(kGgufMaxMetadataElements + 1);
    many.zeros(size_t(kGgufMaxMetadataElements + 1));
    expect_error(many.bytes, StatusCode::kCorrupt, {"metadata array elements"});
}

TEST(GgufCorrupt, BadValues) {
    GgufBytes type;
    type.header(3, 0, 1).str("k").u32(13).u32(0);
    expect_error(type.bytes, StatusCode::kCorrupt, {"key 'k'", "unknown value type 13", "byte offset 33"});
    GgufBytes elem;
    elem.header(3, 0, 1).str("k").u32(kTypeArray).u32(99).u64(0);
    expect_error(elem.bytes, StatusCode::kCorrupt, {"unknown array element type 99"});
    GgufBytes boolean;
    boolean.header(3, 0, 1).str("k").u32(kTypeBool).u8(2);
    expect_error(boolean.bytes, StatusCode::kCorrupt, {"bool", "byte offset 37"});
    GgufBytes dup;
    dup.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
    expect_error(dup.bytes, StatusCode::kCorrupt, {"duplicate metadata key 'k'", "byte offset 41"});
    // Arrays nested kGgufMaxArrayDepth deep are fine, one more level is not.
    for (uint32_t depth : {kGgufMaxArrayDepth, kGgufMaxArrayDepth + 1}) {
        GgufBytes nest;
        nest.header(3, 0, 1).str("n").u32(kTypeArray);
        for (uint32_t d = 1; d < depth; ++d) nest.u32(kTypeArray).u64(1);
        nest.u32(kTypeU32).u64(0);
        core::Result<GgufFile> r = GgufFile::parse(nest.bytes.data(), nest.size(), "bad.gguf");
        if (depth <= kGgufMaxArrayDepth) {
            EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        } else {
            expect_error(nest.bytes, StatusCode::kCorrupt, {"nested more than 8 deep"});
        }
    }
}

TEST(GgufCorrupt, BadAlignment) {
    expect_error(GgufBytes().header(3, 0, 1).kv_u32("general.alignment", 48).bytes, StatusCode::kCorrupt,
                 {"general.alignment 48", "power of two", "byte offset 53"});
    expect_error(GgufBytes().header(3, 0, 1).kv_u32("general.alignment", 0).bytes, StatusCode::kCorrupt,
                 {"general.alignment 0"});
    GgufBytes wide;
    wide.header(3, 0, 1).str("general.alignment").u32(kTypeU64).u64(64);
    expect_error(wide.bytes, StatusCode::kCorrupt, {"general.alignment must be u32", "u64"});
}

// A file with one tensor info `w` and `data_bytes` zero bytes of data after the aligned header.
GgufBytes one_tensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    GgufBytes b;
    b.header(3, 1, 0).tensor("w", std::move(ne), type, offset).pad_to(32).zeros(data_bytes);
    return b;
}

TEST(GgufCorrupt, BadTensorInfos) {
    GgufBytes good = one_tensor({8}, kGgmlF32, 0, 32);
    ASSERT_TRUE(GgufFile::parse(good.bytes.data(), good.size(), "ok.gguf").is_ok());
    expect_error(one_tensor({1, 1, 1, 1, 1}, kGgmlF32, 0, 32).bytes, StatusCode::kCorrupt,
                 {"tensor 'w'", "n_dims 5", "byte offset 33"});
    expect_error(one_tensor({256}, 16, 0, 64).bytes, StatusCode::kUnsupported,
                 {"tensor 'w'", "ggml type 16 (iq2_xxs)", "byte offset 45"});
    expect_error(one_tensor({32}, 4242, 0, 64).bytes, StatusCode::kUnsupported, {"tensor 'w'", "4242"});
    expect_error(one_tensor({16}, kGgmlQ4_0, 0, 64).bytes, StatusCode::kCorrupt,
                 {"tensor 'w'", "row length 16", "block size 32"});
    expect_error(one_tensor({uint64_t(1) << 32, uint64_t(1) << 32}, kGgmlF32, 0, 32).bytes, StatusCode::kCorrupt,
                 {"tensor 'w'", "overflows"});
    expect_error(one_tensor({8}, kGgmlF32, 1024, 32).bytes, StatusCode::kCorrupt,
                 {"tensor 'w'", "extends past the end", "byte offset 24"});
    expect_error(one_tensor({8}, kGgmlF32, 0, 31).bytes, StatusCode::kCorrupt, {"extends past the end"});
    expect_error(one_tensor({8}, kGgmlF32, 4, 64).bytes, StatusCode::kCorrupt,
                 {"tensor 'w'", "data offset 4 is not a multiple of the alignment 32", "byte offset 49"});
    // 2^62 f32s: the element count fits in int64, the byte size overflows u64.
    expect_error(one_tensor({uint64_t(1) << 62}, kGgmlF32, 0, 32).bytes, StatusCode::kCorrupt,
                 {"tensor 'w'", "byte size overflows"});
}

TEST(GgufCorrupt, OverlapsAndDuplicates) {
    GgufBytes overlap;
    overlap.header(3, 2, 0).tensor("a", {16}, kGgmlF32, 0).tensor("b", {8}, kGgmlF32, 32).pad_to(32).zeros(96);
    expect_error(overlap.bytes, StatusCode::kCorrupt, {"tensors 'a' and 'b' overlap"});
    GgufBytes same;
    same.header(3, 2, 0).tensor("a", {8}, kGgmlF32, 0).tensor("b", {8}, kGgmlF32, 0).pad_to(32).zeros(32);
    expect_error(same.bytes, StatusCode::kCorrupt, {"overlap"});
    GgufBytes ok;  // adjacent, listed out of order, plus an empty tensor: fine
    ok.header(3, 3, 0).tensor("b", {8}, kGgmlF32, 32).tensor("a", {8}, kGgmlF32, 0).tensor("e", {0}, kGgmlF32, 32);
    ok.pad_to(32).zeros(64);
    EXPECT_TRUE(GgufFile::parse(ok.bytes.data(), ok.size(), "ok.gguf").is_ok());
    GgufBytes dup;
    dup.header(3, 2, 0).tensor("a", {8}, kGgmlF32, 0).tensor("a", {8}, kGgmlF32, 32).pad_to(32).zeros(64);
    expect_error(dup.bytes, StatusCode::kCorrupt, {"duplicate tensor name 'a'", "byte offset 57"});
}

// A 1 MiB key over an array of 500k empty inner arrays: 13 bytes a value, but the parser used to
// build two new strings as long as the key for every inner array (~1 TB of copying, a hang). Now
// the key is only copied into a message on error, so this parses at once, and a broken copy fails
// naming the key's field only once.
TEST(GgufCorrupt, LongKeyOverManyNestedArraysParsesQuickly) {
    const std::string key(size_t(1) << 20, 'k');
    constexpr uint64_t kInner = 500000;
    GgufBytes b;
    b.header(3, 0, 1).str(key).u32(kTypeArray).u32(kTypeArray).u64(kInner);
    for (uint64_t i = 0; i < kInner; ++i) b.u32(kTypeU32).u64(0);
    core::Result<GgufFile> r = GgufFile::parse(b.bytes.data(), b.size(), "long.gguf");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string().substr(0, 200);
    ASSERT_NE(r->find(key), nullptr);
    EXPECT_EQ(r->find(key)->array.size(), kInner);

    // The last inner array claims one u32 that is not there.
    std::vector<uint8_t> bad_bytes = b.bytes;
    bad_bytes[bad_bytes.size() - 8] = 1;
    core::Result<GgufFile> bad = GgufFile::parse(bad_bytes.data(), bad_bytes.size(), "bad.gguf");
    ASSERT_FALSE(bad.is_ok());
    const std::string& msg = bad.status().message();
    const std::string tail = msg.substr(msg.size() > 200 ? msg.size() - 200 : 0);
    EXPECT_NE(msg.find("': array count 1 of u32 exceeds the 0 bytes left"), std::string::npos) << tail;
    EXPECT_NE(msg.find("(array element 499999)"), std::string::npos) << tail;
    EXPECT_LT(msg.size(), key.size() + 400);  // the key appears once
}

TEST(GgufCorrupt, HeaderLongerThanFile) {
    // The tensor infos end at byte 57, so data would start at 64 in a 57-byte file.
    GgufBytes b;
    b.header(3, 1, 0).tensor("w", {0}, kGgmlF32, 0);
    ASSERT_EQ(b.size(), 57u);
    expect_error(b.bytes, StatusCode::kCorrupt, {"header longer than the file", "byte offset 64", "57 bytes"});
}

}  // namespace
}  // namespace kiln::formats
