// prefill_attention.h. Fragment layouts of mma.sync.m16n8k16 (PTX ISA, "Matrix fragments for
// mma.m16n8k16 with floating point type"), with g = lane / 4 and t = lane % 4:
//   A (16x16, row-major, 4 x f16x2): a0,a1 (row g, cols 2t, 2t+1), a2,a3 (row g+8, same cols),
//                                    a4,a5 (row g, cols 2t+8, 2t+9), a6,a7 (row g+8, those cols)
//   B (16x8, k x n, 2 x f16x2):      b0,b1 (k 2t, 2t+1; n g), b2,b3 (k 2t+8, 2t+9; n g)
//   C (16x8, f32):                   c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols)
// S = Q K^T takes B[k = d][n = key] = K[key][d]: two consecutive halves of a K row in shared memory.
// The C fragments of two adjacent 8-key tiles of S are, element for element, the A fragment of P for
// those 16 keys (FlashAttention-2's register reuse). P V takes B[k = key][n = d] = V[key][d], read
// with ldmatrix.trans. K and V come in as separate cp.async groups: V's copy overlaps S and the
// softmax.
// Shared rows are padded by 8 halves so the 8 rows a warp reads at once fall in distinct banks.
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/prefill_attention.h"

namespace kiln::kernels::cuda {
namespace {

using namespace mma;

constexpr int kWarps = 4;
constexpr int kTileM = int(kPrefillTileQueries);  // queries per block: 16 per warp
constexpr int kTileN = 64;                        // keys per shared tile

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    prefill_kernel(const float* __restrict__ q, PrefillAttentionBatch b, float* __restrict__ out, float scale_log2) {
    constexpr int kStride = D + 8;  // halves per shared row
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    __shared__ __align__(16) __half ks[kTileN * kStride];
    __shared__ __align__(16) __half vs[kTileN * kStride];

    const int tile = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int seq = b.tile_seqs[tile], q0 = b.tile_q0[tile];
    const int nq = b.num_queries[seq], pos0 = b.positions0[seq];
    const int64_t row0 = b.q_starts[seq];
    const int64_t NH = b.num_heads, NKV = b.num_kv_heads;
    const int kvh = int(h / (NH / NKV));
    const int r_lo = q0 + warp * 16 + g, r_hi = r_lo + 8;  // this thread's two query rows
    const int last_q = min(q0 + kTileM, nq) - 1;           // the tile's last query
    const int hi = pos0 + last_q + 1;                      // keys [lo, hi) serve the tile
    const int lo = b.window > 0 ? max(0, int(pos0 + q0 - b.window + 1)) : 0;

    // Q fragments, f32 -> f16 (rows past the sequence's queries are zeros).
    uint32_t qf[D / 16][4];
    auto q_pair = [&](int r, int c) -> float2 {
        if (r >= nq) return make_float2(0.0f, 0.0f);
        return *reinterpret_cast<const float2*>(q + ((row0 + r) * NH + h) * D + c);
    };
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int c0 = kk * 16 + 2 * t, c1 = c0 + 8;
        const float2 a = q_pair(r_lo, c0), bq = q_pair(r_hi, c0), c = q_pair(r_lo, c1), d = q_pair(r_hi, c1);
        qf[kk][0] = pack_half2(a.x, a.y);
        qf[kk][1] = pack_half2(bq.x, bq.y);
        qf[kk][2] = pack_half2(c.x, c.y);
        qf[kk][3] = pack_half2(d.x, d.y);
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    const int32_t* table = b.block_tables + int64_t(seq) * b.max_blocks_per_seq;
    const __half* K = static_cast<const __half*>(b.k);
    const __half* V = static_cast<const __half*>(b.v);
    for (int kb = (lo / kTileN) * kTileN; kb < hi; kb += kTileN) {
        __syncthreads();  // every warp is done with the previous tile
        // K then V as two cp.async groups: S = Q K^T and the softmax run while V is in flight.
        for (int pass = 0; pass < 2; ++pass) {
            const __half* src = pass == 0 ? K : V;
            __half* dst = pass == 0 ? ks : vs;
            for (int idx = threadIdx.x; idx < kTileN * kChunks; idx += kWarps * 32) {
                const int r = idx / kChunks, chunk = idx % kChunks, j = kb + r;
                __half* d = dst + r * kStride + chunk * 8;
                if (j < hi) {
                    const int64_t slot = int64_t(table[j / b.block_size]) * b.block_size + j % b.block_size;
                    cp_async16(d, src + (slot * NKV + kvh) * D + chunk * 8);
                } else {
                    *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
                }
            }
            cp_async_commit();
        }
        cp_async_wait<1>();  // this thread's K copies have landed
        __syncthreads();

        float s[kTileN / 8][4];
#pragma unroll
        for (int nt = 0; nt < kTileN / 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            const __half* krow = ks + (nt * 8 + g) * kStride + 2 * t;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + kk * 16);
                const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + kk * 16 + 8);
                mma_16816(s[nt], qf[kk], b0, b1);
            }
        }
        // Mask and scale (scores in log2 units), then the online softmax of rows r_lo (i < 2) and
        // r_hi (i >= 2); a row's 64 scores are spread over the 4 threads of its group.
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < kTileN / 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = i < 2 ? r_lo : r_hi, j = kb + nt * 8 + 2 * t + (i & 1), p = pos0 + r;
                const bool valid = r < nq && j <= p && j < hi && (b.window == 0 || j > p - b.window);
                s[nt][i] = valid ? s[nt][i] * scale_log2 : -INFINITY;
                mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
            }
        float corr[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
            mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
            const float m_new = fmaxf(m[half], mx[half]);
            corr[half] = m_new == -INFINITY ? 1.0f : exp2f(m[half] - m_new);
            m[half] = m_new;
        }
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < kTileN / 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float mm = m[i >> 1];
                s[nt][i] = mm == -INFINITY ? 0.0f : exp2f(s[nt][i] - mm);
                sum[i >> 1] += s[nt][i];
            }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 1);
            sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 2);
            l[half] = l[half] * corr[half] + sum[half];
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[dt][0] *= corr[0];
            o[dt][1] *= corr[0];
            o[dt][2] *= corr[1];
            o[dt][3] *= corr[1];
        }
        cp_async_wait<0>();  // V
        __syncthreads();
        // O += P V, 16 keys per step. The B fragments of two 8-wide column tiles come from one
        // transposed ldmatrix: matrices (keys +0, cols +0), (+8, +0), (+0, +8), (+8, +8), this lane
        // addressing row lane % 8 of matrix lane / 8.
        const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1), v_col = 8 * (lane >> 4);
#pragma unroll
        for (int kstep = 0; kstep < kTileN / 16; ++kstep) {
            const int n0 = 2 * kstep, n1 = n0 + 1;
            const uint32_t a[4] = {pack_half2(s[n0][0], s[n0][1]), pack_half2(s[n0][2], s[n0][3]),
                                   pack_half2(s[n1][0], s[n1][1]), pack_half2(s[n1][2], s[n1][3])};
            const __half* vrow = vs + (kstep * 16 + v_row) * kStride + v_col;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bv[4];
                ldmatrix_x4_trans(bv, vrow + dt * 8);
                mma_16816(o[dt], a, bv[0], bv[1]);
                mma_16816(o[dt + 1], a, bv[2], bv[3]);
            }
        }
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = i < 2 ? r_lo : r_hi;
            if (r >= nq) continue;
            const float L = l[i >> 1];
            out[((row0 + r) * NH + h) * D + dt * 8 + 2 * t + (i & 1)] = L > 0.0f ? o[dt][i] / L : 0.0f;
        }
}

}  // namespace

core::Status prefill_attention_supports(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim) {
    if (num_kv_heads <= 0 || num_heads <= 0 || num_heads % num_kv_heads != 0)
        return core::error(core::StatusCode::kUnsupported)
               << "prefill_attention: " << num_heads << " query heads over " << num_kv_heads << " KV heads";
    if (head_dim != 64 && head_dim != 128)
        return core::error(core::StatusCode::kUnsupported)
               << "prefill_attention: head_dim " << head_dim << " (64 and 128 are built)";
    return core::Status::ok();
}

core::Status prefill_attention(const float* q, const PrefillAttentionBatch& b, float* out, cudaStream_t stream) {
    if (b.num_tiles < 0 || b.num_tiles > int64_t(0x7fffffff) || b.num_heads <= 0 || b.num_heads > 65535 ||
        b.block_size <= 0 || b.max_blocks_per_seq <= 0 || b.window < 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "prefill_attention: tiles " << b.num_tiles << ", heads " << b.num_heads << ", block " << b.block_size;
    KILN_RETURN_IF_ERROR(prefill_attention_supports(b.num_heads, b.num_kv_heads, b.head_dim));
    if (b.num_tiles == 0) return core::Status::ok();
    if (!q || !out || !b.k || !b.v || !b.block_tables || !b.q_starts || !b.positions0 || !b.num_queries ||
        !b.tile_seqs || !b.tile_q0)
        return core::error(core::StatusCode::kInvalidArgument) << "prefill_attention: null pointer";
    const dim3 grid(unsigned(b.num_tiles), unsigned(b.num_heads));
    const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(b.head_dim)));  // log2(e) / sqrt(D)
    if (b.head_dim == 64) {
        prefill_kernel<64><<<grid, kWarps * 32, 0, stream>>>(q, b, out, scale_log2);
    } else {
        prefill_kernel<128><<<grid, kWarps * 32, 0, stream>>>(q, b, out, scale_log2);
    }
    return launch_status("prefill_kernel");
}

}  // namespace kiln::kernels::cuda
