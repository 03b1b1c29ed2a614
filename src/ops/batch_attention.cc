// Ragged-batch attention (see batch_attention.h): builds a task list over every sequence, runs it
// on the pool with dynamic scheduling (costliest tasks first), then merges decode splits.
#include "ops/batch_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace kiln::ops {
namespace {

namespace kc = kernels::cpu;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kTokenTile = 16;       // query tokens per prefill task: K/V block reuse vs. task count
constexpr int64_t kDecodeMaxTokens = 4;  // sequences with at most this many new tokens split their keys
constexpr int64_t kDecodeSplitsPerThread = 4;  // from this many splits per thread, a decode task takes every kv head
constexpr int64_t kAllKvHeads = -1;            // Task::kv_head of such a task

struct Task {
    int64_t seq = 0, kv_head = 0;
    int64_t t0 = 0, t1 = 0;  // query tokens of the sequence
    int64_t split = -1;      // >= 0: this split only, to the partial buffer; -1: every split, merged here
    int64_t cost = 0;        // rows x keys, for ordering
};

struct SeqPlan {
    int64_t split0 = 0, split1 = 0;  // splits [split0, split1) hold the sequence's keys
    bool decode_split = false;       // keys split across tasks, merged after
    int64_t part_offset = 0;         // first float of its partials in the shared buffer
};

core::Status invalid(const char* what) {
    return core::error(core::StatusCode::kInvalidArgument) << "batch_attention: " << what;
}

kernels::AttentionShape shape_of(const AttentionSeq& s, const AttentionHeads& h) {
    return {s.num_tokens, h.num_heads, h.num_kv_heads, h.head_dim, h.window, h.softcap};
}

// First key any of the tokens [t0, t1) of `s` attends to.
int64_t first_key(const AttentionSeq& s, const AttentionHeads& h, int64_t t0) {
    const int64_t pos = s.kv.kv_len - s.num_tokens + t0;
    return h.window > 0 ? std::max<int64_t>(0, pos - h.window + 1) : 0;
}

}  // namespace

// A finished row's share of its softmax once the sink's term joins the denominator.
static void apply_sink(float* o, float lse, float sink, int64_t head_dim) {
    const float scale = 1.0f / (1.0f + std::exp(sink - lse));
    for (int64_t d = 0; d < head_dim; ++d) o[d] *= scale;
}

void merge_partial(float* o, float* lse, const float* o_s, float lse_s, int64_t head_dim) {
    if (lse_s == kNegInf) return;
    if (*lse == kNegInf) {
        std::copy(o_s, o_s + head_dim, o);
        *lse = lse_s;
        return;
    }
    const float m = std::max(*lse, lse_s);
    const float a = std::exp(*lse - m), b = std::exp(lse_s - m);
    const float inv = 1.0f / (a + b);
    for (int64_t d = 0; d < head_dim; ++d) o[d] = (a * o[d] + b * o_s[d]) * inv;
    *lse = m + std::log(a + b);
}

core::Status batch_attention(core::ThreadPool& pool, const float* q, int64_t num_rows,
                             std::span<const AttentionSeq> seqs, const AttentionHeads& h, float* out, kc::Isa isa) {
    if (!kc::isa_supported(isa))
        return core::error(core::StatusCode::kUnsupported) << "attention: this CPU cannot run " << kc::isa_name(isa);
    if (h.num_heads <= 0 || h.num_kv_heads <= 0 || h.head_dim <= 0 || h.window < 0 || !(h.softcap >= 0))
        return invalid("bad shape");
    if (h.num_heads % h.num_kv_heads) return invalid("num_heads must be a multiple of num_kv_heads");
    if (!q || !out) return invalid("null pointer");
    const int64_t row_floats = h.num_heads * h.head_dim;
    const auto qa = reinterpret_cast<uintptr_t>(q), oa = reinterpret_cast<uintptr_t>(out);
    const uintptr_t bytes = uintptr_t(num_rows * row_floats) * sizeof(float);
    if (qa < oa + bytes && oa < qa + bytes) return invalid("q and out overlap");
    int64_t rows_seen = 0;
    for (const AttentionSeq& s : seqs) {
        if (s.num_tokens < 0 || s.q_start < 0 || s.q_start + s.num_tokens > num_rows)
            return invalid("rows out of range");
        if (s.kv.kv_len < s.num_tokens) return invalid("kv_len smaller than the number of new tokens");
        if (s.num_tokens > 0 && (!s.kv.k || !s.kv.v)) return invalid("null K/V");
        if (s.kv.block_table && s.kv.block_size <= 0) return invalid("paged cache without a block size");
        rows_seen += s.num_tokens;
    }
    if (rows_seen > num_rows) return invalid("sequences overlap");

    const int64_t S = kAttentionSplitKeys, group = h.num_heads / h.num_kv_heads, hd = h.head_dim;
    // Per calling thread, grown and reused: the plan, the tasks and the decode partials.
    thread_local std::vector<SeqPlan> plans;
    thread_local std::vector<Task> tasks;
    thread_local std::vector<float> part;  // decode partials: per sequence [splits][num_tokens, num_heads] x (hd + 1)
    plans.assign(seqs.size(), SeqPlan{});
    tasks.clear();
    int64_t part_floats = 0;
    bool any_decode_split = false;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const AttentionSeq& s = seqs[i];
        if (s.num_tokens == 0) continue;
        SeqPlan& p = plans[i];
        p.split0 = first_key(s, h, 0) / S;
        p.split1 = (s.kv.kv_len + S - 1) / S;
        const int64_t n_splits = p.split1 - p.split0;
        const int64_t keys = s.kv.kv_len - first_key(s, h, 0);
        if (s.num_tokens <= kDecodeMaxTokens && n_splits > 1) {
            p.decode_split = any_decode_split = true;
            p.part_offset = part_floats;
            part_floats += n_splits * s.num_tokens * h.num_heads * (hd + 1);
            // Long contexts (kDecodeSplitsPerThread splits per thread or more): one task per split
            // runs every kv head in turn, so a thread reads whole cache rows of one key range while
            // they are in its cache (docs/performance.md "Long-context decode"). Shorter ones:
            // split-major (sp, kv head) tasks, so the heads of a split run side by side.
            if (n_splits >= kDecodeSplitsPerThread * pool.num_threads()) {
                for (int64_t sp = p.split0; sp < p.split1; ++sp)
                    tasks.push_back({int64_t(i), kAllKvHeads, 0, s.num_tokens, sp, s.num_tokens * h.num_heads * S});
                continue;
            }
            for (int64_t sp = p.split0; sp < p.split1; ++sp)
                for (int64_t kvh = 0; kvh < h.num_kv_heads; ++kvh)
                    tasks.push_back({int64_t(i), kvh, 0, s.num_tokens, sp, s.num_tokens * group * S});
            continue;
        }
        for (int64_t t0 = 0; t0 < s.num_tokens; t0 += kTokenTile) {
            const int64_t t1 = std::min(s.num_tokens, t0 + kTokenTile);
            const int64_t cost = (t1 - t0) * group * std::min(keys, s.kv.kv_len - s.num_tokens + t1);
            for (int64_t kvh = 0; kvh < h.num_kv_heads; ++kvh) tasks.push_back({int64_t(i), kvh, t0, t1, -1, cost});
        }
    }
    if (tasks.empty()) return core::Status::ok();
    // Costliest first; ties in the order pushed (sequence, split, tile, kv head): a stable sort
    // without std::stable_sort's temporary buffer (the decode loop allocates nothing).
    std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
        if (a.cost != b.cost) return a.cost > b.cost;
        if (a.seq != b.seq) return a.seq < b.seq;
        if (a.split != b.split) return a.split < b.split;
        if (a.t0 != b.t0) return a.t0 < b.t0;
        return a.kv_head < b.kv_head;
    });
    if (part.size() < size_t(part_floats)) part.resize(size_t(part_floats));
    float* const part_base = part.data();
    kc::AttentionFn kernel = kc::find_attention_kernel(isa);
    if (!kernel) kernel = kc::find_attention_kernel(kc::Isa::kRef);  // a build without that level's kernel
    int64_t max_tile = 1;
    for (const AttentionSeq& s : seqs) max_tile = std::max(max_tile, std::min(s.num_tokens, kTokenTile));
    const kernels::AttentionShape widest{max_tile, h.num_heads, h.num_kv_heads, hd, h.window, h.softcap};
    const size_t scratch_floats = kc::attention_scratch_floats(widest, max_tile);
    const size_t tile_floats = size_t(max_tile * h.num_heads * (hd + 2));  // partial o, its lse, the running lse

    std::atomic<int64_t> next{0};
    const int64_t num_tasks = int64_t(tasks.size());
    const Task* const task_list = tasks.data();
    const SeqPlan* const plan_list = plans.data();
    // One chunk per thread, each with its own kernel scratch and tile buffer: slot c of `work`, grown
    // here by the calling thread (so a worker's first task allocates nothing either).
    const int64_t num_slots = std::min<int64_t>(pool.num_threads(), num_tasks);
    const size_t slot_floats = scratch_floats + tile_floats;
    thread_local std::vector<float> work;
    if (work.size() < size_t(num_slots) * slot_floats) work.resize(size_t(num_slots) * slot_floats);
    float* const work_base = work.data();
    pool.parallel_for(num_slots, [&](int64_t c, int64_t) {
        float* const scratch = work_base + size_t(c) * slot_floats;
        float* const tile_buf = scratch + scratch_floats;
        for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < num_tasks;) {
            const Task& t = task_list[i];
            const AttentionSeq& s = seqs[size_t(t.seq)];
            const kernels::AttentionShape shape = shape_of(s, h);
            const float* qs = q + s.q_start * row_floats;
            kc::AttentionTask kt{t.kv_head, t.t0, t.t1, 0, 0};
            if (t.split >= 0) {  // one split of a decode sequence: [num_tokens, num_heads] rows of (hd) and lse
                const SeqPlan& p = plan_list[t.seq];
                const int64_t n_rows = s.num_tokens * h.num_heads;
                float* po = part_base + p.part_offset + (t.split - p.split0) * n_rows * (hd + 1);
                kt.j0 = t.split * S;
                kt.j1 = std::min(s.kv.kv_len, kt.j0 + S);
                for (int64_t kvh = t.kv_head == kAllKvHeads ? 0 : t.kv_head;
                     kvh < (t.kv_head == kAllKvHeads ? h.num_kv_heads : t.kv_head + 1); ++kvh) {
                    kt.kv_head = kvh;
                    kernel(qs, s.kv, shape, kt, po, po + n_rows * hd, scratch);
                }
                continue;
            }
            const int64_t n_rows = (t.t1 - t.t0) * h.num_heads;
            float* po = tile_buf;            // [t1 - t0, num_heads, hd]
            float* plse = po + n_rows * hd;  // [t1 - t0, num_heads]
            float* run_lse = plse + n_rows;  // [t1 - t0, num_heads]
            const int64_t head0 = t.kv_head * group;
            for (int64_t tok = t.t0; tok < t.t1; ++tok) {
                for (int64_t g = 0; g < group; ++g) {
                    float* o = out + ((s.q_start + tok) * h.num_heads + head0 + g) * hd;
                    std::fill(o, o + hd, 0.0f);
                    run_lse[(tok - t.t0) * h.num_heads + head0 + g] = kNegInf;
                }
            }
            const int64_t sp0 = first_key(s, h, t.t0) / S;
            const int64_t sp1 = (s.kv.kv_len - s.num_tokens + t.t1 + S - 1) / S;
            for (int64_t sp = sp0; sp < sp1; ++sp) {
                kt.j0 = sp * S;
                kt.j1 = std::min(s.kv.kv_len, kt.j0 + S);
                kernel(qs, s.kv, shape, kt, po, plse, scratch);
                for (int64_t tok = t.t0; tok < t.t1; ++tok) {
                    for (int64_t g = 0; g < group; ++g) {
                        const int64_t r = (tok - t.t0) * h.num_heads + head0 + g;
                        float* o = out + ((s.q_start + tok) * h.num_heads + head0 + g) * hd;
                        merge_partial(o, run_lse + r, po + r * hd, plse[r], hd);
                    }
                }
            }
            if (h.sinks)
                for (int64_t tok = t.t0; tok < t.t1; ++tok)
                    for (int64_t g = 0; g < group; ++g)
                        apply_sink(out + ((s.q_start + tok) * h.num_heads + head0 + g) * hd,
                                   run_lse[(tok - t.t0) * h.num_heads + head0 + g], h.sinks[head0 + g], hd);
        }
    });
    if (!any_decode_split) return core::Status::ok();
    // Merge the decode splits in split order: one job per (sequence, kv head).
    thread_local std::vector<int64_t> merge_jobs;
    merge_jobs.clear();
    for (size_t i = 0; i < seqs.size(); ++i)
        if (plans[i].decode_split)
            for (int64_t kvh = 0; kvh < h.num_kv_heads; ++kvh) merge_jobs.push_back(int64_t(i) * h.num_kv_heads + kvh);
    const int64_t* const jobs = merge_jobs.data();
    pool.parallel_for(int64_t(merge_jobs.size()), [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
            const int64_t si = jobs[j] / h.num_kv_heads, kvh = jobs[j] % h.num_kv_heads;
            const AttentionSeq& s = seqs[size_t(si)];
            const SeqPlan& p = plan_list[si];
            const int64_t n_rows = s.num_tokens * h.num_heads;
            for (int64_t tok = 0; tok < s.num_tokens; ++tok) {
                for (int64_t g = 0; g < group; ++g) {
                    const int64_t r = tok * h.num_heads + kvh * group + g;
                    float* o = out + (s.q_start * h.num_heads + r) * hd;
                    std::fill(o, o + hd, 0.0f);
                    float lse = kNegInf;
                    for (int64_t sp = p.split0; sp < p.split1; ++sp) {
                        const float* po = part_base + p.part_offset + (sp - p.split0) * n_rows * (hd + 1);
                        merge_partial(o, &lse, po + r * hd, po[n_rows * hd + r], hd);
                    }
                    if (h.sinks) apply_sink(o, lse, h.sinks[kvh * group + g], hd);
                }
            }
        }
    });
    return core::Status::ok();
}

}  // namespace kiln::ops
