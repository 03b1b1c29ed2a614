// Allocation bounds of the GGUF reader: a small file must not make it allocate much more than its
// own size from a count it claims. This executable replaces global operator new to record the
// largest single allocation, so it lives apart from the other GGUF tests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "formats/gguf.h"
#include "gguf_bytes.h"

namespace {
std::atomic<size_t> g_largest_alloc{0};
}  // namespace

void* operator new(std::size_t n) {
    size_t prev = g_largest_alloc.load();
    while (n > prev && !g_largest_alloc.compare_exchange_weak(prev, n)) {
    }
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}

namespace kiln::formats {
namespace {

// tensor_count is only capped by the bytes left (24 bytes per minimal tensor info), but a
// GgufTensorInfo takes ~80 bytes: reserving the claimed count used to allocate ~3.3x the file size
// before the first info was read. The reserve is now capped.
TEST(GgufAlloc, TensorCountDoesNotDriveAHugeReserve) {
    const size_t kFileBytes = size_t(16) << 20;
    test::GgufBytes b;
    b.header(3, 0, 0);
    const uint64_t claimed = (kFileBytes - b.size()) / 24;
    b.bytes.clear();
    b.header(3, claimed, 0).zeros(kFileBytes - 24);
    ASSERT_GT(claimed * sizeof(GgufTensorInfo), kFileBytes * 3);  // what an uncapped reserve would take

    g_largest_alloc = 0;
    core::Result<GgufFile> r = GgufFile::parse(b.bytes.data(), b.size(), "count.gguf");
    const size_t largest = g_largest_alloc.load();
    ASSERT_FALSE(r.is_ok());  // all-zero infos: the second one repeats the empty name
    EXPECT_NE(r.status().message().find("duplicate tensor name"), std::string::npos) << r.status().to_string();
    EXPECT_LT(largest, kFileBytes) << "largest allocation while parsing: " << largest << " bytes";
}

}  // namespace
}  // namespace kiln::formats
