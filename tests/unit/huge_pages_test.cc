// core/huge_pages.h: 2 MiB-aligned mappings, buffers carved one after the other out of shared
// chunks that live as long as any of their buffers, and deferred mappings collapsed into huge pages
// in the background with their contents intact (mappings freed before that skipped).
#include "core/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
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

// AnonHugePages (kB) of the mapping that holds p, from /proc/self/smaps; -1 when not found.
long anon_huge_kb(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool in = false;
    const auto a = reinterpret_cast<uintptr_t>(p);
    while (std::getline(smaps, line)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
            in = a >= lo && a < hi;
        } else if (in && line.rfind("AnonHugePages:", 0) == 0) {
            return std::stol(line.substr(14));
        }
    }
    return -1;
}

// Transparent huge pages usable (not "[never]") and MADV_COLLAPSE in the kernel (Linux >= 6.1).
bool can_collapse() {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode((std::istreambuf_iterator<char>(f)), {});
    utsname u{};
    if (mode.empty() || mode.find("[never]") != std::string::npos || uname(&u) != 0) return false;
    int major = 0, minor = 0;
    std::sscanf(u.release, "%d.%d", &major, &minor);
    return major > 6 || (major == 6 && minor >= 1);
}

TEST(HugePages, DeferredMappingsCollapseWithTheirContents) {
    start_huge_page_collapse();  // nothing waiting: returns at once
    wait_huge_page_collapse();
    const size_t bytes = size_t(8) << 20;
    auto m = map_huge_pages(bytes, HugePages::kDeferred);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    uint8_t* p = m->get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
    ASSERT_TRUE(all_zero(p, bytes));
    for (size_t i = 0; i < bytes; ++i) p[i] = uint8_t(i * 131 + (i >> 12));
    EXPECT_EQ(anon_huge_kb(p), 0) << "written on 4 KiB pages before the collapse";
    auto gone = map_huge_pages(size_t(4) << 20, HugePages::kDeferred);  // freed before it is handed over
    ASSERT_TRUE(gone.is_ok());
    std::memset(gone->get(), 1, size_t(4) << 20);
    gone->reset();
    auto buf = huge_page_buffer(size_t(3) << 20);  // arena chunks are deferred too
    ASSERT_TRUE(buf.is_ok());
    std::memset(buf->get(), 0x77, size_t(3) << 20);
    start_huge_page_collapse();
    wait_huge_page_collapse();
    for (size_t i = 0; i < bytes; ++i)
        ASSERT_EQ(p[i], uint8_t(i * 131 + (i >> 12))) << "byte " << i << " changed by the collapse";
    for (size_t i = 0; i < (size_t(3) << 20); ++i) ASSERT_EQ(buf->get()[i], 0x77) << i;
    // (GE: the kernel may have merged the mapping with a neighbour of the same flags.)
    if (can_collapse()) EXPECT_GE(anon_huge_kb(p), long(bytes >> 10)) << "every whole 2 MiB a huge page";
}

// HugePageAllocator (model::KvCache's rows): blocks from kHugeAllocMin on start on a 2 MiB boundary
// and take huge pages where THP allows them; smaller ones come from the heap; growth keeps the
// contents.
TEST(HugePages, AllocatorPutsLargeBlocksOnHugePages) {
    std::vector<uint8_t, HugePageAllocator<uint8_t>> v(1000, 7);
    v.resize(kHugeAllocMin + 3, 9);  // grows onto a mapping of its own
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % kHugePageBytes, 0u);
    EXPECT_EQ(v[999], 7);
    EXPECT_EQ(v[1000], 9);
    EXPECT_EQ(v.back(), 9);
    std::vector<uint8_t, HugePageAllocator<uint8_t>> copy = v;  // a copy owns its own block
    copy[0] = 1;
    EXPECT_EQ(v[0], 7);
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    const std::string mode((std::istreambuf_iterator<char>(f)), {});
    if (!mode.empty() && mode.find("[never]") == std::string::npos)
        EXPECT_GT(anon_huge_kb(v.data()), 0) << "written after MADV_HUGEPAGE: huge pages expected";
}

}  // namespace
}  // namespace kiln::core
