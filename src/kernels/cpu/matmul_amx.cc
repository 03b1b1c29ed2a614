// The amx level (Isa::kAmx: AVX-512 VNNI / BF16 plus AMX-TILE / INT8 / BF16, Intel Sapphire Rapids
// and later; built with the avx512-vnni flags, see src/kernels/CMakeLists.txt, the tile instructions
// in inline asm): I8 and BF16 packed weights multiply AMX tiles (simd_amx_kernels.h) over
// avx512-vnni's layouts; every other kernel is avx512-vnni's. Selected only when
// isa_supported(Isa::kAmx) (the OS has granted the tile state, core/cpu_info.h).
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/numeric.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/simd_amx_kernels.h"

namespace kiln::kernels::cpu {

namespace {

// I8 and BF16 products of fixed data through tiles T against the avx512-vnni kernels: I8 equal bit
// for bit, BF16 within 1e-5 of sum |w x|. 40 rows (a partial group), 40 tokens (two blocks and a
// tail), k = 256.
template <class Tiles>
bool amx_agrees_with_vnni() {
    constexpr int64_t rows = 40, n = 40, k = 256;
    std::vector<uint8_t> w8(size_t(rows * k)), wb(size_t(rows * k) * 2);
    std::vector<float> x(size_t(n * k));
    for (int64_t i = 0; i < rows * k; ++i) {
        w8[size_t(i)] = uint8_t(int8_t((i * 37 + 11) % 255 - 127));
        const uint16_t h = core::f32_to_bf16(float((i * 53 + 7) % 201 - 100) / 64.0f);
        std::memcpy(&wb[size_t(2 * i)], &h, 2);
    }
    for (int64_t i = 0; i < n * k; ++i) x[size_t(i)] = float((i * 29 + 3) % 97 - 48) / 16.0f;
    bool ok = true;
    for (const bool bf16 : {false, true}) {
        const PackedMatmulKernel& amx = bf16 ? kAmxBf16Packed<Tiles> : kAmxI8Packed<Tiles>;
        const PackedMatmulKernel& vnni = bf16 ? kBF16Packed : kVnniI8Packed;
        const MatmulKernel& quant = bf16 ? kBf16Dot : kI8Dot;
        const std::vector<uint8_t>& w = bf16 ? wb : w8;
        const size_t wrb = w.size() / size_t(rows), arb = quant.act_row_bytes(k);
        std::vector<uint8_t> packed(amx.packed_bytes(rows, k)), act(arb * size_t(n));
        amx.pack(w.data(), wrb, rows, k, packed.data());
        for (int64_t t = 0; t < n; ++t) quant.quantize_row(&x[size_t(t * k)], &act[size_t(t) * arb], k);
        std::vector<float> got(size_t(n * rows)), want(size_t(n * rows));
        amx.gemm(packed.data(), act.data(), arb, n, k, got.data(), rows, 0, rows);
        vnni.gemm(packed.data(), act.data(), arb, n, k, want.data(), rows, 0, rows);
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
                const size_t i = size_t(t * rows + r);
                if (!bf16) {
                    ok = ok && std::memcmp(&got[i], &want[i], 4) == 0;
                    continue;
                }
                double mag = 0;
                for (int64_t j = 0; j < k; ++j) {
                    uint16_t h;
                    std::memcpy(&h, &wb[size_t(2 * (r * k + j))], 2);
                    mag += std::fabs(double(core::bf16_to_f32(h)) * x[size_t(t * k + j)]);
                }
                ok = ok && std::fabs(double(got[i]) - want[i]) <= 1e-5 * mag + 1e-30;
            }
        }
    }
    return ok;
}

}  // namespace

bool amx_self_check() {
    static const bool ok = [] {
        const bool agree = amx_agrees_with_vnni<AmxHardware>();
        if (!agree) {
            std::fprintf(stderr,
                         "kiln: the AMX tile kernels disagree with the avx512-vnni ones on this CPU; using "
                         "avx512-vnni (please report it)\n");
        }
        return agree;
    }();
    return ok;
}

bool amx_emulation_self_check() {
    return amx_agrees_with_vnni<AmxEmulated>();
}

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
