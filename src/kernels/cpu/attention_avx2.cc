// AVX2 + FMA build of the SIMD attention kernel (simd_attention.h; flags: src/kernels/CMakeLists.txt).
// Exports only avx2_attention_kernel (attention.cc dispatches to it).
#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd_attention.h"

namespace kiln::kernels::cpu {

AttentionFn avx2_attention_kernel() {
    return &simd_attention_task;
}

}  // namespace kiln::kernels::cpu
