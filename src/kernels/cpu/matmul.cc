// Run-time ISA selection for the matmul kernels (see matmul.h). Generic code: compiled without ISA
// flags; it only calls into the per-ISA TUs through their one exported lookup function each.
#include "kernels/cpu/matmul.h"

#include <cstdlib>
#include <string_view>

#include "core/cpu_info.h"
#include "kernels/cpu/matmul_isa.h"

namespace kiln::kernels::cpu {

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return "ref";
        case Isa::kAvx2:
            return "avx2";
        case Isa::kAvxVnni:
            return "avx-vnni";
        case Isa::kAvx512:
            return "avx512";
        case Isa::kAvx512Vnni:
            return "avx512-vnni";
        case Isa::kAmx:
            return "amx";
    }
    return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
    for (Isa isa : kAllIsas) {
        if (name == isa_name(isa)) return isa;
    }
    return std::nullopt;
}

namespace {

// KILN_NO_AMX set to anything but "" or "0": the amx level is never used (an escape hatch for the
// tile code, which was written without AMX hardware).
bool amx_disabled() {
    static const bool off = [] {
        const char* v = std::getenv("KILN_NO_AMX");
        return v && *v && std::string_view(v) != "0";
    }();
    return off;
}

}  // namespace

bool isa_supported(Isa isa) {
    const core::CpuFeatures& f = core::cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    switch (isa) {
        case Isa::kRef:
            return true;
        case Isa::kAvx2:
            return avx2;
        case Isa::kAvxVnni:
            return avx2 && f.avxvnni;
        case Isa::kAvx512:
            return avx512;
        case Isa::kAvx512Vnni:
            return avx512 && f.avx512vnni && f.avx512bf16;
        case Isa::kAmx:  // and its kernels agree with avx512-vnni's here (matmul_isa.h); KILN_NO_AMX=1: off
            return avx512 && f.avx512vnni && f.avx512bf16 && f.amx_tile && f.amx_int8 && f.amx_bf16 &&
                   !amx_disabled() && amx_self_check();
    }
    return false;
}

namespace {

// An ISA counts as built when it has a kernel for the most common weight type.
bool isa_built(Isa isa) {
    return find_matmul_kernel(core::DType::kQ8_0, isa) != nullptr;
}

}  // namespace

Isa best_isa() {
    static const Isa best = [] {
        for (Isa isa : {Isa::kAmx, Isa::kAvx512Vnni, Isa::kAvx512, Isa::kAvxVnni, Isa::kAvx2}) {
            if (isa_supported(isa) && isa_built(isa)) return isa;
        }
        return Isa::kRef;
    }();
    return best;
}

const PackedMatmulKernel* find_packed_matmul_kernel(core::DType weight_type, Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return nullptr;
        case Isa::kAvx2:
            return avx2_packed_kernel(weight_type);
        case Isa::kAvxVnni:
            return avxvnni_packed_kernel(weight_type);
        case Isa::kAvx512:
            return avx512_packed_kernel(weight_type);
        case Isa::kAvx512Vnni:
            return avx512vnni_packed_kernel(weight_type);
        case Isa::kAmx:
            return amx_packed_kernel(weight_type);
    }
    return nullptr;
}

}  // namespace kiln::kernels::cpu
