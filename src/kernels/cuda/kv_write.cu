// kv_write.h: grid (tokens, head groups of 8), 8 warps per block, one warp per head (q heads, then
// k heads, then v heads of the token); lane l holds pairs l, l + 32, ... of its head. int8 / fp8
// rows: the warp reduces its head's amax, then each lane stores its pairs' codes and lane 0 the scale.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kv_write.h"

namespace kiln::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPairsPerLane = 4;  // head_dim <= 256

__device__ __forceinline__ void store(float* p, float v) {
    *p = v;
}
__device__ __forceinline__ void store(__half* p, float v) {
    *p = __float2half_rn(v);
}

// One head of a quantized row (KvDtype kI8 / kFp8), its pairs in v (lane l: pairs l, l + 32, ...), as
// kernels/ref kv_store_row stores it: scale = amax / 127 or / 448, code = round(x / scale) or
// e4m3(x / scale) (IEEE division; round to nearest even; fp8 saturating to 448).
template <bool kInt8>
__device__ void store_quantized(const float2 (&v)[kMaxPairsPerLane], int lane, int64_t half, uint8_t* codes,
                                float* scale_out) {
    float amax = 0.0f;
    for (int r = 0; r < kMaxPairsPerLane; ++r) {
        if (lane + 32 * r >= half) break;
        amax = fmaxf(amax, fmaxf(fabsf(v[r].x), fabsf(v[r].y)));
    }
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.0f ? __fdiv_rn(amax, kInt8 ? 127.0f : 448.0f) : 0.0f;
    auto code = [&](float x) -> uint8_t {
        if (scale == 0.0f) return 0;
        const float q = __fdiv_rn(x, scale);
        if constexpr (kInt8) return uint8_t(int8_t(__float2int_rn(fminf(fmaxf(q, -127.0f), 127.0f))));
        return uint8_t(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
    };
    for (int r = 0; r < kMaxPairsPerLane; ++r) {
        const int64_t p = lane + 32 * r;
        if (p >= half) break;
        codes[2 * p] = code(v[r].x);
        codes[2 * p + 1] = code(v[r].y);
    }
    if (lane == 0) *scale_out = scale;
}

template <class KT>
__global__ void __launch_bounds__(kWarps * 32) qkv_rope_kv_kernel(QkvRopeKvWrite a) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t t = blockIdx.x, head = int64_t(blockIdx.y) * kWarps + warp;
    const int64_t NH = a.num_heads, NKV = a.num_kv_heads, D = a.head_dim, half = D / 2;
    if (head >= NH + 2 * NKV) return;  // a whole warp: no block-wide synchronization below
    const bool is_q = head < NH, is_k = !is_q && head < NH + NKV;
    const float* src = a.qkv + t * (NH + 2 * NKV) * D + head * D;  // [D]
    const float* bias = a.bias ? a.bias + head * D : nullptr;
    float2 v[kMaxPairsPerLane];
    float ss = 0.0f;
    for (int r = 0; r < kMaxPairsPerLane; ++r) {
        const int64_t p = lane + 32 * r;
        if (p >= half) break;
        float x0 = src[2 * p], x1 = src[2 * p + 1];
        if (bias) {
            x0 += bias[2 * p];
            x1 += bias[2 * p + 1];
        }
        v[r] = make_float2(x0, x1);
        ss += x0 * x0 + x1 * x1;
    }
    const float* norm = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
    float scale = 1.0f;
    if (norm) {  // uniform over the warp
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        scale = 1.0f / sqrtf(ss / float(D) + a.eps);
    }
    const int32_t pos = a.positions[t];
    for (int r = 0; r < kMaxPairsPerLane; ++r) {
        const int64_t p = lane + 32 * r;
        if (p >= half) break;
        float x0 = v[r].x, x1 = v[r].y;
        if (norm) {
            x0 = x0 * scale * norm[2 * p];
            x1 = x1 * scale * norm[2 * p + 1];
        }
        if (is_q || is_k) {
            double s, c;
            sincos(double(pos) * a.inv_freq[p], &s, &c);
            const float fs = float(s), fc = float(c);
            const float y0 = __fsub_rn(__fmul_rn(x0, fc), __fmul_rn(x1, fs));  // no FMA: as the reference
            const float y1 = __fadd_rn(__fmul_rn(x0, fs), __fmul_rn(x1, fc));
            x0 = y0;
            x1 = y1;
        }
        if (is_q) {
            float* dst = a.q_out + (t * NH + head) * D;
            dst[2 * p] = x0;
            dst[2 * p + 1] = x1;
        } else if constexpr (sizeof(KT) > 1) {
            const int64_t kv_head = is_k ? head - NH : head - NH - NKV;
            KT* dst = static_cast<KT*>(is_k ? a.k_cache : a.v_cache) + (a.slots[t] * NKV + kv_head) * D;
            store(dst + 2 * p, x0);
            store(dst + 2 * p + 1, x1);
        }
        v[r] = make_float2(x0, x1);
    }
    if constexpr (sizeof(KT) == 1) {  // int8 / fp8 rows: [NKV * D codes | NKV f32 scales]
        if (is_q) return;
        const int64_t kv_head = is_k ? head - NH : head - NH - NKV;
        uint8_t* row = static_cast<uint8_t*>(is_k ? a.k_cache : a.v_cache) + a.slots[t] * (NKV * D + 4 * NKV);
        float* head_scale = reinterpret_cast<float*>(row + NKV * D) + kv_head;
        store_quantized<std::is_same_v<KT, int8_t>>(v, lane, half, row + kv_head * D, head_scale);
    }
}

}  // namespace

core::Status qkv_rope_kv_write(const QkvRopeKvWrite& a, cudaStream_t stream) {
    if (a.num_tokens < 0 || a.num_tokens > int64_t(0x7fffffff) || a.num_heads <= 0 || a.num_kv_heads <= 0 ||
        a.head_dim <= 0 || a.head_dim % 2 || a.head_dim > 2 * 32 * kMaxPairsPerLane || !(a.eps >= 0.0f))
        return core::error(core::StatusCode::kInvalidArgument)
               << "qkv_rope_kv_write: tokens " << a.num_tokens << ", heads " << a.num_heads << "/" << a.num_kv_heads
               << ", head_dim " << a.head_dim;
    if (a.num_tokens == 0) return core::Status::ok();
    if (!a.qkv || !a.positions || !a.slots || !a.inv_freq || !a.q_out || !a.k_cache || !a.v_cache)
        return core::error(core::StatusCode::kInvalidArgument) << "qkv_rope_kv_write: null pointer";
    const int64_t heads = a.num_heads + 2 * a.num_kv_heads;
    const dim3 grid(unsigned(a.num_tokens), unsigned((heads + kWarps - 1) / kWarps));
    switch (a.dtype) {
        case KvDtype::kF32:
            qkv_rope_kv_kernel<float><<<grid, kWarps * 32, 0, stream>>>(a);
            break;
        case KvDtype::kF16:
            qkv_rope_kv_kernel<__half><<<grid, kWarps * 32, 0, stream>>>(a);
            break;
        case KvDtype::kI8:
            qkv_rope_kv_kernel<int8_t><<<grid, kWarps * 32, 0, stream>>>(a);
            break;
        case KvDtype::kFp8:
            qkv_rope_kv_kernel<uint8_t><<<grid, kWarps * 32, 0, stream>>>(a);
            break;
    }
    return launch_status("qkv_rope_kv_kernel");
}

}  // namespace kiln::kernels::cuda
