// The amx level (Isa::kAmx: AVX-512 VNNI / BF16 plus AMX-TILE / INT8 / BF16, Intel Sapphire Rapids
// and later; built with the avx512-vnni flags, see src/kernels/CMakeLists.txt, the tile instructions
// in inline asm): I8 and BF16 packed weights multiply AMX tiles (simd_amx_kernels.h) over
// avx512-vnni's layouts; every other kernel is avx512-vnni's. Selected only when
// isa_supported(Isa::kAmx) (the OS has granted the tile state, core/cpu_info.h).
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_amx_kernels.h"

namespace kiln::kernels::cpu {

const PackedMatmulKernel* amx_packed_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kI8) return &kAmxI8Packed<AmxHardware>;
    if (weight_type == core::DType::kBF16) return &kAmxBf16Packed<AmxHardware>;
    return avx512vnni_packed_kernel(weight_type);
}

const PackedMatmulKernel* amx_emulated_packed_kernel(core::DType weight_type) {
    if (weight_type == core::DType::kI8) return &kAmxI8Packed<AmxEmulated>;
    if (weight_type == core::DType::kBF16) return &kAmxBf16Packed<AmxEmulated>;
    return nullptr;
}

}  // namespace kiln::kernels::cpu
