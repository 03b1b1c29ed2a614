// Hand-made corrupt safetensors files: each must give a clear Status (never a crash), naming the
// problem and, where there is one, the tensor.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "formats/safetensors.h"
#include "support/test_support.h"

namespace kiln::formats {
namespace {

using core::DType;
using core::StatusCode;

std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes, uint64_t claimed_len = UINT64_MAX) {
    uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
    std::vector<uint8_t> bytes(8);
    for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(n >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + data_bytes, 0xab);
    return bytes;
}

core::Status parse_status(const std::vector<uint8_t>& bytes) {
    return SafetensorsFile::parse(bytes.data(), bytes.size(), "bad.safetensors").status();
}

void expect_error(const std::vector<uint8_t>& bytes, StatusCode code, const std::vector<std::string>& needles) {
    core::Status st = parse_status(bytes);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find("bad.safetensors"), std::string::npos) << st.message();
    for (const std::string& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(SafetensorsCorrupt, EveryTruncationOfAValidFileFails) {
    float a[3] = {1, 2, 3};
    int8_t b[5] = {1, 2, 3, 4, 5};
    auto bytes = safetensors_to_bytes({{"a", DType::kF32, {3}, a, 12}, {"b", DType::kI8, {5}, b, 5}}, {{"k", "v"}});
    ASSERT_TRUE(bytes.is_ok());
    ASSERT_TRUE(SafetensorsFile::parse(bytes->data(), bytes->size(), "ok").is_ok());
    for (size_t len = 0; len < bytes->size(); ++len) {
        std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + ptrdiff_t(len));
        auto f = SafetensorsFile::parse(cut.data(), cut.size(), "cut");
        EXPECT_FALSE(f.is_ok()) << "prefix of " << len << " bytes parsed";
        if (!f.is_ok()) {
            EXPECT_EQ(f.status().code(), StatusCode::kCorrupt) << f.status().to_string();
        }
    }
}

TEST(SafetensorsCorrupt, TooShortForTheLength) {
    expect_error({}, StatusCode::kCorrupt, {"8-byte"});
    expect_error({1, 0, 0}, StatusCode::kCorrupt, {"8-byte"});
}

TEST(SafetensorsCorrupt, HeaderLengthPastTheFile) {
    expect_error(make_file("{}", 0, 1000), StatusCode::kCorrupt, {"header length 1000", "past the end"});
    expect_error(make_file("{}", 0, UINT64_MAX - 1), StatusCode::kCorrupt, {"over the limit"});
    expect_error(make_file("{}", 0, (uint64_t(100) << 20) + 1), StatusCode::kCorrupt, {"over the limit"});
}

TEST(SafetensorsCorrupt, InvalidJson) {
    expect_error(make_file("{\"a\": ", 0), StatusCode::kCorrupt, {"not valid JSON"});
    expect_error(make_file("", 0), StatusCode::kCorrupt, {"not valid JSON"});
    expect_error(make_file("{\"a\":\"\xff\"}", 0), StatusCode::kCorrupt, {"not valid JSON"});  // bad UTF-8
    expect_error(make_file("[1, 2]", 0), StatusCode::kCorrupt, {"not a JSON object"});
    expect_error(make_file("{\"t\": 3}", 0), StatusCode::kCorrupt, {"'t'", "not a JSON object"});
}

TEST(SafetensorsCorrupt, OffsetsPastTheEnd) {
    expect_error(make_file("{" + entry("w", "F32", "[4]", 0, 16) + "}", 8), StatusCode::kCorrupt,
                 {"'w'", "end 16", "past the end of the data (8 bytes)"});
    expect_error(make_file("{" + entry("w", "F32", "[1]", 8, 4) + "}", 8), StatusCode::kCorrupt, {"'w'", "before"});
}

TEST(SafetensorsCorrupt, OverlappingTensors) {
    std::string h = "{" + entry("x", "F32", "[2]", 0, 8) + "," + entry("y", "F32", "[2]", 4, 12) + "}";
    expect_error(make_file(h, 12), StatusCode::kCorrupt, {"'y'", "overlaps", "'x'"});
    // Holes between tensors are accepted.
    std::string holes = "{" + entry("x", "F32", "[1]", 0, 4) + "," + entry("y", "F32", "[1]", 8, 12) + "}";
    EXPECT_TRUE(parse_status(make_file(holes, 12)).is_ok());
}

TEST(SafetensorsCorrupt, ByteCountMismatch) {
    expect_error(make_file("{" + entry("w", "F16", "[2,3]", 0, 8) + "}", 16), StatusCode::kCorrupt,
                 {"'w'", "span 8 bytes", "needs 12"});
}

TEST(SafetensorsCorrupt, UnknownDtypeNamesTheTensor) {
    expect_error(make_file("{" + entry("layer.w", "Q4", "[2]", 0, 1) + "}", 1), StatusCode::kUnsupported,
                 {"'layer.w'", "'Q4'", "F32"});
    expect_error(make_file("{" + entry("u", "U32", "[1]", 0, 4) + "}", 4), StatusCode::kUnsupported, {"'U32'"});
}

TEST(SafetensorsCorrupt, HugeShapes) {
    expect_error(make_file("{" + entry("h", "F32", "[4294967296,4294967296,2]", 0, 8) + "}", 8), StatusCode::kCorrupt,
                 {"'h'", "overflows"});
    // Fits in elements, overflows in bytes.
    expect_error(make_file("{" + entry("h", "F64", "[4611686018427387904]", 0, 8) + "}", 8), StatusCode::kCorrupt,
                 {"'h'", "overflows"});
    expect_error(make_file("{" + entry("h", "F32", "[18446744073709551616]", 0, 8) + "}", 8), StatusCode::kCorrupt,
                 {"'h'", "shape entry"});
    std::string rank = "[1";
    for (int i = 0; i < 20; ++i) rank += ",1";
    rank += "]";
    expect_error(make_file("{" + entry("h", "F32", rank, 0, 4) + "}", 4), StatusCode::kCorrupt, {"dimensions"});
}

TEST(SafetensorsCorrupt, MalformedEntries) {
    expect_error(make_file("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), StatusCode::kCorrupt,
                 {"'w'", "dtype"});
    expect_error(make_file("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), StatusCode::kCorrupt,
                 {"'w'", "shape"});
    expect_error(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4), StatusCode::kCorrupt,
                 {"'w'", "data_offsets"});
    expect_error(make_file("{" + entry("w", "F32", "[-1]", 0, 4) + "}", 4), StatusCode::kCorrupt, {"'w'", "-1"});
    expect_error(make_file("{" + entry("w", "F32", "[1.5]", 0, 4) + "}", 4), StatusCode::kCorrupt, {"'w'"});
    expect_error(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4),
                 StatusCode::kCorrupt, {"'w'", "data_offsets"});
    expect_error(make_file("{\"__metadata__\":{\"k\":1}}", 0), StatusCode::kCorrupt, {"__metadata__", "'k'"});
    expect_error(make_file("{\"__metadata__\":[]}", 0), StatusCode::kCorrupt, {"__metadata__"});
    expect_error(make_file("{" + entry("w", "F32", "[1]", 0, 4) + "," + entry("w", "F32", "[1]", 0, 4) + "}", 4),
                 StatusCode::kCorrupt, {"'w'", "twice"});
}

// Error messages used to dump() the offending JSON value, which recurses: a 100k-deep nested array
// overflowed the stack. They now print scalars only and name containers by type.
TEST(SafetensorsCorrupt, DeeplyNestedValuesInErrorsDoNotRecurse) {
    const size_t kDepth = 100000;
    const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
    expect_error(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1," + deep + "],\"data_offsets\":[0,4]}}", 4),
                 StatusCode::kCorrupt, {"'w'", "shape entry array of size 1"});
    expect_error(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0," + deep + "]}}", 4),
                 StatusCode::kCorrupt, {"'w'", "data_offsets [0, array of size 1]"});
    // Scalars are still shown, long strings cut short.
    expect_error(
        make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"" + std::string(1000, 'x') + "\"],\"data_offsets\":[0,4]}}",
                  4),
        StatusCode::kCorrupt, {"'w'", "shape entry \"" + std::string(60, 'x') + "\"..."});
}

// A directory that cannot be listed is an I/O error, not an exception out of directory_iterator.
// Listing takes a file descriptor, so with none left opendir fails (EMFILE) for root too, where
// permissions would not stop it: the soft RLIMIT_NOFILE is lowered and every descriptor under it used.
TEST(SafetensorsCorrupt, UnlistableDirectoryIsAnError) {
    std::string dir = test::temp_dir("safetensors_unlistable");
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
    rlimit low = old;
    low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 256);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    std::vector<int> fds;
    int last_errno = 0;
    for (;;) {
        const int fd = ::dup(2);
        if (fd < 0) {
            last_errno = errno;
            break;
        }
        fds.push_back(fd);
    }
    auto set = SafetensorsSet::open(dir);
    for (int fd : fds) ::close(fd);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
    ASSERT_EQ(last_errno, EMFILE);
    ASSERT_FALSE(set.is_ok());
    EXPECT_EQ(set.status().code(), StatusCode::kIo) << set.status().to_string();
    EXPECT_NE(set.status().message().find("cannot list"), std::string::npos) << set.status().message();
}

TEST(SafetensorsCorrupt, OpenNamesThePath) {
    std::string dir = test::temp_dir("safetensors_corrupt_open");
    test::write_file(dir + "/x.safetensors", std::string("\x05\0\0\0\0\0\0\0{bad}", 13));
    auto f = SafetensorsFile::open(dir + "/x.safetensors");
    ASSERT_FALSE(f.is_ok());
    EXPECT_NE(f.status().message().find("x.safetensors"), std::string::npos);
    EXPECT_EQ(SafetensorsFile::open(dir + "/missing.safetensors").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::formats
