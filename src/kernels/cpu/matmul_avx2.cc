// AVX2 + FMA + F16C matmul kernels (built with -mavx2 -mfma -mf16c, see src/kernels/CMakeLists.txt).
// The kernel bodies live in simd_legacy_kernels.h / simd_kquant_kernels.h / simd_fp4_kernels.h /
// simd_iq4_kernels.h / simd_tq_kernels.h / simd_fp8_kernels.h with internal linkage; this TU
// instantiates them for AVX2 (tables in simd_avx2_level.h) and exports only its two lookups.
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_avx2_level.h"

namespace kiln::kernels::cpu {

const MatmulKernel* avx2_matmul_kernel(core::DType weight_type) {
    return avx2_level_matmul_kernel(weight_type);
}

const PackedMatmulKernel* avx2_packed_kernel(core::DType weight_type) {
    return avx2_level_packed_kernel(weight_type);
}

}  // namespace kiln::kernels::cpu
