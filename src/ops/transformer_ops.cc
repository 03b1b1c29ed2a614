// Threaded transformer op front-ends over kernels/ref (see transformer_ops.h).
#include "ops/transformer_ops.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/attention.h"
#include "kernels/ref/dequant.h"

namespace kiln::ops {
namespace {

using core::Status;
using core::StatusCode;

constexpr int64_t kTileM = 16;  // rows of x per matmul tile: a dequantized W row is reused this often

Status invalid(const char* op, const char* what) {
    return core::error(StatusCode::kInvalidArgument) << op << ": " << what;
}

}  // namespace

Status matmul(core::ThreadPool& pool, const float* x, int64_t m, const WeightView& w, const float* bias, float* y) {
    if (m < 0 || w.rows <= 0 || w.cols <= 0) return invalid("matmul", "empty or negative shape");
    if (!x || !y || !w.data) return invalid("matmul", "null pointer");
    if (!kernels::ref::dequant_supported(w.dtype))
        return core::error(StatusCode::kUnsupported) << "matmul: weight dtype " << core::dtype_name(w.dtype);
    auto bytes = core::dtype_bytes(w.dtype, uint64_t(w.cols));
    if (!bytes || *bytes != w.row_bytes) return invalid("matmul", "row_bytes does not match dtype and cols");
    if (m == 0) return Status::ok();
    const int64_t m_tiles = (m + kTileM - 1) / kTileM;
    // Enough N chunks per M tile to keep every thread busy, each at least 16 rows of W.
    const int64_t n_chunks = std::max<int64_t>(1, std::min<int64_t>((w.rows + 15) / 16, pool.num_threads() * 4));
    pool.parallel_for(m_tiles * n_chunks, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t nc = task % n_chunks, mt = task / n_chunks;
            const int64_t n0 = w.rows * nc / n_chunks, n1 = w.rows * (nc + 1) / n_chunks;
            const int64_t m0 = mt * kTileM, m1 = std::min(m, m0 + kTileM);
            kernels::ref::matmul_tile(x, w, bias, y, m, m0, m1, n0, n1);
        }
    });
    return Status::ok();
}

Status rmsnorm(core::ThreadPool& pool, const float* x, const float* weight, float* y, int64_t m, int64_t n, float eps) {
    if (m < 0 || n <= 0) return invalid("rmsnorm", "bad shape");
    if (!x || !weight || !y) return invalid("rmsnorm", "null pointer");
    pool.parallel_for(m, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) kernels::ref::rmsnorm(x + i * n, weight, y + i * n, n, eps);
    });
    return Status::ok();
}

Status rope(core::ThreadPool& pool, float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
            const int32_t* positions, const std::vector<double>& inv_freq) {
    if (num_tokens < 0 || num_heads <= 0 || head_dim <= 0 || head_dim % 2)
        return invalid("rope", "bad shape (head_dim must be even)");
    if (int64_t(inv_freq.size()) != head_dim / 2) return invalid("rope", "inv_freq must hold head_dim/2 values");
    pool.parallel_for(num_tokens, [&](int64_t b, int64_t e) {
        kernels::ref::rope(x + b * num_heads * head_dim, e - b, num_heads, head_dim, positions + b, inv_freq);
    });
    return Status::ok();
}

Status silu_mul(core::ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n) {
    if (n < 0) return invalid("silu_mul", "bad shape");
    pool.parallel_for(
        n, [&](int64_t b, int64_t e) { kernels::ref::silu_mul(gate + b, up + b, out + b, e - b); }, 4096);
    return Status::ok();
}

Status silu_mul_rows(core::ThreadPool& pool, const float* gate_up, float* out, int64_t m, int64_t n) {
    if (m < 0 || n < 0) return invalid("silu_mul_rows", "bad shape");
    if (!gate_up || !out) return invalid("silu_mul_rows", "null pointer");
    // Few rows (decode): split each row into column slices so every thread gets work.
    const int64_t slices = m >= pool.num_threads() ? 1 : std::max<int64_t>(1, n / 1024);
    pool.parallel_for(m * slices, [&](int64_t b, int64_t e) {
        for (int64_t task = b; task < e; ++task) {
            const int64_t t = task / slices, s = task % slices;
            const int64_t c0 = n * s / slices, c1 = n * (s + 1) / slices;
            const float* row = gate_up + t * 2 * n;
            kernels::ref::silu_mul(row + c0, row + n + c0, out + t * n + c0, c1 - c0);
        }
    });
    return Status::ok();
}

Status attention(core::ThreadPool& pool, const float* q, const KvSpan& kv, const AttentionShape& s, float* out) {
    if (s.num_tokens < 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 || s.window < 0)
        return invalid("attention", "bad shape");
    if (s.num_heads % s.num_kv_heads) return invalid("attention", "num_heads must be a multiple of num_kv_heads");
    if (kv.kv_len < s.num_tokens) return invalid("attention", "kv_len smaller than the number of new tokens");
    if (!q || !out || !kv.k || !kv.v) return invalid("attention", "null pointer");
    if (s.num_tokens == 0) return Status::ok();
    namespace kc = kernels::cpu;
    const size_t num_floats = size_t(s.num_tokens * s.num_heads * s.head_dim);
    const auto q_addr = reinterpret_cast<uintptr_t>(q), out_addr = reinterpret_cast<uintptr_t>(out);
    const bool overlap = q_addr < out_addr + num_floats * 4 && out_addr < q_addr + num_floats * 4;
    if (kc::best_isa() == kc::Isa::kRef || s.head_dim % 8 != 0 || overlap) {
        // No SIMD kernel, a head_dim no real model uses, or out aliasing q (the tiled kernel clears
        // its output rows before reading q): the reference rows, bit-identical to
        // kernels::ref::attention for any thread count.
        pool.parallel_for(s.num_tokens * s.num_heads, [&](int64_t b, int64_t e) {
            std::vector<float> scores(size_t(kv.kv_len));  // [kv_len]
            kernels::ref::attention_rows(q, kv, s, out, b, e, scores.data());
        });
        return Status::ok();
    }
    // Tasks are (kv_head, query-token tile[, key split]): each streams its K/V blocks once for all
    // query heads of the group. The decomposition depends only on the shape, never on the thread
    // count, so results are bit-identical for any pool size. Few tokens (decode) would leave threads
    // idle with only num_kv_heads tasks, so their keys are also split into aligned ranges of
    // kSplitKeys (flash-decoding) whose partial results are merged by their log-sum-exp.
    constexpr int64_t kTokenTile = 16;   // query tokens per task: K/V block reuse vs. task count
    constexpr int64_t kSplitKeys = 128;  // keys per split-KV range (a multiple of the block size)
    constexpr int64_t kSplitMaxTokens = 4;
    const kc::AttentionFn kernel = kc::best_attention_kernel();
    const int64_t first_pos = kv.kv_len - s.num_tokens;
    const int64_t key_lo = s.window > 0 ? std::max<int64_t>(0, first_pos - s.window + 1) : 0;
    const int64_t split0 = key_lo / kSplitKeys, split1 = (kv.kv_len + kSplitKeys - 1) / kSplitKeys;
    const int64_t num_splits = s.num_tokens <= kSplitMaxTokens ? split1 - split0 : 1;
    const int64_t tile = num_splits > 1 ? s.num_tokens : kTokenTile;
    const int64_t num_tiles = (s.num_tokens + tile - 1) / tile;
    const int64_t num_tasks = num_tiles * s.num_kv_heads * num_splits;
    const int64_t rows = s.num_tokens * s.num_heads;
    // [num_splits, num_tokens, num_heads, head_dim], [num_splits, rows]: per calling thread, grown
    // to the largest need and reused, so decode steps allocate nothing once warm.
    thread_local std::vector<float> part_out, part_lse;
    if (num_splits > 1) {
        const size_t out_floats = size_t(num_splits * rows * s.head_dim), lse_floats = size_t(num_splits * rows);
        if (part_out.size() < out_floats) part_out.resize(out_floats);
        if (part_lse.size() < lse_floats) part_lse.resize(lse_floats);
    }
    // Plain pointers for the workers: inside the lambda a thread_local name would be their own copy.
    float* const partial_out = part_out.data();
    float* const partial_lse = part_lse.data();
    const size_t scratch_floats = kc::attention_scratch_floats(s, tile);
    std::atomic<int64_t> next_task{0};
    // Dynamic scheduling, latest (longest, under the causal mask) token tiles first.
    pool.parallel_for(std::min<int64_t>(pool.num_threads(), num_tasks), [&](int64_t, int64_t) {
        thread_local std::vector<float> scratch;
        if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
        for (int64_t i; (i = next_task.fetch_add(1, std::memory_order_relaxed)) < num_tasks;) {
            kc::AttentionTask task;
            task.kv_head = i % s.num_kv_heads;
            const int64_t tile_idx = num_tiles - 1 - (i / s.num_kv_heads) % num_tiles;
            const int64_t split = i / (s.num_kv_heads * num_tiles);
            task.t0 = tile_idx * tile;
            task.t1 = std::min(s.num_tokens, task.t0 + tile);
            if (num_splits > 1) {
                task.j0 = (split0 + split) * kSplitKeys;
                task.j1 = std::min(kv.kv_len, task.j0 + kSplitKeys);
                kernel(q, kv, s, task, partial_out + split * rows * s.head_dim, partial_lse + split * rows,
                       scratch.data());
            } else {
                task.j1 = kv.kv_len;
                kernel(q, kv, s, task, out, nullptr, scratch.data());
            }
        }
    });
    if (num_splits > 1)
        kc::attention_merge(partial_out, partial_lse, num_splits, rows, s.head_dim, out, s.head_dim);
    return Status::ok();
}

}  // namespace kiln::ops
