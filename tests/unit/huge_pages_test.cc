// core/huge_pages.h: 2 MiB-aligned mappings, and buffers carved one after the other out of shared
// chunks that live as long as any of their buffers.
#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kiln::core {
namespace {

bool all_zero(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0) return false;
    return true;
}

TEST(HugePages, MappingsStartOnA2MiBBoundary) {
    EXPECT_EQ(map_huge_pages(0).status().code(), StatusCode::kInvalidArgument);
    for (size_t bytes : {size_t(1), size_t(3) << 20, size_t(4) << 20}) {
        auto m = map_huge_pages(bytes);
        ASSERT_TRUE(m.is_ok()) << m.status().message();
        uint8_t* p = m->get();
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
        ASSERT_TRUE(all_zero(p, bytes));
        std::memset(p, 0x5a, bytes);  // writable end to end
        EXPECT_EQ(p[bytes - 1], 0x5a);
    }
}

TEST(HugePages, BuffersFollowEachOtherInASharedChunk) {
    EXPECT_EQ(huge_page_buffer(0).status().code(), StatusCode::kInvalidArgument);
    // A chunk of its own first, so that the small buffers below start a fresh one.
    auto big = huge_page_buffer(kArenaChunkBytes + 1);
    ASSERT_TRUE(big.is_ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big->get()) % kHugePageBytes, 0u);
    big->get()[kArenaChunkBytes] = 1;
    std::vector<std::shared_ptr<uint8_t>> bufs;
    const size_t sizes[] = {100, 64, 3 << 20, 1, 5000};
    for (size_t n : sizes) {
        auto b = huge_page_buffer(n);
        ASSERT_TRUE(b.is_ok()) << b.status().message();
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b->get()) % 64, 0u);
        ASSERT_TRUE(all_zero(b->get(), n));
        bufs.push_back(*b);
    }
    // The big chunk's rounding slack (2 MiB - 1 byte - 63) holds the 100 and 64 byte buffers; the
    // 3 MiB one opens a new chunk on a 2 MiB boundary and the rest follow it 64-byte aligned.
    EXPECT_EQ(bufs[0].get(), big->get() + kArenaChunkBytes + 64);
    EXPECT_EQ(bufs[1].get(), bufs[0].get() + 128);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bufs[2].get()) % kHugePageBytes, 0u);
    EXPECT_EQ(bufs[3].get(), bufs[2].get() + (3 << 20));
    EXPECT_EQ(bufs[4].get(), bufs[3].get() + 64);
    for (size_t i = 0; i < bufs.size(); ++i) std::memset(bufs[i].get(), int(i + 1), sizes[i]);
    // Dropping some buffers (and the big one) leaves the others intact: the chunk lives on in them.
    big->reset();
    bufs[2].reset();
    EXPECT_EQ(bufs[0].get()[99], 1);
    EXPECT_EQ(bufs[3].get()[0], 4);
    EXPECT_EQ(bufs[4].get()[4999], 5);
    bufs.clear();
    auto again = huge_page_buffer(1 << 20);  // every chunk gone: a new one
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(again->get()) % kHugePageBytes, 0u);
    ASSERT_TRUE(all_zero(again->get(), 1 << 20));
}

}  // namespace
}  // namespace kiln::core
