// KvStorage: sizes and argument errors, K/V arrays that do not overlap, and prefault(): every page of
// the pool resident afterwards (mincore) and still zero.
#include "kv/kv_storage.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace kiln::kv {
namespace {

TEST(KvStorage, SizesAndLayout) {
    auto s = KvStorage::create(3, 10, 16, 64, 2);
    ASSERT_TRUE(s) << s.status().to_string();
    EXPECT_EQ(KvStorage::bytes_per_block(3, 16, 64, 2), 2 * 3 * 16 * 64 * 2);
    EXPECT_EQ((*s)->bytes(), size_t(10 * KvStorage::bytes_per_block(3, 16, 64, 2)));
    const auto* base = static_cast<const uint8_t*>((*s)->k(0));
    const size_t layer = 10 * 16 * 64 * 2;
    for (int64_t l = 0; l < 3; ++l) {
        EXPECT_EQ(static_cast<const uint8_t*>((*s)->k(l)), base + 2 * l * layer);
        EXPECT_EQ(static_cast<const uint8_t*>((*s)->v(l)), base + (2 * l + 1) * layer);
    }
}

TEST(KvStorage, BadArguments) {
    EXPECT_FALSE(KvStorage::create(2, 4, 16, 64, 3));
    EXPECT_FALSE(KvStorage::create(0, 4, 16, 64));
    EXPECT_FALSE(KvStorage::create(2, 4, 0, 64));
    EXPECT_FALSE(KvStorage::create(2, -1, 16, 64));
}

// Pages of [p, p + n) that are resident.
size_t resident_pages(const void* p, size_t n) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> vec((n + page - 1) / page);
    EXPECT_EQ(mincore(const_cast<void*>(p), n, vec.data()), 0);
    size_t in = 0;
    for (unsigned char v : vec) in += v & 1;
    return in;
}

TEST(KvStorage, PrefaultCommitsEveryPageAndKeepsZeros) {
    // 2 layers x 37 blocks x 16 x 96 f32 = 2.2 MiB: more than one 2 MiB range, the last one partial.
    auto s = KvStorage::create(2, 37, 16, 96);
    ASSERT_TRUE(s) << s.status().to_string();
    const size_t n = (*s)->bytes(), page = size_t(sysconf(_SC_PAGESIZE));
    const size_t pages = (n + page - 1) / page;
    EXPECT_LT(resident_pages((*s)->k(0), n), pages);  // lazily committed: nothing written yet
    for (int threads : {1, 2, 3}) {
        core::ThreadPool pool(threads);
        (*s)->prefault(pool);
        EXPECT_EQ(resident_pages((*s)->k(0), n), pages) << threads << " threads";
    }
    const auto* p = static_cast<const uint8_t*>((*s)->k(0));
    std::vector<uint8_t> zeros(n, 0);
    EXPECT_EQ(std::memcmp(p, zeros.data(), n), 0);
}

}  // namespace
}  // namespace kiln::kv
