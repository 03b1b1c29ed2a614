// CPUID/XGETBV feature detection and sysfs core counting (see cpu_info.h).
#include "core/cpu_info.h"

#include <sched.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln::core {
namespace {

#if defined(__x86_64__) || defined(__i386__)
bool bit(unsigned v, int i) { return (v >> i) & 1u; }

// XCR0 through inline asm: _xgetbv needs -mxsave, and this TU stays portable.
unsigned long long read_xcr0() {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// Linux (5.16 and later) hands out the AMX tile data state per process on request; without it the
// first tile instruction faults. True when granted (or already granted).
bool request_amx_permission() {
#if defined(__linux__)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // uapi/asm/prctl.h, fpu/types.h
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
}

CpuFeatures detect() {
    CpuFeatures f;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = bit(c, 27), avx = bit(c, 28), fma = bit(c, 12), f16c = bit(c, 29);
    if (!osxsave || !avx) return f;
    const unsigned long long xcr0 = read_xcr0();
    const bool ymm_ok = (xcr0 & 0x6) == 0x6;     // SSE (bit 1) + AVX upper halves (bit 2)
    const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;   // + opmask (5), ZMM_Hi256 (6), Hi16_ZMM (7)
    if (!ymm_ok) return f;
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf < 7) return f;
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    f.fma = fma;
    f.f16c = f16c;
    f.avx2 = bit(b7, 5);
    unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
    if (a7 >= 1) __cpuid_count(7, 1, a71, b71, c71, d71);  // leaf 7 subleaf 1 exists
    f.avxvnni = f.avx2 && bit(a71, 4);  // VEX-encoded 256-bit VNNI: needs only the YMM state
    if (f.avx2 && zmm_ok && bit(b7, 16)) {
        f.avx512f = true;
        f.avx512dq = bit(b7, 17);
        f.avx512bw = bit(b7, 30);
        f.avx512vl = bit(b7, 31);
        f.avx512vnni = bit(c7, 11);
        f.avx512bf16 = bit(a71, 5);
        // AMX: CPUID.7.0:EDX bits 22 (BF16), 24 (TILE), 25 (INT8); XCR0 bits 17 (XTILECFG) and 18
        // (XTILEDATA) enabled by the OS; then the process's permission.
        const bool tiles_ok = ((xcr0 >> 17) & 3) == 3;
        if (bit(d7, 24) && tiles_ok && request_amx_permission()) {
            f.amx_tile = true;
            f.amx_int8 = bit(d7, 25);
            f.amx_bf16 = bit(d7, 22);
        }
    }
    return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

bool read_int(const std::string& path, int* out) {
    std::ifstream in(path);
    return static_cast<bool>(in >> *out);
}

int count_physical_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
    std::set<std::pair<int, int>> cores;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        int package = 0, core = 0;
        if (!read_int(dir + "physical_package_id", &package) || !read_int(dir + "core_id", &core)) {
            package = -1;  // topology unknown: count the logical CPU on its own
            core = cpu;
        }
        cores.emplace(package, core);
    }
    return static_cast<int>(cores.size());
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

int physical_core_count() {
    static const int count = [] {
        int n = count_physical_cores();
        if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
        return n > 0 ? n : 1;
    }();
    return count;
}

}  // namespace kiln::core
