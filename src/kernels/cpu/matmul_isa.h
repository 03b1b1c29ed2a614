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
// matmul_amx.cc: the AMX kernels, never run on AMX hardware before they shipped, check themselves
// once against the avx512-vnni kernels on fixed data (I8 bit for bit, BF16 within the 1e-5 bound)
// before isa_supported(kAmx) says yes; on a disagreement it says no, with a message on stderr. Call
// only where the CPU and OS have AMX (amx_emulation_self_check, matmul.h, runs it emulated).
bool amx_self_check();

}  // namespace kiln::kernels::cpu
