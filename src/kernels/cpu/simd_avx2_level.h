// The tables of the 256-bit kernel bodies every SIMD level builds: matmul_avx2.cc (AVX2 + FMA +
// F16C) and matmul_avxvnni.cc (the same plus AVX-VNNI) export them as they are; matmul_avx512.cc and
// matmul_avx512vnni.cc put their own kernels (float panels, BF16 dots, the 512-bit packed layouts)
// in front. Where the TU has a 256-bit vpdpbusd (KILN_VNNI256, simd_avx2.h) the u8 x s8 block dots
// use it. Internal linkage, as the kernel headers.
#pragma once

#include "kernels/cpu/simd_fp4_kernels.h"
#include "kernels/cpu/simd_fp8_kernels.h"
#include "kernels/cpu/simd_i8_kernels.h"
#include "kernels/cpu/simd_iq4_kernels.h"
#include "kernels/cpu/simd_kquant_kernels.h"
#include "kernels/cpu/simd_legacy_kernels.h"
#include "kernels/cpu/simd_tq_kernels.h"

namespace kiln::kernels::cpu {
namespace {

inline const MatmulKernel* avx2_level_matmul_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kI8) return &kI8Dot;  // simd_i8_kernels.h
    if (const MatmulKernel* k = simd_legacy_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_fp4_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_iq4_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_tq_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_fp8_kernel(weight_type)) return k;
    return simd_kquant_kernel(weight_type);
}

inline const PackedMatmulKernel* avx2_level_packed_kernel(core::DType weight_type) {
    return simd_packed_kernel(weight_type);  // the 8-row legacy layouts (simd_legacy_kernels.h)
}

}  // namespace
}  // namespace kiln::kernels::cpu
