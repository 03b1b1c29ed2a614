// AVX-512 VNNI build of the matmul kernels (built with -mavx512f/bw/vl/dq/vnni/bf16 -mfma -mf16c, see
// src/kernels/CMakeLists.txt): the same kernel bodies as matmul_avx2.cc, where the u8 x s8 block
// dot is one 256-bit vpdpbusd instead of vpmaddubsw + vpmaddwd (simd_avx2.h). The integer results
// are identical (no int16 saturation occurs in either), so the tests hold it to the same bounds.
// Packed Q4_0 / Q4_1 weights use this ISA's own 32-row layout (simd_vnni_q4.h), Q8_0 / MXFP4 / NVFP4
// its 16-row one (simd_vnni_kernels.h), Q4_K, Q5_K and Q6_K their own (simd_vnni_kquant.h).
// Selected only when isa_supported(Isa::kAvx512Vnni); never run on AVX2-only machines.
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_avx2_level.h"
#include "kernels/cpu/simd_float_packed.h"
#include "kernels/cpu/simd_i8_kernels.h"
#include "kernels/cpu/simd_vnni_kernels.h"
#include "kernels/cpu/simd_vnni_kquant.h"
#include "kernels/cpu/simd_vnni_q4.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__)
#error "matmul_avx512vnni.cc must be built with -mavx512vnni -mavx512vl"
#endif

namespace kiln::kernels::cpu {

const MatmulKernel* avx512vnni_matmul_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kBF16) return &kBf16Dot;  // vdpbf16ps (simd_vnni_kernels.h)
    return avx2_level_matmul_kernel(weight_type);              // the rest as every level has them
}

const PackedMatmulKernel* avx512vnni_packed_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kI8) return &kVnniI8Packed;  // simd_i8_kernels.h
    if (weight_type == core::DType::kQ4_0) return &kVnniQ4Packed<FmtQ4_0>;  // simd_vnni_q4.h
    if (weight_type == core::DType::kQ4_1) return &kVnniQ4Packed<FmtQ4_1>;
    if (weight_type == core::DType::kQ4_K) return &kVnniQ4KPacked;  // simd_vnni_kquant.h
    if (weight_type == core::DType::kQ5_K) return &kVnniQ5KPacked;
    if (weight_type == core::DType::kQ6_K) return &kVnniQ6KPacked;
    if (const PackedMatmulKernel* k = float_packed_kernel(weight_type)) return k;  // simd_float_packed.h
    return vnni_packed_kernel(weight_type);
}

}  // namespace kiln::kernels::cpu
