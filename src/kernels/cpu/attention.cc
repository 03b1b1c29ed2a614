// Run-time choice of the CPU attention kernel (see attention.h), the scalar kRef kernel and the
// split-KV merge. Generic code: compiled without ISA flags; it reaches the SIMD kernels only through
// avx2_attention_kernel() / avx512_attention_kernel(). The scalar kernel is the tiled online-softmax algorithm of the SIMD
// kernel written as plain loops (same blocks, same per-row order of updates), so it documents the
// algorithm and serves CPUs without AVX2; kernels::ref::attention stays the oracle for both.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/numeric.h"

namespace kiln::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Head h of cache row `row` of a K or V array (KvDtype layouts, kernels/kernel_params.h), as hd f32:
// in place for an f32 cache, else widened into buf (codes times the head's scale for kI8 / kFp8).
const float* kv_vec(const KvSpan& kv, const void* base, int64_t row, int64_t h, int64_t num_kv_heads, int64_t hd,
                    float* buf) {
    const int64_t kv_dim = num_kv_heads * hd;
    if (kv.dtype == KvDtype::kF32) return static_cast<const float*>(base) + row * kv_dim + h * hd;
    if (kv.dtype == KvDtype::kF16) {
        const uint16_t* x = static_cast<const uint16_t*>(base) + row * kv_dim + h * hd;
        for (int64_t d = 0; d < hd; ++d) buf[d] = core::fp16_to_f32(x[d]);
        return buf;
    }
    const uint8_t* r = static_cast<const uint8_t*>(base) + row * (kv_dim + 4 * num_kv_heads);
    float scale;
    std::memcpy(&scale, r + kv_dim + 4 * h, 4);
    const uint8_t* c = r + h * hd;
    for (int64_t d = 0; d < hd; ++d)
        buf[d] = (kv.dtype == KvDtype::kI8 ? float(int8_t(c[d])) : core::fp8_e4m3_to_f32(c[d])) * scale;
    return buf;
}

void ref_attention_task(const float* q, const KvSpan& kv, const AttentionShape& s, const AttentionTask& task,
                        float* out, float* lse, float* scratch) {
    const int64_t hd = s.head_dim, num_heads = s.num_heads, group = s.num_heads / s.num_kv_heads;
    const int64_t first_pos = kv.kv_len - s.num_tokens;
    const float scale = 1.0f / std::sqrt(float(hd));
    const int64_t num_task_tokens = task.t1 - task.t0, rows = num_task_tokens * group;
    if (num_task_tokens <= 0) return;
    float* m = scratch;                         // [rows] running max of the scores
    float* l = m + rows;                        // [rows] running sum of exp(score - m)
    float* p = l + rows;                        // [kAttentionBlockKeys] scores, then probabilities, of one row
    float* kbuf = p + kAttentionBlockKeys + 8;  // [head_dim]: one key widened to f32 (other than f32 caches)
    float* vbuf = kbuf + hd;                    // [head_dim]: one value
    // Key / value j of kv_head as f32: in place for an f32 cache, else widened into kbuf / vbuf.
    auto key = [&](int64_t j) { return kv_vec(kv, kv.k, kv_row(kv, j), task.kv_head, s.num_kv_heads, hd, kbuf); };
    auto value = [&](int64_t j) { return kv_vec(kv, kv.v, kv_row(kv, j), task.kv_head, s.num_kv_heads, hd, vbuf); };
    // out / lse rows are relative to the task's first token (attention.h).
    auto out_idx = [&](int64_t t, int64_t hh) { return (t - task.t0) * num_heads + task.kv_head * group + hh; };
    auto row_out = [&](int64_t t, int64_t hh) { return out + out_idx(t, hh) * hd; };
    auto key_lo = [&](int64_t pos) { return std::max(task.j0, s.window > 0 ? pos - s.window + 1 : int64_t(0)); };
    for (int64_t t = task.t0; t < task.t1; ++t) {
        for (int64_t hh = 0; hh < group; ++hh) std::fill(row_out(t, hh), row_out(t, hh) + hd, 0.0f);
    }
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0f);

    const int64_t a = std::max<int64_t>(0, key_lo(first_pos + task.t0));
    const int64_t b = std::min(task.j1, first_pos + task.t1);
    for (int64_t kb = a / kAttentionBlockKeys * kAttentionBlockKeys; kb < b; kb += kAttentionBlockKeys) {
        for (int64_t t = task.t0; t < task.t1; ++t) {
            const int64_t pos = first_pos + t;
            const int64_t ja = std::max(kb, key_lo(pos));
            const int64_t jb = std::min({kb + kAttentionBlockKeys, pos + 1, task.j1});
            if (ja >= jb) continue;
            for (int64_t hh = 0; hh < group; ++hh) {
                const int64_t r = (t - task.t0) * group + hh;
                const float* qr = q + (t * num_heads + task.kv_head * group + hh) * hd;  // [head_dim]
                float* o = row_out(t, hh);                                               // [head_dim]
                float mx = kNegInf;
                for (int64_t j = ja; j < jb; ++j) {
                    const float* kj = key(j);
                    float dot = 0.0f;
                    for (int64_t d = 0; d < hd; ++d) dot += qr[d] * kj[d];
                    p[j - ja] = s.softcap > 0 ? softcap_score(dot * scale, s.softcap) : dot * scale;
                    mx = std::max(mx, p[j - ja]);
                }
                const float m_new = std::max(m[r], mx);
                const float corr = m[r] == kNegInf ? 0.0f : std::exp(m[r] - m_new);
                float sum = 0.0f;
                for (int64_t j = ja; j < jb; ++j) {
                    p[j - ja] = std::exp(p[j - ja] - m_new);
                    sum += p[j - ja];
                }
                l[r] = l[r] * corr + sum;
                m[r] = m_new;
                for (int64_t d = 0; d < hd; ++d) o[d] *= corr;
                for (int64_t j = ja; j < jb; ++j) {
                    const float* vj = value(j);
                    for (int64_t d = 0; d < hd; ++d) o[d] += p[j - ja] * vj[d];
                }
            }
        }
    }
    for (int64_t t = task.t0; t < task.t1; ++t) {
        for (int64_t hh = 0; hh < group; ++hh) {
            const int64_t r = (t - task.t0) * group + hh;
            float* o = row_out(t, hh);
            if (l[r] > 0.0f) {
                const float inv = 1.0f / l[r];
                for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
            }
            if (lse) lse[out_idx(t, hh)] = l[r] > 0.0f ? m[r] + std::log(l[r]) : kNegInf;
        }
    }
}

}  // namespace

size_t attention_scratch_floats(const AttentionShape& s, int64_t max_task_tokens) {
    const int64_t group = s.num_kv_heads > 0 ? s.num_heads / s.num_kv_heads : 0;
    // m and l per row, scores of up to kAttentionMaxRows rows (a register block), each with slack for
    // 8-wide stores, and one block of keys and values widened to f32 (caches other than f32).
    return size_t(2 * std::max<int64_t>(0, max_task_tokens) * group + kAttentionMaxRows * (kAttentionBlockKeys + 8) +
                  2 * kAttentionBlockKeys * std::max<int64_t>(0, s.head_dim));
}

AttentionFn find_attention_kernel(Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return &ref_attention_task;
        case Isa::kAvx2:
        case Isa::kAvxVnni:  // no integer dots in attention: the AVX2 build
            return avx2_attention_kernel();
        case Isa::kAvx512:
        case Isa::kAvx512Vnni:  // attention has no use for VNNI / BF16 / AMX: the AVX-512 build
        case Isa::kAmx:
            return avx512_attention_kernel();
    }
    return nullptr;
}

AttentionFn best_attention_kernel() {
    static const AttentionFn best = [] {
        for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvx512, Isa::kAvxVnni, Isa::kAvx2}) {
            if (!isa_supported(isa)) continue;
            if (AttentionFn fn = find_attention_kernel(isa)) return fn;
        }
        return find_attention_kernel(Isa::kRef);
    }();
    return best;
}

void attention_merge(const float* part_out, const float* part_lse, int64_t num_splits, int64_t num_rows,
                     int64_t head_dim, float* out, int64_t out_row_stride) {
    for (int64_t i = 0; i < num_rows; ++i) {
        float* o = out + i * out_row_stride;  // [head_dim]
        std::fill(o, o + head_dim, 0.0f);
        float mx = kNegInf;
        for (int64_t k = 0; k < num_splits; ++k) mx = std::max(mx, part_lse[k * num_rows + i]);
        if (mx == kNegInf) continue;
        float wsum = 0.0f;
        for (int64_t k = 0; k < num_splits; ++k) {
            const float lse_k = part_lse[k * num_rows + i];
            if (lse_k == kNegInf) continue;
            const float w = std::exp(lse_k - mx);
            wsum += w;
            const float* po = part_out + (k * num_rows + i) * head_dim;
            for (int64_t d = 0; d < head_dim; ++d) o[d] += w * po[d];
        }
        const float inv = 1.0f / wsum;
        for (int64_t d = 0; d < head_dim; ++d) o[d] *= inv;
    }
}

}  // namespace kiln::kernels::cpu
