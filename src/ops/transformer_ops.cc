// Threaded transformer op front-ends over kernels/ref (see transformer_ops.h).
#include "ops/transformer_ops.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/activation.h"
#include "kernels/ref/dequant.h"
#include "ops/batch_attention.h"

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
    if (!kernels::ref::weight_view_supported(w))
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

Status add_rmsnorm(core::ThreadPool& pool, float* x, const float* delta, const float* weight, float* y, int64_t m,
                   int64_t n, float eps) {
    if (m < 0 || n <= 0) return invalid("add_rmsnorm", "bad shape");
    if (!x || !delta || !weight || !y) return invalid("add_rmsnorm", "null pointer");
    pool.parallel_for(m, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            float* row = x + i * n;
            const float* d = delta + i * n;
            for (int64_t j = 0; j < n; ++j) row[j] += d[j];
            kernels::ref::rmsnorm(row, weight, y + i * n, n, eps);
        }
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

// The SwiGLU kernel of isa; an error when this CPU cannot run it.
static core::Result<kernels::cpu::SiluMulFn> silu_kernel(const char* op, kernels::cpu::Isa isa) {
    if (!kernels::cpu::isa_supported(isa))
        return core::error(StatusCode::kUnsupported) << op << ": this CPU cannot run " << kernels::cpu::isa_name(isa);
    return kernels::cpu::find_silu_mul_kernel(isa);
}

Status silu_mul(core::ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n,
                kernels::cpu::Isa isa) {
    if (n < 0) return invalid("silu_mul", "bad shape");
    KILN_ASSIGN_OR_RETURN(const kernels::cpu::SiluMulFn fn, silu_kernel("silu_mul", isa));
    pool.parallel_for(n, [&](int64_t b, int64_t e) { fn(gate + b, up + b, out + b, e - b); }, 4096);
    return Status::ok();
}

Status silu_mul_rows(core::ThreadPool& pool, const float* gate_up, float* out, int64_t m, int64_t n,
                     kernels::cpu::Isa isa) {
    if (m < 0 || n < 0) return invalid("silu_mul_rows", "bad shape");
    if (!gate_up || !out) return invalid("silu_mul_rows", "null pointer");
    KILN_ASSIGN_OR_RETURN(const kernels::cpu::SiluMulFn fn, silu_kernel("silu_mul_rows", isa));
    // Few rows (decode): split each row into column slices so every thread gets work.
    const int64_t slices = m >= pool.num_threads() ? 1 : std::max<int64_t>(1, n / 1024);
    pool.parallel_for(m * slices, [&](int64_t b, int64_t e) {
        for (int64_t task = b; task < e; ++task) {
            const int64_t t = task / slices, s = task % slices;
            const int64_t c0 = n * s / slices, c1 = n * (s + 1) / slices;
            const float* row = gate_up + t * 2 * n;
            fn(row + c0, row + n + c0, out + t * n + c0, c1 - c0);
        }
    });
    return Status::ok();
}

Status attention(core::ThreadPool& pool, const float* q, const KvSpan& kv, const AttentionShape& s, float* out,
                 kernels::cpu::Isa isa) {
    if (s.num_tokens < 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 || s.window < 0)
        return invalid("attention", "bad shape");
    if (s.num_heads % s.num_kv_heads) return invalid("attention", "num_heads must be a multiple of num_kv_heads");
    if (kv.kv_len < s.num_tokens) return invalid("attention", "kv_len smaller than the number of new tokens");
    if (!q || !out || !kv.k || !kv.v) return invalid("attention", "null pointer");
    if (kv.block_table && kv.block_size <= 0) return invalid("attention", "paged KV cache needs block_size > 0");
    if (s.num_tokens == 0) return Status::ok();
    // One sequence of ops::batch_attention (the same arithmetic as the serving engine's batches).
    const AttentionSeq seq{kv, 0, s.num_tokens};
    const AttentionHeads heads{s.num_heads, s.num_kv_heads, s.head_dim, s.window};
    const size_t num_floats = size_t(s.num_tokens * s.num_heads * s.head_dim);
    const auto q_addr = reinterpret_cast<uintptr_t>(q), out_addr = reinterpret_cast<uintptr_t>(out);
    if (q_addr < out_addr + num_floats * 4 && out_addr < q_addr + num_floats * 4) {  // in place: q copied first
        std::vector<float> q_copy(q, q + num_floats);
        return batch_attention(pool, q_copy.data(), s.num_tokens, std::span<const AttentionSeq>(&seq, 1), heads, out,
                               isa);
    }
    return batch_attention(pool, q, s.num_tokens, std::span<const AttentionSeq>(&seq, 1), heads, out, isa);
}

}  // namespace kiln::ops
