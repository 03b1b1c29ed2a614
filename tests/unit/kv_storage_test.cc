// KvStorage: sizes and argument errors, K/V arrays that do not overlap, prefault(): every page of
// the pool resident afterwards (mincore) and still zero, and collapse_blocks(): written K/V intact
// after the background collapse.
#include "kv/kv_storage.h"

#include "core/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace kiln::kv {
namespace {

TEST(KvStorage, SizesAndLayout) {
    auto s = KvStorage::create(3, 10, 16, 64 * 2);  // rows of 64 halves
    ASSERT_TRUE(s) << s.status().to_string();
    EXPECT_EQ(KvStorage::bytes_per_block(3, 16, 128), 2 * 3 * 16 * 64 * 2);
    EXPECT_EQ((*s)->bytes(), size_t(10 * KvStorage::bytes_per_block(3, 16, 128)));
    EXPECT_EQ((*s)->row_bytes(), 128);
    const auto* base = static_cast<const uint8_t*>((*s)->k(0));
    const size_t layer = 10 * 16 * 64 * 2;
    for (int64_t l = 0; l < 3; ++l) {
        EXPECT_EQ(static_cast<const uint8_t*>((*s)->k(l)), base + 2 * l * layer);
        EXPECT_EQ(static_cast<const uint8_t*>((*s)->v(l)), base + (2 * l + 1) * layer);
    }
}

TEST(KvStorage, BadArguments) {
    EXPECT_FALSE(KvStorage::create(2, 4, 16, 0));
    EXPECT_FALSE(KvStorage::create(0, 4, 16, 256));
    EXPECT_FALSE(KvStorage::create(2, 4, 0, 256));
    EXPECT_FALSE(KvStorage::create(2, -1, 16, 256));
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
    auto s = KvStorage::create(2, 37, 16, 96 * 4);
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

TEST(KvStorage, CollapsedBlocksKeepTheirContents) {
    // 2 layers x 300 blocks x 16 x 128 f32 = 8 KiB per block and plane: 256 blocks per 2 MiB.
    auto s = KvStorage::create(2, 300, 16, 128 * 4);
    ASSERT_TRUE(s) << s.status().to_string();
    const size_t block = 16 * 128 * 4;
    auto fill = [&](int64_t b0, int64_t b1) {
        for (int64_t l = 0; l < 2; ++l)
            for (int64_t b = b0; b < b1; ++b)
                for (int kv = 0; kv < 2; ++kv) {
                    auto* p = static_cast<uint8_t*>(kv ? (*s)->v(l) : (*s)->k(l)) + size_t(b) * block;
                    for (size_t i = 0; i < block; ++i) p[i] = uint8_t(b * 7 + l * 3 + kv + i);
                }
    };
    fill(0, 10);
    (*s)->collapse_blocks(10);
    (*s)->collapse_blocks(5);  // nothing new
    fill(10, 270);
    (*s)->collapse_blocks(270);
    core::wait_huge_page_collapse();
    for (int64_t l = 0; l < 2; ++l)
        for (int64_t b = 0; b < 270; ++b)
            for (int kv = 0; kv < 2; ++kv) {
                const auto* p = static_cast<const uint8_t*>(kv ? (*s)->v(l) : (*s)->k(l)) + size_t(b) * block;
                for (size_t i = 0; i < block; i += 97)
                    ASSERT_EQ(p[i], uint8_t(b * 7 + l * 3 + kv + i)) << "layer " << l << " block " << b;
            }
}

}  // namespace
}  // namespace kiln::kv
