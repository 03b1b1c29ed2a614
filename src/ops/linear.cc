// Linear layers over the kernels/cpu matmul kernels (see linear.h).
#include "ops/linear.h"

#include <algorithm>

#include "core/huge_pages.h"
#include "kernels/cpu/activation.h"
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
constexpr int64_t kMinRows = 32;

int64_t align32(int64_t r) {
    return r & ~int64_t(31);
}

}  // namespace

core::Result<LinearPlan> plan_linear(const kernels::ref::WeightView& w, const LinearOptions& options) {
    if (!cpu::isa_supported(options.isa)) {
        return core::error(core::StatusCode::kUnsupported)
               << "ISA " << cpu::isa_name(options.isa) << " is not supported by this CPU";
    }
    if (w.dtype == core::DType::kI8 && !w.row_scale)
        return core::error(core::StatusCode::kInvalidArgument) << "matmul: I8 weights need row scales";
    LinearPlan plan;
    const kernels::MatmulKernel* k = cpu::find_matmul_kernel(w.dtype, options.isa);
    cpu::Isa isa = options.isa;
    if (!k) {  // this ISA has no kernel for the type: the scalar one does the same arithmetic
        k = cpu::find_matmul_kernel(w.dtype, cpu::Isa::kRef);
        isa = cpu::Isa::kRef;
    }
    // Quantized activations come in whole blocks of 32 (ActQ8) or 256 (ActQ8K); a row length that is
    // a whole number of weight blocks but not of activation blocks (NVFP4's 16) takes the f32 path.
    const int64_t act_block = !k ? 1 : k->act == kernels::ActFormat::kQ8 ? 32 : k->act == kernels::ActFormat::kQ8K ? 256 : 1;
    if (k && w.cols % act_block != 0) k = nullptr;
    // I8 rows: the int32 dot of a longer row could overflow; such rows take the f32 path.
    if (k && k->act == kernels::ActFormat::kI8Row && w.cols > kernels::kI8MaxK) k = nullptr;
    if (k && (k->act == kernels::ActFormat::kF32 || !options.f32_activations)) {
        plan.kernel = k;
        plan.isa = isa;
        const kernels::PackedMatmulKernel* pk = options.pack ? cpu::find_packed_matmul_kernel(w.dtype, isa) : nullptr;
        if (pk && w.rows > 0) {
            plan.packed_kernel = pk;
            plan.packed_bytes = pk->packed_bytes(w.rows, w.cols);
        }
    } else if (!kernels::ref::weight_view_supported(w)) {
        return core::error(core::StatusCode::kUnsupported) << "matmul: weight dtype " << core::dtype_name(w.dtype);
    }
    return plan;
}

core::Result<Linear> make_linear(const kernels::ref::WeightView& w, const LinearOptions& options) {
    KILN_ASSIGN_OR_RETURN(LinearPlan plan, plan_linear(w, options));
    Linear l;
    l.w = w;
    l.kernel = plan.kernel;
    l.isa = plan.isa;
    if (plan.packed_kernel) {
        // huge-page backed end to end: the packed matrices of a model fill shared 2 MiB-aligned chunks
        KILN_ASSIGN_OR_RETURN(std::shared_ptr<uint8_t> buf, core::huge_page_buffer(plan.packed_bytes));
        const kernels::PackedMatmulKernel* pk = plan.packed_kernel;
        // Slices of whole 32-row groups (every packed layout's groups divide 32) land at their own
        // offsets; the last one pads its group with the matrix's last row, as a whole pack does.
        auto pack_rows = [&](int64_t r0, int64_t r1) {
            pk->pack(static_cast<const uint8_t*>(w.data) + size_t(r0) * w.row_bytes, w.row_bytes, r1 - r0, w.cols,
                     buf.get() + pk->packed_bytes(r0, w.cols));
        };
        constexpr int64_t kSlice = 32;
        const int64_t slices = (w.rows + kSlice - 1) / kSlice;
        if (options.pool && slices > 1) {
            options.pool->parallel_for(slices, [&](int64_t s0, int64_t s1) {
                pack_rows(s0 * kSlice, std::min(w.rows, s1 * kSlice));
            });
        } else {
            pack_rows(0, w.rows);
        }
        l.packed_kernel = plan.packed_kernel;
        l.packed = std::move(buf);
        l.w.data = nullptr;  // never read again: the original may be released (model::create_model)
    }
    return l;
}

core::Result<std::optional<Linear>> fuse_linears(std::span<const kernels::ref::WeightView> parts, int64_t interleave,
                                                 const LinearOptions& options) {
    if (parts.empty() || interleave < 0)
        return core::error(core::StatusCode::kInvalidArgument) << "fuse_linears: bad arguments";
    const kernels::ref::WeightView& first = parts[0];
    int64_t rows = 0;
    for (const kernels::ref::WeightView& w : parts) {
        if (w.dtype != first.dtype || w.cols != first.cols || w.row_bytes != first.row_bytes || w.row_scale ||
            !w.data || w.rows <= 0 || (interleave > 0 && w.rows % interleave != 0))
            return std::optional<Linear>();
        if (interleave > 0 && w.rows != first.rows) return std::optional<Linear>();
        rows += w.rows;
    }
    kernels::ref::WeightView fused = first;
    fused.rows = rows;
    KILN_ASSIGN_OR_RETURN(LinearPlan plan, plan_linear(fused, options));
    if (!plan.packed_kernel) return std::optional<Linear>();
    // The parts' rows side by side (or block by block) in a transient copy, packed from there.
    const size_t rb = first.row_bytes;
    std::vector<uint8_t> rows_bytes(size_t(rows) * rb);
    uint8_t* dst = rows_bytes.data();
    auto copy_rows = [&](const kernels::ref::WeightView& w, int64_t r0, int64_t n) {
        std::copy_n(static_cast<const uint8_t*>(w.data) + size_t(r0) * rb, size_t(n) * rb, dst);
        dst += size_t(n) * rb;
    };
    if (interleave == 0) {
        for (const kernels::ref::WeightView& w : parts) copy_rows(w, 0, w.rows);
    } else {
        for (int64_t r0 = 0; r0 < first.rows; r0 += interleave)
            for (const kernels::ref::WeightView& w : parts) copy_rows(w, r0, interleave);
    }
    fused.data = rows_bytes.data();
    KILN_ASSIGN_OR_RETURN(Linear l, make_linear(fused, options));  // packed: w.data is null, the copy may go
    return std::optional<Linear>(std::move(l));
}

const char* act_format_name(kernels::ActFormat f) {
    switch (f) {
        case kernels::ActFormat::kF32:
            return "f32";
        case kernels::ActFormat::kBF16:
            return "bf16";
        case kernels::ActFormat::kQ8:
            return "int8 per 32";
        case kernels::ActFormat::kQ8K:
            return "int8 per 256";
        case kernels::ActFormat::kI8Row:
            return "int8 per token";
    }
    return "?";
}

core::Status linear(core::ThreadPool& pool, const float* x, int64_t m, const Linear& l, const float* bias, float* y,
                    std::vector<uint8_t>& scratch) {
    const LinearPart part{&l, bias};
    return linear_group(pool, x, m, std::span<const LinearPart>(&part, 1), y, scratch);
}

namespace {

// A group with a part on the f32 reference path (no kernel): each part alone into its own buffer,
// then scattered into its columns. Not a hot path (f32_activations, or types without kernels).
core::Status mixed_group(core::ThreadPool& pool, const float* x, int64_t m, std::span<const LinearPart> parts,
                         int64_t total, float* y, std::vector<uint8_t>& scratch) {
    if (parts.size() == 1) return matmul(pool, x, m, parts[0].linear->w, parts[0].bias, y);
    int64_t col = 0;
    for (const LinearPart& p : parts) {
        const int64_t n = p.linear->w.rows;
        std::vector<float> part(size_t(m * n));  // [m, n]
        KILN_RETURN_IF_ERROR(linear(pool, x, m, *p.linear, p.bias, part.data(), scratch));
        for (int64_t t = 0; t < m; ++t) std::copy_n(part.data() + t * n, n, y + t * total + col);
        col += n;
    }
    return core::Status::ok();
}

}  // namespace

namespace {

// x quantized once per activation format the parts use: act[f] / act_bytes[f] (per token row) for
// f = [kF32] (x itself), [kQ8], [kQ8K], [kBF16], [kI8Row], the quantized ones in scratch.
struct GroupInputs {
    const uint8_t* act[kernels::kNumActFormats] = {};
    size_t act_bytes[kernels::kNumActFormats] = {};
};

GroupInputs quantize_inputs(core::ThreadPool& pool, const float* x, int64_t m, int64_t K,
                            std::span<const LinearPart> parts, std::vector<uint8_t>& scratch) {
    constexpr int kFormats = kernels::kNumActFormats;
    GroupInputs in;
    in.act[0] = reinterpret_cast<const uint8_t*>(x);
    in.act_bytes[0] = size_t(K) * sizeof(float);
    const kernels::MatmulKernel* quantizer[kFormats] = {};
    size_t need = 0;
    for (const LinearPart& p : parts) {
        const int f = int(p.linear->kernel->act);
        if (f == 0 || quantizer[f]) continue;
        quantizer[f] = p.linear->kernel;
        in.act_bytes[f] = p.linear->kernel->act_row_bytes(K);
        need += size_t(m) * in.act_bytes[f];
    }
    if (scratch.size() < need) scratch.resize(need);
    size_t offset = 0;
    for (int f = 1; f < kFormats; ++f) {
        if (!quantizer[f]) continue;
        uint8_t* dst = scratch.data() + offset;
        offset += size_t(m) * in.act_bytes[f];
        const kernels::MatmulKernel* q = quantizer[f];
        const size_t arb = in.act_bytes[f];
        pool.parallel_for(m, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) q->quantize_row(x + t * K, dst + size_t(t) * arb, K);
        });
        in.act[f] = dst;
    }
    return in;
}

// Rows [r0, r1) of one part for tokens [t0, t1): y's column `col` onwards, row stride `ld`
// (kernel, then the I8 row scales, then the bias).
void part_slice(const LinearPart& part, const GroupInputs& in, int64_t K, int64_t t0, int64_t t1, int64_t r0,
                int64_t r1, float* y, int64_t ld, int64_t col) {
    const Linear& l = *part.linear;
    const kernels::MatmulKernel& k = *l.kernel;
    const int f = int(k.act);
    float* out = y + t0 * ld + col;  // column `col` of row t0
    const uint8_t* a = in.act[f] + size_t(t0) * in.act_bytes[f];
    if (l.packed) {
        l.packed_kernel->gemm(l.packed.get(), a, in.act_bytes[f], t1 - t0, K, out, ld, r0, r1);
    } else {
        k.gemm(l.w.data, l.w.row_bytes, a, in.act_bytes[f], t1 - t0, K, out, ld, r0, r1);
    }
    if (const float* scale = l.w.row_scale) {  // I8 weights: the kernel's dot times the row scale
        for (int64_t t = 0; t < t1 - t0; ++t) {
            for (int64_t r = r0; r < r1; ++r) out[t * ld + r] *= scale[r];
        }
    }
    if (const float* bias = part.bias) {
        for (int64_t t = 0; t < t1 - t0; ++t) {
            for (int64_t r = r0; r < r1; ++r) out[t * ld + r] += bias[r];
        }
    }
}

// Slice s of `slices` of N rows: [r0, r1), starting at multiples of 32 (the packed layouts' 8-, 16-
// and 32-row groups and 16-row panels); may be empty.
void slice_rows(int64_t N, int64_t s, int64_t slices, int64_t* r0, int64_t* r1) {
    *r0 = align32(N * s / slices);
    *r1 = s + 1 == slices ? N : align32(N * (s + 1) / slices);
}

// Guided slices for decode (one token tile): each task takes a quarter (1 / (2 threads)) of the rows
// left, rounded down to a multiple of 32, but at least max(kGuidedMinRows, N / (16 threads)) rows
// (rounded up), so the first tasks are long streams and the last ones short, and the threads finish
// an op together: the tail another thread waits for is half a small task instead of half of one of
// 4 x threads equal slices. Boundaries b[0] = 0 < ... < b[n] = N; returns n (<= 16 threads + 1), or
// 0 when that exceeds kMaxGuidedSlices (then the caller slices uniformly).
constexpr int kMaxGuidedSlices = 128;
constexpr int64_t kGuidedMinRows = 64;
int guided_slices(int64_t N, int threads, int64_t* b) {
    if (16 * threads + 1 > kMaxGuidedSlices) return 0;
    const int64_t min_rows = std::max<int64_t>(kGuidedMinRows, align32(N / (16 * threads) + 31));
    int n = 0;
    b[0] = 0;
    for (int64_t r = 0; r < N;) {
        int64_t r1 = r + std::max(min_rows, align32((N - r) / (2 * threads)));
        if (r1 + kMinRows > N) r1 = N;  // no sliver at the end
        b[++n] = r1;
        r = r1;
    }
    return n;
}

core::Status check_parts(std::span<const LinearPart> parts, int64_t K, int64_t* total, bool* all_kernels) {
    *total = 0;
    *all_kernels = true;
    for (const LinearPart& p : parts) {
        const kernels::ref::WeightView& w = p.linear->w;
        if (w.rows <= 0 || w.cols != K || (!w.data && !p.linear->packed))
            return core::error(core::StatusCode::kInvalidArgument) << "linear: parts must share the input width";
        *total += w.rows;
        *all_kernels = *all_kernels && p.linear->kernel;
    }
    return core::Status::ok();
}

// The task list of the SwiGLU ops: token tiles x slices of F (guided for decode, as linear_group),
// every slice starting at a multiple of 32; body(t0, t1, r0, r1) for each non-empty task, claimed
// by whichever thread is free.
void for_swiglu_tasks(core::ThreadPool& pool, int64_t m, int64_t F,
                      core::FunctionRef<void(int64_t, int64_t, int64_t, int64_t)> body) {
    const int64_t tiles = (m + kTokenTile - 1) / kTokenTile;
    const int64_t want = std::max<int64_t>(1, (pool.num_threads() * 4 + tiles - 1) / tiles);
    int64_t bounds[kMaxGuidedSlices];
    const int64_t guided = tiles == 1 ? guided_slices(F, pool.num_threads(), bounds) : 0;
    const int64_t slices =
        guided ? guided : std::max<int64_t>(1, std::min<int64_t>(want, (F + kMinRows - 1) / kMinRows));
    pool.parallel_tasks(tiles * slices, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t tile = task / slices, s = task % slices;
            int64_t r0 = guided ? bounds[s] : 0, r1 = guided ? bounds[s + 1] : 0;
            if (!guided) slice_rows(F, s, slices, &r0, &r1);
            if (r0 >= r1) continue;
            const int64_t t0 = tile * kTokenTile;
            body(t0, std::min(m, t0 + kTokenTile), r0, r1);
        }
    });
}

}  // namespace

core::Status linear_group(core::ThreadPool& pool, const float* x, int64_t m, std::span<const LinearPart> parts,
                          float* y, std::vector<uint8_t>& scratch) {
    if (parts.empty() || m < 0 || !x || !y) return core::error(core::StatusCode::kInvalidArgument) << "linear: bad arguments";
    if (parts.size() > 8) return core::error(core::StatusCode::kInvalidArgument) << "linear: at most 8 parts";
    const int64_t K = parts[0].linear->w.cols;
    int64_t total = 0;
    bool all_kernels = true;
    KILN_RETURN_IF_ERROR(check_parts(parts, K, &total, &all_kernels));
    if (m == 0) return core::Status::ok();
    if (!all_kernels) return mixed_group(pool, x, m, parts, total, y, scratch);
    const GroupInputs in = quantize_inputs(pool, x, m, K, parts, scratch);

    // Tasks: token tiles x row slices of every part; each part gets slices in proportion to its rows,
    // enough in all to give every thread several tasks, claimed by whichever thread is free
    // (parallel_tasks), so that a thread slowed by the machine's other tenants holds up the op by at
    // most one task (decode on 2 threads: the threads' idle time fell from 10-15% to ~8%).
    const int64_t tiles = (m + kTokenTile - 1) / kTokenTile;
    const int64_t want = std::max<int64_t>(1, (pool.num_threads() * 4 + tiles - 1) / tiles);
    // Decode (one tile): guided slices per part (guided_slices; with 2 threads in-process A/B decode
    // ran +1% (q4_0, q4_k) to +2% (bf16) and +5-6% (q8_0) against 4 x threads equal slices).
    int64_t slices[8], slices_total = 0;
    int64_t bounds[8][kMaxGuidedSlices];
    bool guided = tiles == 1;
    for (size_t i = 0; i < parts.size() && guided; ++i) {
        slices[i] = guided_slices(parts[i].linear->w.rows, pool.num_threads(), bounds[i]);
        guided = slices[i] > 0;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
        const int64_t rows = parts[i].linear->w.rows;
        const int64_t share = std::max<int64_t>(1, (want * rows + total - 1) / total);
        if (!guided) slices[i] = std::max<int64_t>(1, std::min<int64_t>(share, (rows + kMinRows - 1) / kMinRows));
        slices_total += slices[i];
    }
    pool.parallel_tasks(tiles * slices_total, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            int64_t s = task % slices_total, col = 0;
            const int64_t tile = task / slices_total;
            size_t i = 0;
            while (s >= slices[i]) {
                s -= slices[i];
                col += parts[i].linear->w.rows;
                ++i;
            }
            int64_t r0 = guided ? bounds[i][s] : 0, r1 = guided ? bounds[i][s + 1] : 0;
            if (!guided) slice_rows(parts[i].linear->w.rows, s, slices[i], &r0, &r1);
            if (r0 >= r1) continue;
            const int64_t t0 = tile * kTokenTile, t1 = std::min(m, t0 + kTokenTile);
            part_slice(parts[i], in, K, t0, t1, r0, r1, y, total, col);
        }
    });
    return core::Status::ok();
}

core::Status linear_swiglu(core::ThreadPool& pool, const float* x, int64_t m, const Linear& gate, const Linear& up,
                           float* gate_up, float* act, std::vector<uint8_t>& scratch) {
    if (m < 0 || !x || !gate_up || !act) return core::error(core::StatusCode::kInvalidArgument) << "linear: bad arguments";
    const int64_t F = gate.w.rows, K = gate.w.cols;
    if (up.w.rows != F) {
        return core::error(core::StatusCode::kInvalidArgument)
               << "linear_swiglu: gate has " << F << " rows, up " << up.w.rows;
    }
    const LinearPart parts[] = {{&gate, nullptr}, {&up, nullptr}};
    int64_t total = 0;
    bool all_kernels = true;
    KILN_RETURN_IF_ERROR(check_parts(parts, K, &total, &all_kernels));
    if (m == 0) return core::Status::ok();
    if (!cpu::isa_supported(gate.isa))
        return core::error(core::StatusCode::kUnsupported) << "linear_swiglu: this CPU cannot run " << cpu::isa_name(gate.isa);
    if (!all_kernels) {  // the f32 reference path: the two steps apart
        KILN_RETURN_IF_ERROR(linear_group(pool, x, m, parts, gate_up, scratch));
        return silu_mul_rows(pool, gate_up, act, m, F, gate.isa);
    }
    const cpu::SiluMulFn silu = cpu::find_silu_mul_kernel(gate.isa);
    const GroupInputs in = quantize_inputs(pool, x, m, K, parts, scratch);
    // Each task computes its rows of gate and of up, then their SwiGLU while both are in cache.
    for_swiglu_tasks(pool, m, F, [&](int64_t t0, int64_t t1, int64_t r0, int64_t r1) {
        part_slice(parts[0], in, K, t0, t1, r0, r1, gate_up, 2 * F, 0);
        part_slice(parts[1], in, K, t0, t1, r0, r1, gate_up, 2 * F, F);
        for (int64_t t = t0; t < t1; ++t) {
            const float* row = gate_up + t * 2 * F;
            silu(row + r0, row + F + r0, act + t * F + r0, r1 - r0);
        }
    });
    return core::Status::ok();
}

core::Status linear_swiglu_fused(core::ThreadPool& pool, const float* x, int64_t m, const Linear& gate_up,
                                 float* gate_up_out, float* act, std::vector<uint8_t>& scratch) {
    constexpr int64_t B = kSwigluBlock;
    if (m < 0 || !x || !gate_up_out || !act)
        return core::error(core::StatusCode::kInvalidArgument) << "linear: bad arguments";
    const int64_t F = gate_up.w.rows / 2, K = gate_up.w.cols;
    if (gate_up.w.rows % (2 * B) != 0 || !gate_up.packed || !gate_up.kernel) {
        return core::error(core::StatusCode::kInvalidArgument)
               << "linear_swiglu_fused: not a fused gate/up matrix (" << gate_up.w.rows << " rows)";
    }
    if (m == 0) return core::Status::ok();
    if (!cpu::isa_supported(gate_up.isa))
        return core::error(core::StatusCode::kUnsupported)
               << "linear_swiglu: this CPU cannot run " << cpu::isa_name(gate_up.isa);
    const cpu::SiluMulFn silu = cpu::find_silu_mul_kernel(gate_up.isa);
    const LinearPart part{&gate_up, nullptr};
    const GroupInputs in = quantize_inputs(pool, x, m, K, std::span<const LinearPart>(&part, 1), scratch);
    // Slices of F start at multiples of 32 = B, so a task holds whole gate/up block pairs: fused rows
    // [2 r0, 2 r1). Each applies SwiGLU to its blocks while they are in cache.
    for_swiglu_tasks(pool, m, F, [&](int64_t t0, int64_t t1, int64_t r0, int64_t r1) {
        part_slice(part, in, K, t0, t1, 2 * r0, 2 * r1, gate_up_out, 2 * F, 0);
        for (int64_t t = t0; t < t1; ++t) {
            const float* row = gate_up_out + t * 2 * F;
            for (int64_t b = r0; b < r1; b += B) silu(row + 2 * b, row + 2 * b + B, act + t * F + b, B);
        }
    });
    return core::Status::ok();
}

}  // namespace kiln::ops
