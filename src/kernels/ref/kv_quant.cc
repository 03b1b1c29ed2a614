// KV cache row formats (see kv_quant.h).
#include "kernels/ref/kv_quant.h"

#include <cmath>
#include <cstring>

#include "core/numeric.h"

namespace kiln::kernels::ref {

std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
    if (name == "f32" || name == "float32") return KvDtype::kF32;
    if (name == "f16" || name == "float16") return KvDtype::kF16;
    if (name == "int8") return KvDtype::kI8;
    if (name == "fp8" || name == "fp8_e4m3") return KvDtype::kFp8;
    return std::nullopt;
}

const char* kv_dtype_name(KvDtype t) {
    switch (t) {
        case KvDtype::kF32:
            return "f32";
        case KvDtype::kF16:
            return "f16";
        case KvDtype::kI8:
            return "int8";
        case KvDtype::kFp8:
            return "fp8";
    }
    return "?";
}

void kv_store_row(KvDtype t, const float* x, int64_t num_kv_heads, int64_t head_dim, void* row) {
    const int64_t n = num_kv_heads * head_dim;
    if (t == KvDtype::kF32) {
        std::memcpy(row, x, size_t(n) * 4);
        return;
    }
    if (t == KvDtype::kF16) {
        auto* h = static_cast<uint16_t*>(row);
        for (int64_t i = 0; i < n; ++i) h[i] = core::f32_to_fp16(x[i]);
        return;
    }
    auto* codes = static_cast<uint8_t*>(row);
    for (int64_t h = 0; h < num_kv_heads; ++h) {
        const float* xh = x + h * head_dim;
        float amax = 0.0f;  // NaN elements are skipped, as fmax does
        for (int64_t d = 0; d < head_dim; ++d) {
            const float a = std::fabs(xh[d]);
            amax = a > amax ? a : amax;
        }
        float scale = 0.0f;
        uint8_t* c = codes + h * head_dim;
        if (amax > 0.0f) {
            scale = amax / (t == KvDtype::kI8 ? kKvI8Max : kKvFp8Max);
            for (int64_t d = 0; d < head_dim; ++d) {
                float q = xh[d] / scale;
                if (t == KvDtype::kI8) {
                    // Clamped as fminf(fmaxf(q, -127), 127) (NaN -> -127), then rounded half to even:
                    // adding and subtracting 1.5 * 2^23 rounds |q| <= 127 exactly like nearbyint (IEEE
                    // arithmetic: the build has no -ffast-math, which could fold it away).
                    q = q > -kKvI8Max ? q : -kKvI8Max;
                    q = q < kKvI8Max ? q : kKvI8Max;
                    c[d] = uint8_t(int8_t((q + 12582912.0f) - 12582912.0f));
                } else {
                    c[d] = core::f32_to_fp8_e4m3(q);
                }
            }
        } else {
            std::memset(c, 0, size_t(head_dim));
        }
        std::memcpy(codes + n + 4 * h, &scale, 4);
    }
}

float kv_load(KvDtype t, const void* row, int64_t num_kv_heads, int64_t head_dim, int64_t h, int64_t d) {
    const int64_t i = h * head_dim + d;
    if (t == KvDtype::kF32) return static_cast<const float*>(row)[i];
    if (t == KvDtype::kF16) return core::fp16_to_f32(static_cast<const uint16_t*>(row)[i]);
    const auto* codes = static_cast<const uint8_t*>(row);
    float scale;
    std::memcpy(&scale, codes + num_kv_heads * head_dim + 4 * h, 4);
    const float v = t == KvDtype::kI8 ? float(int8_t(codes[i])) : core::fp8_e4m3_to_f32(codes[i]);
    return v * scale;
}

}  // namespace kiln::kernels::ref
