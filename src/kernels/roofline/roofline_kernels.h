// Inner loops of the roofline probes (roofline.h), one translation unit per instruction set:
// roofline_avx2.cc (-mavx2 -mfma), roofline_avxvnni.cc (+ AVX-VNNI), roofline_avx512vnni.cc (AVX-512 +
// VNNI + BF16) and the portable loops in roofline.cc. Only roofline.cc includes this, and it calls
// an ISA's functions only after checking the CPU has that ISA.
// Each compute loop runs `iters` iterations of a fixed amount of work (the k*PerIter constants) and
// returns a value derived from every accumulator so that the compiler cannot drop the work.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::kernels::roofline::detail {

// Reads [p, p + bytes) as `streams` equal contiguous sub-ranges walked in lockstep. bytes is a
// multiple of streams * 64 and p is 64-byte aligned.
uint64_t read_avx2(const uint8_t* p, size_t bytes, int streams);
uint64_t read_scalar(const uint8_t* p, size_t bytes, int streams);

inline constexpr int kFmaChains = 12;
inline constexpr double kFmaAvx2FlopsPerIter = kFmaChains * 8 * 2;  // 12 ymm FMAs
inline constexpr double kFmaScalarFlopsPerIter = kFmaChains * 2;    // 12 scalar multiply-adds
float fma_avx2(int64_t iters);
float fma_scalar(int64_t iters);

inline constexpr int kInt8Chains = 8;
inline constexpr double kInt8Avx2OpsPerIter = kInt8Chains * 32 * 2;   // 8 x (vpmaddubsw + vpmaddwd), 32 MACs each
inline constexpr double kInt8ScalarOpsPerIter = kInt8Chains * 4 * 2;  // 8 chains x 4 MACs
int32_t int8_avx2(int64_t iters);
int32_t int8_scalar(int64_t iters);

inline constexpr int kVnni256Chains = 12;
inline constexpr double kVnni256OpsPerIter = kVnni256Chains * 32 * 2;  // 12 ymm vpdpbusd (VEX), 32 MACs each
int32_t vnni_avx256(int64_t iters);  // x86-64 only, as the AVX-512 loops below

inline constexpr int kAvx512Chains = 12;
inline constexpr double kVnniOpsPerIter = kAvx512Chains * 64 * 2;    // 12 zmm vpdpbusd, 64 MACs each
inline constexpr double kBf16FlopsPerIter = kAvx512Chains * 32 * 2;  // 12 zmm vdpbf16ps, 32 MACs each
// Defined only where the compiler targets x86-64 (KILN_ROOFLINE_X86).
int32_t vnni_avx512(int64_t iters);
float bf16_avx512(int64_t iters);

// The dot-product loops reload their operands from an L1-resident local block every iteration, as a
// real kernel loads new data. The block's address is handed to an empty asm statement with a memory
// clobber once per iteration, so the compiler can neither know its contents nor hoist the loads
// and products out of the loop (with a const table it folds the whole loop away).
inline constexpr int kOperandBytes = 16 * 64;
#define KILN_ROOFLINE_OPAQUE(ptr) asm volatile("" : : "r"(ptr) : "memory")

}  // namespace kiln::kernels::roofline::detail
