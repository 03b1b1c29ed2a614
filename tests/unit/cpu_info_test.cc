// CPU feature detection against independent sources on the host it runs on: GCC's
// __builtin_cpu_supports (libgcc's own CPUID + XGETBV reading) for every feature it knows, the
// kernel's /proc/cpuinfo flags for F16C (which GCC 12's builtin does not name); plus the
// implications between features and bounds of the physical core count.
#include "core/cpu_info.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace kiln::core {
namespace {

TEST(CpuInfo, FeatureImplications) {
    const CpuFeatures& f = cpu_features();
    if (f.avx512f) {
        EXPECT_TRUE(f.avx2);
    }
    if (f.avxvnni) {
        EXPECT_TRUE(f.avx2);
    }
    if (f.avx512bw || f.avx512vl || f.avx512dq || f.avx512vnni || f.avx512bf16) {
        EXPECT_TRUE(f.avx512f);
    }
#if defined(__AVX2__)
    EXPECT_TRUE(f.avx2);  // this binary already runs AVX2 code
#endif
    std::printf("avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d bf16=%d avxvnni=%d\n", f.avx2, f.fma,
                f.f16c, f.avx512f, f.avx512bw, f.avx512vl, f.avx512dq, f.avx512vnni, f.avx512bf16, f.avxvnni);
}

// The flags of the first processor in /proc/cpuinfo; empty when there is no such file.
std::string proc_cpuinfo_flags() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1) + " ";
    return "";
}

TEST(CpuInfo, AgreesWithTheCompilersDetection) {
    const CpuFeatures& f = cpu_features();
    __builtin_cpu_init();
    EXPECT_EQ(f.avx2, bool(__builtin_cpu_supports("avx2")));
    EXPECT_EQ(f.fma, bool(__builtin_cpu_supports("fma")));
    EXPECT_EQ(f.avx512f, bool(__builtin_cpu_supports("avx512f")));
    EXPECT_EQ(f.avx512bw, bool(__builtin_cpu_supports("avx512bw")));
    EXPECT_EQ(f.avx512vl, bool(__builtin_cpu_supports("avx512vl")));
    EXPECT_EQ(f.avx512dq, bool(__builtin_cpu_supports("avx512dq")));
    EXPECT_EQ(f.avx512vnni, bool(__builtin_cpu_supports("avx512vnni")));
    EXPECT_EQ(f.avx512bf16, bool(__builtin_cpu_supports("avx512bf16")));
#if !defined(__clang__)  // clang 14's builtin does not know "avxvnni"
    EXPECT_EQ(f.avxvnni, bool(__builtin_cpu_supports("avxvnni")));
#endif
    const std::string flags = proc_cpuinfo_flags();
    if (!flags.empty()) {
        EXPECT_EQ(f.f16c, flags.find(" f16c ") != std::string::npos) << flags;
    }
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
