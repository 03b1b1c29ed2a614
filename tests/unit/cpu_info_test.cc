// Sanity checks of CPU feature detection and the physical core count (values depend on the host,
// so only invariants are checked: implications between features and count bounds).
#include "core/cpu_info.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

namespace kiln::core {
namespace {

TEST(CpuInfo, FeatureImplications) {
    const CpuFeatures& f = cpu_features();
    if (f.avx512f) {
        EXPECT_TRUE(f.avx2);
    }
    if (f.avx512bw || f.avx512vl || f.avx512dq || f.avx512vnni || f.avx512bf16) {
        EXPECT_TRUE(f.avx512f);
    }
    EXPECT_EQ(&f, &cpu_features());  // cached
#if defined(__AVX2__)
    EXPECT_TRUE(f.avx2);  // this binary already runs AVX2 code
#endif
    std::printf("avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d bf16=%d\n", f.avx2, f.fma, f.f16c,
                f.avx512f, f.avx512bw, f.avx512vl, f.avx512dq, f.avx512vnni, f.avx512bf16);
}

TEST(CpuInfo, PhysicalCoreCountIsSane) {
    const int n = physical_core_count();
    EXPECT_GE(n, 1);
    const unsigned hw = std::thread::hardware_concurrency();
    if (hw > 0) {
        EXPECT_LE(n, static_cast<int>(hw));
    }
    EXPECT_EQ(n, physical_core_count());
}

}  // namespace
}  // namespace kiln::core
