// AVX-512 (F/BW/VL/DQ, no VNNI) build of the matmul kernels (flags: src/kernels/CMakeLists.txt): the
// same 256-bit kernel bodies as matmul_avx2.cc; the compiler may use EVEX encodings and the 32
// vector registers, which relieves register pressure in the (weight rows x activation rows) tiles.
// For Skylake-SP class CPUs; selected only when isa_supported(Isa::kAvx512).
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_avx2_level.h"
#include "kernels/cpu/simd_float_packed.h"

namespace kiln::kernels::cpu {

const MatmulKernel* avx512_matmul_kernel(core::DType weight_type) {
    return avx2_level_matmul_kernel(weight_type);
}

const PackedMatmulKernel* avx512_packed_kernel(core::DType weight_type) {
    if (const PackedMatmulKernel* k = float_packed_kernel(weight_type)) return k;  // simd_float_packed.h
    return avx2_level_packed_kernel(weight_type);
}

}  // namespace kiln::kernels::cpu
