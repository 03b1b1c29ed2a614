// Linear layers over the kernels/cpu matmul kernels (see linear.h).
#include "ops/linear.h"

#include <algorithm>

#include "kernels/ref/dequant.h"
#include "ops/transformer_ops.h"

namespace kiln::ops {
namespace {

namespace cpu = kernels::cpu;

// Tokens per task in prefill: each weight block is decoded once per tile and reused for every
// token in it, so larger tiles cut weight traffic; 32 keeps a tile's activations (32 rows of ActQ8
// at hidden 4096: 164 KB) within L2.
constexpr int64_t kTokenTile = 32;
// The smallest slice of output rows worth a task of its own.
constexpr int64_t kMinRows = 16;

}  // namespace

core::Result<Linear> make_linear(const kernels::ref::WeightView& w, const LinearOptions& options) {
    if (!cpu::isa_supported(options.isa)) {
        return core::error(core::StatusCode::kUnsupported)
               << "ISA " << cpu::isa_name(options.isa) << " is not supported by this CPU";
    }
    Linear l;
    l.w = w;
    const cpu::MatmulKernel* k = cpu::find_matmul_kernel(w.dtype, options.isa);
    cpu::Isa isa = options.isa;
    if (!k) {  // this ISA has no kernel for the type: the scalar one does the same arithmetic
        k = cpu::find_matmul_kernel(w.dtype, cpu::Isa::kRef);
        isa = cpu::Isa::kRef;
    }
    if (k && (k->act == cpu::ActFormat::kF32 || !options.f32_activations)) {
        l.kernel = k;
        l.isa = isa;
    } else if (!kernels::ref::dequant_supported(w.dtype)) {
        return core::error(core::StatusCode::kUnsupported) << "matmul: weight dtype " << core::dtype_name(w.dtype);
    }
    return l;
}

core::Status linear(core::ThreadPool& pool, const float* x, int64_t m, const Linear& l, const float* bias, float* y,
                    std::vector<uint8_t>& scratch) {
    if (!l.kernel) return matmul(pool, x, m, l.w, bias, y);
    const kernels::ref::WeightView& w = l.w;
    if (m < 0 || w.rows <= 0 || w.cols <= 0) return core::error(core::StatusCode::kInvalidArgument) << "linear: bad shape";
    if (!x || !y || !w.data) return core::error(core::StatusCode::kInvalidArgument) << "linear: null pointer";
    if (m == 0) return core::Status::ok();
    const cpu::MatmulKernel& k = *l.kernel;
    const int64_t K = w.cols, N = w.rows;
    const size_t act_bytes = k.act_row_bytes(K);
    const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
    if (k.act != cpu::ActFormat::kF32) {
        if (scratch.size() < size_t(m) * act_bytes) scratch.resize(size_t(m) * act_bytes);
        uint8_t* dst = scratch.data();
        pool.parallel_for(m, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) k.quantize_row(x + t * K, dst + size_t(t) * act_bytes, K);
        });
        act = dst;
    }
    const int64_t tiles = (m + kTokenTile - 1) / kTokenTile;
    // Enough row slices per token tile to give every thread several tasks (load balance).
    const int64_t want = std::max<int64_t>(1, (pool.num_threads() * 4 + tiles - 1) / tiles);
    const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(want, (N + kMinRows - 1) / kMinRows));
    pool.parallel_for(tiles * slices, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t s = task % slices, tile = task / slices;
            const int64_t r0 = N * s / slices, r1 = N * (s + 1) / slices;
            const int64_t t0 = tile * kTokenTile, t1 = std::min(m, t0 + kTokenTile);
            k.gemm(w.data, w.row_bytes, act + size_t(t0) * act_bytes, act_bytes, t1 - t0, K, y + t0 * N, N, r0, r1);
            if (bias) {
                for (int64_t t = t0; t < t1; ++t) {
                    for (int64_t r = r0; r < r1; ++r) y[t * N + r] += bias[r];
                }
            }
        }
    });
    return core::Status::ok();
}

}  // namespace kiln::ops
