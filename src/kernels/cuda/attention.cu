// attention.h: split-KV decode attention. Kernel 1: grid (splits, kv heads, sequences), 4 warps per
// block; each warp walks keys j = j0 + warp, j0 + warp + 4, ... of its split, computes the dot
// products of all G query heads of the KV head (lane l holds elements [l D/32, (l + 1) D/32) of q,
// K, V: one 8-byte load per K or V row of f16 at head_dim 128) and
// keeps an online softmax per head; the warps' states are combined in shared memory into the
// split's normalized output and log-sum-exp. Kernel 2: grid (sequences, heads), one thread per
// element, combines the splits by their log-sum-exp.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"

namespace kiln::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxGroup = 16;

// out[e] = p[e] for e < E, one load of E consecutive elements (p aligned to E elements).
template <int E>
__device__ __forceinline__ void load_run(const float* p, float (&out)[E]) {
    if constexpr (E == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else if constexpr (E == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x, out[1] = v.y;
    } else {
        for (int e = 0; e < E; ++e) out[e] = p[e];
    }
}
template <int E>
__device__ __forceinline__ void load_run(const __half* p, float (&out)[E]) {
    if constexpr (E == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
        out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
    } else if constexpr (E == 2) {
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(p));
        out[0] = a.x, out[1] = a.y;
    } else {
        for (int e = 0; e < E; ++e) out[e] = __half2float(p[e]);
    }
}

// Tags for the one-byte rows (KvDtype kI8 / kFp8: [num_kv_heads * D codes | num_kv_heads f32 scales]).
struct KvInt8 {};
struct KvFp8 {};

// Elements [c0, c0 + E) of KV head kvh of cache row `slot`, as f32 (codes times the head's scale:
// one rounding, as kernels/ref kv_load).
template <class KT, int D, int E>
__device__ __forceinline__ void load_kv(const void* base, int64_t slot, int64_t nkv, int64_t kvh, int c0,
                                        float (&out)[E]) {
    if constexpr (std::is_same_v<KT, float> || std::is_same_v<KT, __half>) {
        load_run<E>(static_cast<const KT*>(base) + (slot * nkv + kvh) * D + c0, out);
    } else {
        const uint8_t* row = static_cast<const uint8_t*>(base) + slot * (nkv * D + 4 * nkv);
        const float scale = reinterpret_cast<const float*>(row + nkv * D)[kvh];
        const uint8_t* c = row + kvh * D + c0;
        uint8_t b[E];
        if constexpr (E == 4) {
            const uint32_t w = *reinterpret_cast<const uint32_t*>(c);
            for (int e = 0; e < 4; ++e) b[e] = uint8_t(w >> (8 * e));
        } else if constexpr (E == 2) {
            const uint16_t w = *reinterpret_cast<const uint16_t*>(c);
            b[0] = uint8_t(w), b[1] = uint8_t(w >> 8);
        } else {
            for (int e = 0; e < E; ++e) b[e] = c[e];
        }
        for (int e = 0; e < E; ++e) {
            float x;
            if constexpr (std::is_same_v<KT, KvInt8>) {
                x = float(int8_t(b[e]));
            } else {
                x = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b[e]), __NV_E4M3)));
            }
            out[e] = x * scale;
        }
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Partials: part_o [num_seqs, splits, num_heads, D], part_lse [num_seqs, splits, num_heads].
// G > 0: exactly G query heads per KV head, known at compile time (the loops over them unroll and
// the per-head state stays in registers); G = 0: any group up to kMaxGroup (state in local memory).
template <class KT, int D, int G>
__global__ void __launch_bounds__(kWarps * 32) decode_split_kernel(const float* q, DecodeAttentionBatch b, int group,
                                                                   int64_t splits, float* part_o, float* part_lse) {
    constexpr int kG = G > 0 ? G : kMaxGroup;  // state arrays
    if constexpr (G > 0) group = G;
    // Lane l holds elements [c0, c0 + E) of q, K, V rows: one wide load per row (8 bytes of f16 at
    // head_dim 128); when D < 32, element l on lanes l < D and zeros on the others.
    constexpr bool kWide = D >= 32;
    constexpr int E = kWide ? D / 32 : 1;
    const int64_t split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool lane_in = kWide || lane < D;
    const int c0 = kWide ? lane * E : lane;
    const int64_t kv_len = b.kv_lens[seq], pos = kv_len - 1;
    const int64_t lo = b.window > 0 && pos - b.window + 1 > 0 ? pos - b.window + 1 : 0;
    const int64_t per = (kv_len + splits - 1) / splits;
    const int64_t run = per > kDecodeSplitKeys ? per : kDecodeSplitKeys;  // keys per split
    const int64_t j0 = split * run > lo ? split * run : lo;
    const int64_t j1 = (split + 1) * run < kv_len ? (split + 1) * run : kv_len;
    if (j0 >= j1) {  // no key here (uniform over the block): an empty partial, which the merge skips
        for (int h = threadIdx.x; h < group; h += kWarps * 32)
            part_lse[(seq * splits + split) * b.num_heads + kvh * group + h] = -INFINITY;
        return;
    }
    const float scale = rsqrtf(float(D));

    __shared__ float m_w[kWarps][kG], l_w[kWarps][kG];
    __shared__ float acc_w[kWarps][kG][D];
    float qr[kG][E], m[kG], l[kG], acc[kG][E];
    const int64_t qrow = b.q_rows ? b.q_rows[seq] : seq;
    const float* qs = q + (qrow * b.num_heads + kvh * group) * D;  // [group, D]
#pragma unroll
    for (int g = 0; g < (G > 0 ? G : group); ++g) {
        for (int e = 0; e < E; ++e) {
            qr[g][e] = lane_in ? qs[g * D + c0 + e] * scale : 0.0f;
            acc[g][e] = 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    const int32_t* table = b.block_tables + int64_t(b.table_rows ? b.table_rows[seq] : seq) * b.max_blocks_per_seq;
    for (int64_t j = j0 + warp; j < j1; j += kWarps) {
        const int64_t slot = int64_t(table[j / b.block_size]) * b.block_size + j % b.block_size;
        float kr[E], vr[E];
        if (lane_in) {
            load_kv<KT, D, E>(b.k, slot, b.num_kv_heads, kvh, c0, kr);
            load_kv<KT, D, E>(b.v, slot, b.num_kv_heads, kvh, c0, vr);
        } else {
            for (int e = 0; e < E; ++e) kr[e] = vr[e] = 0.0f;
        }
#pragma unroll
        for (int g = 0; g < (G > 0 ? G : group); ++g) {
            float d = 0.0f;
            for (int e = 0; e < E; ++e) d += qr[g][e] * kr[e];
            const float s = warp_sum(d);
            const float m_new = fmaxf(m[g], s);
            const float corr = __expf(m[g] - m_new), p = __expf(s - m_new);
            l[g] = l[g] * corr + p;
            for (int e = 0; e < E; ++e) acc[g][e] = acc[g][e] * corr + p * vr[e];
            m[g] = m_new;
        }
    }
#pragma unroll
    for (int g = 0; g < (G > 0 ? G : group); ++g) {
        if (lane == 0) {
            m_w[warp][g] = m[g];
            l_w[warp][g] = l[g];
        }
        for (int e = 0; e < E; ++e)
            if (lane_in) acc_w[warp][g][c0 + e] = acc[g][e];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * D; idx += kWarps * 32) {
        const int g = idx / D, d = idx % D;
        float mx = -INFINITY;
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_w[w][g]);
        float L = 0.0f, O = 0.0f;
        if (mx > -INFINITY) {
            for (int w = 0; w < kWarps; ++w) {
                const float c = m_w[w][g] > -INFINITY ? __expf(m_w[w][g] - mx) : 0.0f;
                L += l_w[w][g] * c;
                O += acc_w[w][g][d] * c;
            }
        }
        const int64_t h = kvh * group + g;
        const int64_t row = (seq * splits + split) * b.num_heads + h;
        part_o[row * D + d] = L > 0.0f ? O / L : 0.0f;
        if (d == 0) part_lse[row] = L > 0.0f ? mx + logf(L) : -INFINITY;
    }
}

template <int D>
__global__ void decode_merge_kernel(const float* part_o, const float* part_lse, int64_t splits, int64_t num_heads,
                                    const int32_t* q_rows, float* out) {
    const int64_t seq = blockIdx.x, h = blockIdx.y, orow = q_rows ? q_rows[seq] : seq;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float mx = -INFINITY;
        for (int64_t s = 0; s < splits; ++s) mx = fmaxf(mx, part_lse[(seq * splits + s) * num_heads + h]);
        float w_sum = 0.0f, o = 0.0f;
        if (mx > -INFINITY) {
            for (int64_t s = 0; s < splits; ++s) {
                const int64_t row = (seq * splits + s) * num_heads + h;
                const float lse = part_lse[row];
                if (lse == -INFINITY) continue;
                const float w = __expf(lse - mx);
                w_sum += w;
                o += w * part_o[row * D + d];
            }
        }
        out[(orow * num_heads + h) * D + d] = w_sum > 0.0f ? o / w_sum : 0.0f;
    }
}

int64_t num_splits(const DecodeAttentionBatch& b) {
    return b.num_splits > 0 ? b.num_splits : (b.max_kv_len + kDecodeSplitKeys - 1) / kDecodeSplitKeys;
}

template <class KT, int D>
core::Status launch(const float* q, const DecodeAttentionBatch& b, float* out, float* workspace, cudaStream_t stream) {
    const int64_t splits = num_splits(b);
    float* part_o = workspace;
    float* part_lse = workspace + b.num_seqs * splits * b.num_heads * D;
    const dim3 grid(unsigned(splits), unsigned(b.num_kv_heads), unsigned(b.num_seqs));
    const int group = int(b.num_heads / b.num_kv_heads);
    auto split = [&](auto kernel) { kernel<<<grid, kWarps * 32, 0, stream>>>(q, b, group, splits, part_o, part_lse); };
    // The common GQA groups of the large heads get their own instances (registers, not local memory).
    bool done = false;
    if constexpr (D >= 64) {
        done = true;
        switch (group) {
            case 1:
                split(decode_split_kernel<KT, D, 1>);
                break;
            case 2:
                split(decode_split_kernel<KT, D, 2>);
                break;
            case 4:
                split(decode_split_kernel<KT, D, 4>);
                break;
            case 8:
                split(decode_split_kernel<KT, D, 8>);
                break;
            default:
                done = false;
        }
    }
    if (!done) split(decode_split_kernel<KT, D, 0>);
    KILN_RETURN_IF_ERROR(launch_status("decode_split_kernel"));
    decode_merge_kernel<D><<<dim3(unsigned(b.num_seqs), unsigned(b.num_heads)), D, 0, stream>>>(
        part_o, part_lse, splits, b.num_heads, b.q_rows, out);
    return launch_status("decode_merge_kernel");
}

template <int D>
core::Status launch_dtype(const float* q, const DecodeAttentionBatch& b, float* out, float* workspace,
                          cudaStream_t stream) {
    switch (b.dtype) {
        case KvDtype::kF32:
            return launch<float, D>(q, b, out, workspace, stream);
        case KvDtype::kF16:
            return launch<__half, D>(q, b, out, workspace, stream);
        case KvDtype::kI8:
            return launch<KvInt8, D>(q, b, out, workspace, stream);
        case KvDtype::kFp8:
            return launch<KvFp8, D>(q, b, out, workspace, stream);
    }
    return core::error(core::StatusCode::kInvalidArgument) << "decode_attention: unknown KV dtype";
}

}  // namespace

core::Status decode_attention_supports(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim) {
    if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || num_heads / num_kv_heads > kMaxGroup)
        return core::error(core::StatusCode::kUnsupported)
               << "decode_attention: " << num_heads << " query heads over " << num_kv_heads << " KV heads (at most "
               << kMaxGroup << " per KV head are built)";
    if (head_dim != 8 && head_dim != 16 && head_dim != 32 && head_dim != 64 && head_dim != 128)
        return core::error(core::StatusCode::kUnsupported)
               << "decode_attention: head_dim " << head_dim << " (8, 16, 32, 64 and 128 are built)";
    return core::Status::ok();
}

size_t decode_attention_workspace_floats(const DecodeAttentionBatch& b) {
    if (b.num_seqs <= 0 || b.num_heads <= 0 || b.head_dim <= 0 || b.max_kv_len <= 0) return 0;
    return size_t(b.num_seqs * num_splits(b) * b.num_heads * (b.head_dim + 1));
}

core::Status decode_attention(const float* q, const DecodeAttentionBatch& b, float* out, float* workspace,
                              cudaStream_t stream) {
    if (b.num_seqs < 0 || b.num_heads <= 0 || b.num_kv_heads <= 0 || b.num_heads % b.num_kv_heads != 0 ||
        b.block_size <= 0 || b.max_blocks_per_seq <= 0 || b.window < 0 || b.max_kv_len <= 0 ||
        b.max_kv_len > b.max_blocks_per_seq * b.block_size)
        return core::error(core::StatusCode::kInvalidArgument)
               << "decode_attention: bad shape (heads " << b.num_heads << "/" << b.num_kv_heads << ", block "
               << b.block_size << ", max_kv_len " << b.max_kv_len << ")";
    if (b.num_heads / b.num_kv_heads > kMaxGroup)
        return core::error(core::StatusCode::kUnsupported)
               << "decode_attention: more than " << kMaxGroup << " query heads per KV head";
    if (b.num_seqs == 0) return core::Status::ok();
    if (!q || !out || !workspace || !b.k || !b.v || !b.block_tables || !b.kv_lens)
        return core::error(core::StatusCode::kInvalidArgument) << "decode_attention: null pointer";
    if (b.num_seqs > 65535)
        return core::error(core::StatusCode::kInvalidArgument)
               << "decode_attention: " << b.num_seqs << " queries in one launch (at most 65535)";
    if (num_splits(b) > 65535)
        return core::error(core::StatusCode::kInvalidArgument)
               << "decode_attention: max_kv_len " << b.max_kv_len << " too long";
    switch (b.head_dim) {
        case 8:
            return launch_dtype<8>(q, b, out, workspace, stream);
        case 16:
            return launch_dtype<16>(q, b, out, workspace, stream);
        case 32:
            return launch_dtype<32>(q, b, out, workspace, stream);
        case 64:
            return launch_dtype<64>(q, b, out, workspace, stream);
        case 128:
            return launch_dtype<128>(q, b, out, workspace, stream);
        default:
            return core::error(core::StatusCode::kUnsupported)
                   << "decode_attention: head_dim " << b.head_dim << " (8, 16, 32, 64 and 128 are built)";
    }
}

}  // namespace kiln::kernels::cuda
