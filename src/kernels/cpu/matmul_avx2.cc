// AVX2 + FMA + F16C matmul kernels (built with -mavx2 -mfma -mf16c, see src/kernels/CMakeLists.txt).
// The kernel bodies live in simd_legacy_kernels.h / simd_kquant_kernels.h / simd_fp4_kernels.h /
// simd_iq4_kernels.h / simd_tq_kernels.h / simd_fp8_kernels.h with internal linkage; this TU instantiates them for AVX2 and exports only
// avx2_matmul_kernel.
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_fp4_kernels.h"
#include "kernels/cpu/simd_fp8_kernels.h"
#include "kernels/cpu/simd_i8_kernels.h"
#include "kernels/cpu/simd_iq4_kernels.h"
#include "kernels/cpu/simd_kquant_kernels.h"
#include "kernels/cpu/simd_legacy_kernels.h"
#include "kernels/cpu/simd_tq_kernels.h"

namespace kiln::kernels::cpu {

const MatmulKernel* avx2_matmul_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kI8) return &kI8Dot;  // simd_i8_kernels.h
    if (const MatmulKernel* k = simd_legacy_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_fp4_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_iq4_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_tq_kernel(weight_type)) return k;
    if (const MatmulKernel* k = simd_fp8_kernel(weight_type)) return k;
    return simd_kquant_kernel(weight_type);
}

const PackedMatmulKernel* avx2_packed_kernel(core::DType weight_type) {
    return simd_packed_kernel(weight_type);
}

}  // namespace kiln::kernels::cpu
