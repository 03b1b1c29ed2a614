// Run-time choice of the SwiGLU kernel (activation.h). Generic code, compiled without ISA flags.
#include "kernels/cpu/activation.h"

#include "kernels/ref/transformer.h"

namespace kiln::kernels::cpu {

SiluMulFn find_silu_mul_kernel(Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return &ref::silu_mul;
        case Isa::kAvx2:
        case Isa::kAvx512:  // elementwise and memory-light: the 8-wide body serves every SIMD level
        case Isa::kAvx512Vnni:
            return avx2_silu_mul_kernel();
    }
    return nullptr;
}

SiluMulFn best_silu_mul_kernel() {
    static const SiluMulFn best = [] {
        const Isa isa = best_isa();
        SiluMulFn fn = find_silu_mul_kernel(isa);
        return fn ? fn : find_silu_mul_kernel(Isa::kRef);
    }();
    return best;
}

}  // namespace kiln::kernels::cpu
