// Run-time choice of a CPU kernel by ISA (declared in kernels/cpu/matmul.h and activation.h): the
// one place above both kernels/ref, whose scalar kernels serve Isa::kRef, and kernels/cpu, whose
// SIMD kernels serve the rest, so neither of those includes the other. Generic code, compiled
// without ISA flags.
#include "kernels/cpu/activation.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/softmax.h"
#include "kernels/ref/quant_matmul.h"
#include "kernels/ref/sample.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cpu {

const MatmulKernel* find_matmul_kernel(core::DType weight_type, Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return ref::ref_matmul_kernel(weight_type);
        case Isa::kAvx2:
            return avx2_matmul_kernel(weight_type);
        case Isa::kAvxVnni:
            return avxvnni_matmul_kernel(weight_type);
        case Isa::kAvx512:
            return avx512_matmul_kernel(weight_type);
        case Isa::kAvx512Vnni:
        case Isa::kAmx:  // the row kernels of avx512-vnni; AMX tiles serve only packed weights
            return avx512vnni_matmul_kernel(weight_type);
    }
    return nullptr;
}

const MatmulKernel* best_matmul_kernel(core::DType weight_type) {
    const Isa order[] = {Isa::kAmx, Isa::kAvx512Vnni, Isa::kAvx512, Isa::kAvxVnni, Isa::kAvx2, Isa::kRef};
    for (Isa isa : order) {
        if (!isa_supported(isa)) continue;
        if (const MatmulKernel* k = find_matmul_kernel(weight_type, isa)) return k;
    }
    return nullptr;
}

SiluMulFn find_silu_mul_kernel(Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return &ref::silu_mul;
        case Isa::kAvx2:
        case Isa::kAvxVnni:
        case Isa::kAvx512:  // elementwise and memory-light: the 8-wide body serves every SIMD level
        case Isa::kAvx512Vnni:
        case Isa::kAmx:
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

SoftmaxKernels find_softmax_kernels(Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return {&ref::scale_max, &ref::exp_shift};
        case Isa::kAvx2:
        case Isa::kAvxVnni:
        case Isa::kAvx512:  // elementwise and memory-light: the 8-wide body serves every SIMD level
        case Isa::kAvx512Vnni:
        case Isa::kAmx:
            return avx2_softmax_kernels();
    }
    return {};
}

SoftmaxKernels best_softmax_kernels() {
    static const SoftmaxKernels best = [] {
        const SoftmaxKernels k = find_softmax_kernels(best_isa());
        return k.exp_shift ? k : find_softmax_kernels(Isa::kRef);
    }();
    return best;
}

}  // namespace kiln::kernels::cpu
