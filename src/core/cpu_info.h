// CPU feature detection and core counting for run-time kernel dispatch (kernels/cpu picks an ISA
// from cpu_features(); ops size thread pools from physical_core_count()).
// Invariants: a feature reads true only when the CPU has it AND the OS saves the register state it
// needs (XGETBV/XCR0: YMM for AVX2/FMA/F16C, opmask+ZMM for AVX-512). Implications hold:
// avx512* => avx512f => avx2; avxvnni => avx2; amx_* => avx512f. Results are computed once and cached.
// AMX also needs the OS's leave: XCR0's XTILECFG and XTILEDATA bits, and on Linux the process's
// permission for the 8 KiB tile state (arch_prctl ARCH_REQ_XCOMP_PERM), which detection asks for.
// Spec: Intel SDM vol. 2A, CPUID leaves 1 and 7 (subleaves 0 and 1); XCR0 layout in SDM vol. 1 13.3.
#pragma once

namespace kiln::core {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512dq = false;
    bool avx512vnni = false;
    bool avx512bf16 = false;
    bool avxvnni = false;  // AVX-VNNI: vpdpbusd on 256-bit VEX registers (Intel Alder Lake / Sapphire Rapids and later)
    // AMX tiles (Intel Sapphire Rapids and later): TILE (the 8 tile registers, ldtilecfg), INT8
    // (tdpb{s,u}{s,u}d), BF16 (tdpbf16ps).
    bool amx_tile = false;
    bool amx_int8 = false;
    bool amx_bf16 = false;
};

// Features of the CPU this process runs on (detected on first call, thread-safe).
const CpuFeatures& cpu_features();

// Distinct physical cores (package id, core id) among the CPUs this process may run on
// (sched_getaffinity + sysfs topology). Falls back to hardware_concurrency; always >= 1.
int physical_core_count();

}  // namespace kiln::core
