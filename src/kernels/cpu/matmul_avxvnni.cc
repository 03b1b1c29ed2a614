// AVX-VNNI matmul kernels: the AVX2 kernel bodies built with -mavx2 -mfma -mf16c -mavxvnni (see
// src/kernels/CMakeLists.txt), where every u8 x s8 block dot is one VEX-encoded 256-bit vpdpbusd
// instead of vpmaddubsw + vpmaddwd (+ vpaddd) (simd_avx2.h KILN_VNNI256). For CPUs with AVX-VNNI
// and no AVX-512 (Intel Alder Lake / Raptor Lake, the E-core Xeons); CPUs with both take the
// avx512-vnni level. The integers are the same as AVX2's (no int16 saturation occurs in either), so
// the results are bit-identical to the avx2 level's. Q4_0 / Q4_1 and Q8_0 are packed in layouts of
// their own (simd_avxvnni_packed.h; the same bits), and Q4_K / Q5_K / Q6_K (within the bound of the
// ref kernel; simd_avxvnni_q6k.h for Q6_K). Selected only when isa_supported(Isa::kAvxVnni).
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_avx2_level.h"
#include "kernels/cpu/simd_avxvnni_packed.h"
#include "kernels/cpu/simd_avxvnni_q6k.h"

#if !defined(__AVXVNNI__)
#error "matmul_avxvnni.cc must be built with -mavxvnni"
#endif

namespace kiln::kernels::cpu {

const MatmulKernel* avxvnni_matmul_kernel(core::DType weight_type) {
    return avx2_level_matmul_kernel(weight_type);
}

// Q4_0 / Q4_1 in the 16-row row-pair layout, Q8_0, Q4_K, Q5_K and Q6_K in 8-row lanes = rows groups
// (simd_avxvnni_packed.h, simd_avxvnni_q6k.h); the other formats as AVX2 packs them.
const PackedMatmulKernel* avxvnni_packed_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kQ8_0) return &kAvxVnniQ8Packed;
    if (weight_type == core::DType::kQ4_K) return &kAvxVnniQ4KPacked;
    if (weight_type == core::DType::kQ5_K) return &kAvxVnniQ5KPacked;
    if (weight_type == core::DType::kQ6_K) return &kAvxVnniQ6KPacked;  // simd_avxvnni_q6k.h
    if (weight_type == core::DType::kQ4_0) return &kAvxVnniQ4Packed<FmtQ4_0>;
    if (weight_type == core::DType::kQ4_1) return &kAvxVnniQ4Packed<FmtQ4_1>;
    return avx2_level_packed_kernel(weight_type);
}

}  // namespace kiln::kernels::cpu
