// Internal: the lookup functions each ISA translation unit exports (matmul.cc dispatches to
// them). Each returns nullptr for weight types that ISA does not implement.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace kiln::kernels::cpu {

// matmul_avx2.cc, matmul_avxvnni.cc, matmul_avx512.cc, matmul_avx512vnni.cc: the same kernel bodies
// built for different instruction sets; matmul_amx.cc: avx512-vnni's, with AMX tiles for I8 and BF16.
const MatmulKernel* avx2_matmul_kernel(core::DType weight_type);
const MatmulKernel* avxvnni_matmul_kernel(core::DType weight_type);
const MatmulKernel* avx512_matmul_kernel(core::DType weight_type);
const MatmulKernel* avx512vnni_matmul_kernel(core::DType weight_type);
const PackedMatmulKernel* avx2_packed_kernel(core::DType weight_type);
const PackedMatmulKernel* avxvnni_packed_kernel(core::DType weight_type);
const PackedMatmulKernel* avx512_packed_kernel(core::DType weight_type);
const PackedMatmulKernel* avx512vnni_packed_kernel(core::DType weight_type);
const PackedMatmulKernel* amx_packed_kernel(core::DType weight_type);

}  // namespace kiln::kernels::cpu
