// sample.h: one block per row. Every step reads the row from global memory (L2-resident for a
// vocabulary of up to a few MB) with coalesced strided loops; the block's reductions are
// deterministic (each thread combines the per-warp partials in the same order), so a row and its u
// always give the same token. Arithmetic mirrors kernels/ref/sample.cc (the penalty's multiply-add
// is kept apart from FMA contraction); only expf and the order of the double sums differ.
#include <climits>
#include <cmath>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/sample.h"

namespace kiln::kernels::cuda {
namespace {

using kernels::LogitAdjustment;
using kernels::SampleRow;
using ull = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct Smem {
    ull hist[256];  // radix selection: the weight of each 8-bit digit value
    double d[kWarps];
    float f[kWarps];
    int32_t i[kWarps];
    int bin, found;
    ull above, bin_weight;
};

// Order-preserving key of a float that is not NaN (-0 already made +0).
__device__ __forceinline__ uint32_t logit_key(float v) {
    const uint32_t b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Block-wide reductions, every thread gets the result. Each starts with a barrier, so that the
// previous user of the shared slots is done, and combines the warps' partials in warp order.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* slots) {  // slots: kWarps
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = slots[0];
    for (int w = 1; w < kWarps; ++w) t = op(t, slots[w]);
    return t;
}
__device__ double block_sum(double v, Smem& sm) {
    return block_reduce(
        v, [](double a, double b) { return a + b; }, sm.d);
}
__device__ float block_max(float v, Smem& sm) {
    return block_reduce(
        v, [](float a, float b) { return fmaxf(a, b); }, sm.f);
}
__device__ int32_t block_min_int(int32_t v, Smem& sm) {
    return block_reduce(
        v, [](int32_t a, int32_t b) { return min(a, b); }, sm.i);
}
__device__ int32_t block_max_int(int32_t v, Smem& sm) {
    return -block_min_int(-v, sm);
}
// The sum of v over the threads before this one.
__device__ double block_exclusive_scan(double v, Smem& sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        const double up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
    }
    __syncthreads();
    if (lane == 31) sm.d[warp] = incl;
    __syncthreads();
    double before = 0.0;
    for (int w = 0; w < warp; ++w) before += sm.d[w];
    return before + incl - v;
}

// NaN never wins; the lower id wins ties; i < 0 is "none".
__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
    if (i < 0 || isnan(v)) return false;
    return bi < 0 || v > bv || (v == bv && i < bi);
}

__device__ int32_t block_argmax(const float* x, int vocab, Smem& sm) {
    float bv = 0.0f;
    int32_t bi = -1;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
        if (better(x[i], i, bv, bi)) {
            bv = x[i];
            bi = i;
        }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        sm.f[threadIdx.x >> 5] = bv;
        sm.i[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    bv = sm.f[0];
    bi = sm.i[0];
    for (int w = 1; w < kWarps; ++w)
        if (better(sm.f[w], sm.i[w], bv, bi)) {
            bv = sm.f[w];
            bi = sm.i[w];
        }
    return bi < 0 ? 0 : bi;
}

struct Selected {
    bool found = false;
    uint32_t key = 0;
    ull above = 0;  // weight of the keys > key
    ull equal = 0;  // weight of the keys == key
};

// The largest key K such that the weight of the elements with key >= K reaches target (> 0), over
// the elements kw(i, key, weight) describes (weight 0: not counted). Four passes of 8 bits from the
// top, each a shared histogram of the elements still matching the digits chosen so far.
// Adds `w` to hist[bin] for every lane with bin < 256, one atomic per distinct bin of the warp (the
// lanes of one bin sum their weights with two 32-bit warp reductions: weights are below 2^41).
// Called by whole warps.
__device__ __forceinline__ void warp_hist_add(ull* hist, unsigned bin, ull w) {
    const int lane = threadIdx.x & 31;
    unsigned todo = __ballot_sync(0xffffffffu, bin < 256u);
    while (todo) {
        const int src = __ffs(todo) - 1;
        const unsigned b = __shfl_sync(0xffffffffu, bin, src);
        const bool mine = bin == b;
        const unsigned lo = __reduce_add_sync(0xffffffffu, mine ? unsigned(w & 0xfffffu) : 0u);
        const unsigned hi = __reduce_add_sync(0xffffffffu, mine ? unsigned(w >> 20) : 0u);
        if (lane == src) atomicAdd(&hist[b], (ull(hi) << 20) + lo);
        todo &= ~__ballot_sync(0xffffffffu, mine);
    }
}

// The largest key K such that the weight of the elements with key >= K reaches target (> 0), over
// the elements kw(i, key, weight) describes (weight 0: not counted). Four passes of 8 bits from the
// top, each a shared histogram of the elements still matching the digits chosen so far; warp 0
// finds the digit (lane l holds the bins 255 - 8l .. 248 - 8l).
template <class KeyWeight>
__device__ Selected radix_select(int n, ull target, KeyWeight kw, Smem& sm) {
    Selected r;
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        __syncthreads();
        for (int b = threadIdx.x; b < 256; b += kThreads) sm.hist[b] = 0;
        __syncthreads();
        for (int base = 0; base < n; base += kThreads) {  // uniform trip count: whole warps below
            const int i = base + int(threadIdx.x);
            uint32_t key = 0;
            ull w = 0;
            if (i < n) kw(i, key, w);
            const bool counted = w != 0 && (key & mask) == prefix;
            warp_hist_add(sm.hist, counted ? (key >> shift) & 255u : 256u, w);
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            const int lane = int(threadIdx.x);
            ull h[8], mine = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                h[j] = sm.hist[255 - 8 * lane - j];
                mine += h[j];
            }
            ull incl = mine;  // the weight of the bins of lanes 0 .. lane (the top bins first)
            for (int o = 1; o < 32; o <<= 1) {
                const ull up = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += up;
            }
            const unsigned reach = __ballot_sync(0xffffffffu, r.above + incl >= target);
            if (reach == 0) {
                if (lane == 0) sm.found = 0;
            } else if (lane == __ffs(reach) - 1) {
                ull cum = r.above + incl - mine, w = 0;
                int j = 0;
                bool hit = false;
#pragma unroll
                for (int jj = 0; jj < 8; ++jj) {  // unrolled: h stays in registers
                    if (hit) continue;
                    if (jj == 7 || cum + h[jj] >= target) {
                        hit = true;
                        j = jj;
                        w = h[jj];
                    } else {
                        cum += h[jj];
                    }
                }
                sm.found = 1;
                sm.bin = 255 - 8 * lane - j;
                sm.above = cum;
                sm.bin_weight = w;
            }
        }
        __syncthreads();
        if (!sm.found) return r;  // the same for every thread: the total is below target
        prefix |= uint32_t(sm.bin) << shift;
        mask |= 0xffu << shift;
        r.above = sm.above;
        r.equal = sm.bin_weight;
    }
    r.found = true;
    r.key = prefix;
    return r;
}

// The id of the need-th (1-based) lowest-id element whose key is `key` (need <= their count).
template <class KeyOf>
__device__ int32_t nth_lowest_id(int n, ull need, uint32_t key, KeyOf key_of, Smem& sm) {
    const Selected s = radix_select(
        n, need,
        [&](int i, uint32_t& k, ull& w) {
            k = ~uint32_t(i);  // the largest key is the lowest id
            w = key_of(i) == key ? 1 : 0;
        },
        sm);
    return int32_t(~s.key);
}

// Bias and penalties: the thread at the head of each id's run of entries applies the run.
__device__ void apply_adjustments(float* x, int vocab, const SampleRow& row, const LogitAdjustment* e) {
    for (int j = threadIdx.x; j < row.adjust_count; j += kThreads) {
        const int32_t id = e[j].id;
        if ((j > 0 && e[j - 1].id == id) || id < 0 || id >= vocab) continue;
        float l = x[id];
        bool in_history = false;
        long long generated = 0;
        for (int k = j; k < row.adjust_count && e[k].id == id; ++k) {
            if (e[k].bias != 0.0f) l += e[k].bias;
            in_history = in_history || e[k].in_history != 0;
            generated += e[k].generated;
        }
        const float rp = row.repetition_penalty, fp = row.frequency_penalty, pp = row.presence_penalty;
        if (in_history && rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
        if (generated > 0 && (fp != 0.0f || pp != 0.0f)) l -= __fadd_rn(__fmul_rn(fp, float(generated)), pp);
        x[id] = l;
    }
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(float* logits, int vocab, const SampleRow* rows, const LogitAdjustment* adjust, long long num_adjust,
                  int32_t* ids) {
    __shared__ Smem sm;
    const SampleRow row = rows[blockIdx.x];
    float* x = logits + (long long)blockIdx.x * vocab;  // [vocab]
    if (row.adjust_count < 0 || row.adjust_begin < 0 || row.adjust_begin + (long long)row.adjust_count > num_adjust) {
        if (threadIdx.x == 0) ids[blockIdx.x] = -1;
        return;
    }
    if (row.adjust_count > 0) apply_adjustments(x, vocab, row, adjust + row.adjust_begin);
    __syncthreads();
    if (row.temperature < kernels::kSampleGreedyTemperature) {
        const int32_t id = block_argmax(x, vocab, sm);
        if (threadIdx.x == 0) ids[blockIdx.x] = id;
        return;
    }

    const float inv_t = 1.0f / row.temperature;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
        float l = x[i];
        l = isnan(l) ? -INFINITY : l * inv_t;
        if (l == 0.0f) l = 0.0f;
        x[i] = l;
        mx = fmaxf(mx, l);
    }
    const float max_logit = block_max(mx, sm);
    if (max_logit == -INFINITY) {
        if (threadIdx.x == 0) ids[blockIdx.x] = 0;
        return;
    }

    // Top-k: the threshold key, and among the tokens at it the last id kept.
    const bool top_k = row.top_k > 0 && row.top_k < vocab;
    uint32_t k_key = 0;
    int32_t k_last = vocab - 1;
    if (top_k) {
        const auto key_of = [&](int i) { return logit_key(x[i]); };
        const Selected s = radix_select(
            vocab, ull(row.top_k),
            [&](int i, uint32_t& k, ull& w) {
                k = key_of(i);
                w = 1;
            },
            sm);
        k_key = s.key;
        const ull need = ull(row.top_k) - s.above;
        if (need < s.equal) k_last = nth_lowest_id(vocab, need, k_key, key_of, sm);
    }
    const auto in_top_k = [&](int i, float l) {
        const uint32_t k = logit_key(l);
        return !top_k || k > k_key || (k == k_key && i <= k_last);
    };

    double part = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
        if (in_top_k(i, x[i])) part += double(expf(x[i] - max_logit));
    const float inv_sum = float(1.0 / block_sum(part, sm));
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const float l = x[i];
        x[i] = in_top_k(i, l) ? expf(l - max_logit) * inv_sum : 0.0f;
    }

    // Top-p: the threshold probability by fixed-point mass, then the lowest ids at it as needed.
    if (row.top_p < 1.0f) {
        const ull target = kernels::top_p_target(row.top_p);
        const auto key_of = [&](int i) { return __float_as_uint(x[i]); };  // p >= 0: the bits order it
        const Selected s = radix_select(
            vocab, target,
            [&](int i, uint32_t& k, ull& w) {
                k = key_of(i);
                w = kernels::top_p_mass(x[i]);
            },
            sm);
        if (s.found) {  // else the whole mass is short of the target: everything stays
            const ull m = kernels::top_p_mass(__uint_as_float(s.key));  // > 0, as the threshold's mass counted
            const ull need = (target - s.above + m - 1) / m;
            const int32_t p_last = need < s.equal / m ? nth_lowest_id(vocab, need, s.key, key_of, sm) : vocab - 1;
            __syncthreads();
            for (int i = threadIdx.x; i < vocab; i += kThreads) {
                const uint32_t k = key_of(i);
                if (!(k > s.key || (k == s.key && i <= p_last))) x[i] = 0.0f;
            }
        }
    }

    if (row.min_p > 0.0f) {
        float mp = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += kThreads) mp = fmaxf(mp, x[i]);
        const float threshold = row.min_p * block_max(mp, sm);
        for (int i = threadIdx.x; i < vocab; i += kThreads)
            if (x[i] < threshold) x[i] = 0.0f;
    }

    // The draw: each thread owns a run of ids; the run whose cumulative mass passes u is walked.
    part = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) part += x[i];
    const float inv_kept = float(1.0 / block_sum(part, sm));
    const int run = (vocab + kThreads - 1) / kThreads;
    const int lo = min(vocab, int(threadIdx.x) * run), hi = min(vocab, lo + run);
    double mine = 0.0;
    for (int i = lo; i < hi; ++i) mine += double(x[i] * inv_kept);
    const double before = block_exclusive_scan(mine, sm);
    const int32_t owner = block_min_int(mine > 0.0 && row.u < before + mine ? int32_t(threadIdx.x) : INT_MAX, sm);
    int32_t last = -1;
    if (owner == INT_MAX) {  // u past the rounded total: the last kept token
        for (int i = threadIdx.x; i < vocab; i += kThreads)
            if (x[i] * inv_kept > 0.0f) last = i;
        last = block_max_int(last, sm);
        if (threadIdx.x == 0) ids[blockIdx.x] = last < 0 ? 0 : last;
        return;
    }
    if (int32_t(threadIdx.x) != owner) return;
    double cum = before;
    for (int i = lo; i < hi; ++i) {
        const float q = x[i] * inv_kept;
        if (q > 0.0f) last = i;
        cum += q;
        if (q > 0.0f && row.u < cum) {  // never a dropped token, whatever the rounding of `before`
            ids[blockIdx.x] = i;
            return;
        }
    }
    ids[blockIdx.x] = last;  // rounding of the run's sum: its last kept token (mine > 0: there is one)
}

}  // namespace

core::Status sample_rows(float* logits, int64_t rows, int64_t vocab, const kernels::SampleRow* row_params,
                         const kernels::LogitAdjustment* adjust, int64_t num_adjust, int32_t* ids, cudaStream_t stream) {
    if (rows < 0 || rows > int64_t(0x7fffffff) || vocab <= 0 || vocab > (int64_t(1) << 24) || num_adjust < 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "sample_rows: rows " << rows << ", vocab " << vocab << ", adjustments " << num_adjust;
    if (rows == 0) return core::Status::ok();
    if (!logits || !row_params || !ids || (num_adjust > 0 && !adjust))
        return core::error(core::StatusCode::kInvalidArgument) << "sample_rows: null pointer";
    sample_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, int(vocab), row_params, adjust, num_adjust, ids);
    return launch_status("sample_kernel");
}

}  // namespace kiln::kernels::cuda
