// moe.h: the router's top-k, the grouping by expert, the grouped expert products and the combine.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/moe.h"

namespace kiln::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerPass = 8;  // an expert's rows per decode of its weights (the block GEMV's m)

// One thread per row: insertion into the k best (experts in ascending id, so a tie keeps the lower
// id ahead), then softmax over all experts, max-subtracted (ops::moe_route, step for step).
__global__ void route_kernel(const float* logits, int64_t rows, int E, int k, bool norm_topk, int32_t* ids,
                             float* weights) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* l = logits + r * E;
    int32_t* id = ids + r * k;
    float* w = weights + r * k;
    int n = 0;
    for (int e = 0; e < E; ++e) {
        if (n == k && !(l[e] > l[id[k - 1]])) continue;
        int pos = n < k ? n++ : k - 1;
        while (pos > 0 && l[e] > l[id[pos - 1]]) {
            id[pos] = id[pos - 1];
            --pos;
        }
        id[pos] = e;
    }
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = fmaxf(mx, l[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += expf(l[e] - mx);
    float chosen = 0.0f;
    for (int j = 0; j < k; ++j) {
        w[j] = expf(l[id[j]] - mx) / sum;
        chosen += w[j];
    }
    if (norm_topk)
        for (int j = 0; j < k; ++j) w[j] /= chosen;
}

// One block; thread t owns experts t, t + blockDim, ...: counts, an exclusive scan by thread 0,
// then each owner writes its entries in row order.
__global__ void group_kernel(const int32_t* ids, int64_t num, int E, int32_t* offsets, int32_t* entries,
                             int32_t* slot_pos) {
    __shared__ int32_t counts[1024];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t c = 0;
        for (int64_t i = 0; i < num; ++i) c += ids[i] == e;
        counts[e] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t at = 0;
        for (int e = 0; e < E; ++e) {
            offsets[e] = at;
            at += counts[e];
            counts[e] = offsets[e];
        }
        offsets[E] = at;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t at = counts[e];
        for (int64_t i = 0; i < num; ++i)
            if (ids[i] == e) {
                entries[at] = int32_t(i);
                slot_pos[i] = at++;
            }
    }
}

// Float matrices with the block decoders' interface: group g = elements 32g .. 32g + len - 1 of a
// row (len < 32 only in a row's last group, when k is not a multiple of 32).
template <class T>
struct Dense {
    static constexpr int kBytes = sizeof(T), kElems = 1;
    __device__ static void decode_part(const uint8_t* row, int64_t g, int len, float* v) {
        const T* p = reinterpret_cast<const T*>(row) + g * 32;
        for (int i = 0; i < len; ++i) v[i] = to_f32(p[i]);
    }
    __device__ static float to_f32(float x) { return x; }
    __device__ static float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
    __device__ static float to_f32(__half x) { return __half2float(x); }
};

// Block (x, e): weight rows 4 x .. 4 x + 3 of expert e, a warp each, over the expert's entries
// kRowsPerPass at a time; lane l takes groups l, l + 32, ... of the row.
template <class B>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    grouped_kernel(const uint8_t* w, int64_t n, int64_t k, const float* x, const int32_t* entries, int top_k,
                   const int32_t* offsets, float* y) {
    const int e = blockIdx.y;
    const int32_t begin = offsets[e], count = offsets[e + 1] - begin;
    const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (count == 0 || row >= n) return;
    const int lane = threadIdx.x & 31;
    const int64_t row_bytes = (k / B::kElems) * B::kBytes, groups = (k + 31) / 32;
    const uint8_t* wr = w + (int64_t(e) * n + row) * row_bytes;
    for (int32_t t0 = 0; t0 < count; t0 += kRowsPerPass) {
        const int m = min(kRowsPerPass, count - t0);
        const float* xr[kRowsPerPass];
        float acc[kRowsPerPass];
#pragma unroll
        for (int t = 0; t < kRowsPerPass; ++t) {
            acc[t] = 0.0f;
            const int64_t i = begin + t0 + min(t, m - 1);
            xr[t] = x + (entries ? int64_t(entries[i] / top_k) : i) * k;
        }
        for (int64_t g = lane; g < groups; g += 32) {
            float v[32];
            int len = 32;
            if constexpr (B::kElems == 1) {
                len = int(min(int64_t(32), k - g * 32));
                B::decode_part(wr, g, len, v);
            } else {
                B::decode_group(wr, g, v);
            }
#pragma unroll
            for (int t = 0; t < kRowsPerPass; ++t) {
                if (t >= m) break;
                const float* xg = xr[t] + g * 32;
                float s = 0.0f;
                for (int j = 0; j < len; ++j) s += v[j] * __ldg(xg + j);
                acc[t] += s;
            }
        }
#pragma unroll
        for (int t = 0; t < kRowsPerPass; ++t) {
            if (t >= m) break;
            float s = acc[t];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) y[int64_t(begin + t0 + t) * n + row] = s;
        }
    }
}

// Block r: row r's columns; each sums its slots in ascending expert id (selection over the k ids).
__global__ void combine_kernel(const int32_t* ids, const float* weights, const int32_t* slot_pos, const float* y,
                               int k, int64_t H, float* out) {
    const int64_t r = blockIdx.x;
    const int32_t* id = ids + r * k;
    for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
        float o = 0.0f;
        for (int done = 0, last = -1; done < k; ++done) {
            int j = -1;
            for (int s = 0; s < k; ++s)
                if (id[s] > last && (j < 0 || id[s] < id[j])) j = s;
            last = id[j];
            o = __fadd_rn(o, __fmul_rn(weights[r * k + j], y[int64_t(slot_pos[r * k + j]) * H + c]));
        }
        out[r * H + c] = o;
    }
}

__global__ void gated_add_kernel(const float* gate, const float* y, int64_t rows, int64_t H, float* out) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * H; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = 1.0f / (1.0f + expf(-gate[i / H]));
        out[i] = __fadd_rn(out[i], __fmul_rn(g, y[i]));
    }
}

core::Status bad(const char* what) {
    return core::error(core::StatusCode::kInvalidArgument) << what;
}

}  // namespace

core::Status moe_route(const float* logits, int64_t rows, int64_t E, int64_t k, bool norm_topk, int32_t* ids,
                       float* weights, cudaStream_t stream) {
    if (rows < 0 || k < 1 || k > E || E > 0x7fffffff)
        return core::error(core::StatusCode::kInvalidArgument) << "moe_route: top " << k << " of " << E << ", rows " << rows;
    if (rows == 0) return core::Status::ok();
    if (!logits || !ids || !weights) return bad("moe_route: null pointer");
    route_kernel<<<unsigned((rows + 127) / 128), 128, 0, stream>>>(logits, rows, int(E), int(k), norm_topk, ids, weights);
    return launch_status("moe route_kernel");
}

core::Status moe_group(const int32_t* ids, int64_t rows, int64_t k, int64_t E, int32_t* offsets, int32_t* entries,
                       int32_t* slot_pos, cudaStream_t stream) {
    if (rows < 0 || k < 1 || E < 1 || E > 1024 || rows * k > 0x7fffffff)
        return core::error(core::StatusCode::kInvalidArgument) << "moe_group: rows " << rows << ", top " << k << " of " << E;
    if (!ids || !offsets || !entries || !slot_pos) return bad("moe_group: null pointer");
    const int threads = int(std::min<int64_t>(1024, (E + 31) / 32 * 32));
    group_kernel<<<1, threads, 0, stream>>>(ids, rows * k, int(E), offsets, entries, slot_pos);
    return launch_status("moe group_kernel");
}

core::Status moe_grouped_matmul(const ExpertMatrices& w, const float* x, const int32_t* entries, int64_t top_k,
                                const int32_t* offsets, int64_t num_entries, float* y, cudaStream_t stream) {
    const bool dense = w.type == core::DType::kF32 || w.type == core::DType::kBF16 || w.type == core::DType::kF16;
    if (w.num_experts < 1 || w.num_experts > 65535 || w.n <= 0 || w.k <= 0 || (!dense && w.k % 32 != 0) || top_k < 1 ||
        num_entries < 0 || (w.n + kWarpsPerBlock - 1) / kWarpsPerBlock > int64_t(0x7fffffff))
        return core::error(core::StatusCode::kInvalidArgument)
               << "moe_grouped_matmul: " << w.num_experts << " experts of [" << w.n << ", " << w.k << "], top " << top_k;
    if (num_entries == 0) return core::Status::ok();
    if (!w.w || !x || !offsets || !y) return bad("moe_grouped_matmul: null pointer");
    const dim3 grid(unsigned((w.n + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(w.num_experts));
    const uint8_t* wb = static_cast<const uint8_t*>(w.w);
    auto run = [&](auto b) {
        grouped_kernel<decltype(b)>
            <<<grid, kWarpsPerBlock * 32, 0, stream>>>(wb, w.n, w.k, x, entries, int(top_k), offsets, y);
        return launch_status("moe grouped_kernel");
    };
    switch (w.type) {
        case core::DType::kF32:
            return run(Dense<float>{});
        case core::DType::kBF16:
            return run(Dense<__nv_bfloat16>{});
        case core::DType::kF16:
            return run(Dense<__half>{});
        default:
            return blocks::with_decoder(w.type, w.k, "moe_grouped_matmul", run);
    }
}

core::Status moe_combine(const int32_t* ids, const float* weights, const int32_t* slot_pos, const float* y,
                         int64_t rows, int64_t k, int64_t H, float* out, cudaStream_t stream) {
    if (rows < 0 || k < 1 || H <= 0 || rows > 0x7fffffff)
        return core::error(core::StatusCode::kInvalidArgument) << "moe_combine: rows " << rows << ", top " << k << ", H " << H;
    if (rows == 0) return core::Status::ok();
    if (!ids || !weights || !slot_pos || !y || !out) return bad("moe_combine: null pointer");
    combine_kernel<<<unsigned(rows), 256, 0, stream>>>(ids, weights, slot_pos, y, int(k), H, out);
    return launch_status("moe combine_kernel");
}

core::Status add_sigmoid_gated_rows(const float* gate, const float* y, int64_t rows, int64_t H, float* out,
                                    cudaStream_t stream) {
    if (rows < 0 || H <= 0)
        return core::error(core::StatusCode::kInvalidArgument) << "add_sigmoid_gated_rows: rows " << rows << ", H " << H;
    if (rows == 0) return core::Status::ok();
    if (!gate || !y || !out) return bad("add_sigmoid_gated_rows: null pointer");
    const int64_t blocks = std::min<int64_t>((rows * H + 255) / 256, 65535);
    gated_add_kernel<<<unsigned(blocks), 256, 0, stream>>>(gate, y, rows, H, out);
    return launch_status("gated_add_kernel");
}

}  // namespace kiln::kernels::cuda
