// CPU attention kernels (kernels/cpu/attention.h) against the oracle kernels::ref::attention, over a
// grid of (num_heads, num_kv_heads) x head_dim (8, 64, 128, 72 = 9 vectors, 6 = scalar tail only)
// x num_tokens (1, 2, 7, 65, 130) x cached past (0, 1, 63, 200) x window (0, 5, 64) (a quarter of the
// cases with Gemma 2 soft-capping of the scores at 2.5), with q scaled
// by 1 and by 30 (peaked softmax: the running max changes and rescales often). Each case runs:
//  (a) one task per KV head over all tokens and keys;
//  (b) token tiles of 7 and three key splits cut at block multiples, merged by attention_merge;
//  (c) token tiles of 3 over all keys: bit-identical to (a) (rows do not depend on the tiling).
// Tolerance: |got - want| <= tol * (1 + |want|), tol = 1e-5 for O(1) logits (max seen 1.4e-6). With
// q * 30 the logits reach ~±150; fp32 rounding of a logit (~1e-5 absolute here, and the summation
// order differs from the reference's) moves its probability by that relative amount, so both the
// kernel and the reference sit ~1e-5 from exact (measured against float64 at T=65, kv_len=265:
// ref 2.0e-5, avx2 9.5e-6): tol = 1e-4 (max seen 4.4e-5).
// ops::attention is checked with pools of 1, 2 and 3 threads: equal bit for bit across pool sizes
// (the split depends only on the shape) and within tolerance of the reference.
// Paged K/V (KvSpan::block_table): the contiguous cache is scattered into a pool of blocks (sizes 1,
// 3, 16, 64, 100; kv_len never a multiple of the block size except for size 1) through a shuffled
// block table, with spare blocks and unused slots set to NaN (a read of one would poison the
// output). Every kernel, kernels::ref::attention and ops::attention must give bit-identical out and
// lse on the paged cache and on the contiguous one (only addresses differ), and still match the
// reference within the tolerances above.
// Kernels address out / lse from the task's first token: the token-tile runs give every task a
// private buffer of exactly its rows (an out-of-range write fails under ASan) and copy it back.
// ISAs the CPU lacks are skipped.
#include "kernels/cpu/attention.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/ref/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "ops/transformer_ops.h"

namespace kiln::kernels::cpu {
namespace {

using ref::AttentionShape;
using ref::KvSpan;

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

struct Data {
    AttentionShape s;
    int64_t kv_len = 0;
    std::vector<float> q, k, v, want;  // q, want [T, H, D]; k, v [kv_len, KVH, D]
    KvSpan kv() const { return KvSpan{k.data(), v.data(), kv_len}; }
};

Data make_data(const AttentionShape& s, int64_t past, uint32_t seed, float q_scale) {
    Data d;
    d.s = s;
    d.kv_len = past + s.num_tokens;
    d.q = randn(size_t(s.num_tokens * s.num_heads * s.head_dim), seed, q_scale);
    d.k = randn(size_t(d.kv_len * s.num_kv_heads * s.head_dim), seed + 1, 1.0f);
    d.v = randn(size_t(d.kv_len * s.num_kv_heads * s.head_dim), seed + 2, 1.0f);
    d.want.assign(d.q.size(), 0.0f);
    ref::attention(d.q.data(), d.kv(), s, d.want.data());
    return d;
}

std::string describe(const Data& d, uint32_t seed) {
    const AttentionShape& s = d.s;
    return "H=" + std::to_string(s.num_heads) + " KVH=" + std::to_string(s.num_kv_heads) +
           " D=" + std::to_string(s.head_dim) + " T=" + std::to_string(s.num_tokens) +
           " kv_len=" + std::to_string(d.kv_len) + " window=" + std::to_string(s.window) +
           " seed=" + std::to_string(seed);
}

// Fails with the worst element, its index, the max error and the NMSE.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
    double max_err = 0, err2 = 0, ref2 = 0;
    size_t worst = 0;
    bool ok = true;
    for (size_t i = 0; i < want.size(); ++i) {
        const double e = std::fabs(double(got[i]) - double(want[i]));
        err2 += e * e;
        ref2 += double(want[i]) * want[i];
        if (!(e <= tol * (1.0 + std::fabs(want[i])))) ok = false;  // NaN fails too
        if (!(e <= max_err)) {
            max_err = e;
            worst = i;
        }
    }
    EXPECT_TRUE(ok) << what << ": max err " << max_err << " at index " << worst << " (got " << got[worst] << ", want "
                    << want[worst] << "), NMSE " << err2 / (ref2 > 0 ? ref2 : 1.0) << ", tol " << tol;
}

// (a): one task per KV head, all tokens, all keys; lse [T, H] to *lse when not null.
std::vector<float> run_whole(AttentionFn fn, const Data& d, const KvSpan& kv, std::vector<float>* lse = nullptr) {
    const AttentionShape& s = d.s;
    std::vector<float> out(d.q.size(), -7.0f), scratch(attention_scratch_floats(s, s.num_tokens));
    if (lse) lse->assign(size_t(s.num_tokens * s.num_heads), -7.0f);
    for (int64_t kvh = 0; kvh < s.num_kv_heads; ++kvh) {
        AttentionTask task{kvh, 0, s.num_tokens, 0, d.kv_len};
        fn(d.q.data(), kv, s, task, out.data(), lse ? lse->data() : nullptr, scratch.data());
    }
    return out;
}
std::vector<float> run_whole(AttentionFn fn, const Data& d) {
    return run_whole(fn, d, d.kv());
}

// One task per (KV head, tile of `tile` tokens), all keys, each writing a private buffer of exactly
// its tile's rows ([t1 - t0, H, D] and [t1 - t0, H]) whose group rows are copied into out / lse.
std::vector<float> run_tiles(AttentionFn fn, const Data& d, const KvSpan& kv, int64_t tile,
                             std::vector<float>* lse = nullptr) {
    const AttentionShape& s = d.s;
    const int64_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
    std::vector<float> out(d.q.size(), -7.0f), scratch(attention_scratch_floats(s, tile));
    if (lse) lse->assign(size_t(s.num_tokens * s.num_heads), -7.0f);
    for (int64_t kvh = 0; kvh < s.num_kv_heads; ++kvh) {
        for (int64_t t0 = 0; t0 < s.num_tokens; t0 += tile) {
            const int64_t t1 = std::min(s.num_tokens, t0 + tile);
            AttentionTask task{kvh, t0, t1, 0, d.kv_len};
            std::vector<float> own_out(size_t((t1 - t0) * s.num_heads * hd), -7.0f);  // [t1 - t0, H, D]
            std::vector<float> own_lse(size_t((t1 - t0) * s.num_heads), -7.0f);       // [t1 - t0, H]
            fn(d.q.data(), kv, s, task, own_out.data(), own_lse.data(), scratch.data());
            for (int64_t t = t0; t < t1; ++t) {
                for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
                    const int64_t own_row = (t - t0) * s.num_heads + h, row = t * s.num_heads + h;
                    std::copy_n(own_out.begin() + own_row * hd, hd, out.begin() + row * hd);
                    if (lse) (*lse)[size_t(row)] = own_lse[size_t(own_row)];
                }
            }
        }
    }
    return out;
}
std::vector<float> run_tiles(AttentionFn fn, const Data& d, int64_t tile) {
    return run_tiles(fn, d, d.kv(), tile);
}

// (b): token tiles of 7, keys split at two block-aligned cut points, merged. The partial results
// ([3, T, H, D] and [3, T, H]) go to *part_out_copy / *part_lse_copy when not null.
std::vector<float> run_split(AttentionFn fn, const Data& d, const KvSpan& kv,
                             std::vector<float>* part_out_copy = nullptr, std::vector<float>* part_lse_copy = nullptr) {
    const AttentionShape& s = d.s;
    const int64_t rows = s.num_tokens * s.num_heads, hd = s.head_dim, tile = 7;
    const int64_t cut1 = kAttentionBlockKeys, cut2 = 3 * kAttentionBlockKeys;
    const int64_t cuts[4] = {0, cut1, cut2, d.kv_len > cut2 ? d.kv_len : cut2};
    std::vector<float> part_out(size_t(3 * rows * hd), -7.0f), part_lse(size_t(3 * rows), -7.0f);
    std::vector<float> scratch(attention_scratch_floats(s, tile));
    for (int64_t split = 0; split < 3; ++split) {
        for (int64_t kvh = 0; kvh < s.num_kv_heads; ++kvh) {
            for (int64_t t0 = 0; t0 < s.num_tokens; t0 += tile) {
                AttentionTask task{kvh, t0, std::min(s.num_tokens, t0 + tile), cuts[split], cuts[split + 1]};
                const int64_t row0 = split * rows + t0 * s.num_heads;  // out / lse are relative to t0
                fn(d.q.data(), kv, s, task, part_out.data() + row0 * hd, part_lse.data() + row0, scratch.data());
            }
        }
    }
    std::vector<float> out(d.q.size(), -7.0f);
    attention_merge(part_out.data(), part_lse.data(), 3, rows, hd, out.data(), hd);
    if (part_out_copy) *part_out_copy = part_out;
    if (part_lse_copy) *part_lse_copy = part_lse;
    return out;
}
std::vector<float> run_split(AttentionFn fn, const Data& d) {
    return run_split(fn, d, d.kv());
}

void check_isa(Isa isa) {
    if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
    const AttentionFn fn = find_attention_kernel(isa);
    if (!fn) GTEST_FAIL() << "this CPU runs " << isa_name(isa) << " but its kernel was not built";
    const int64_t heads[][2] = {{1, 1}, {4, 4}, {8, 2}, {9, 3}, {6, 1}};
    uint32_t seed = 1000;
    for (const auto& hk : heads) {
        for (int64_t hd : {8, 64, 128, 72, 6}) {
            for (int64_t num_tokens : {1, 2, 7, 65, 130}) {
                for (int64_t past : {0, 1, 63, 200}) {
                    for (int64_t window : {0, 5, 64}) {
                        // Keep the (debug) run short: big shapes only for SmolLM2's heads (9, 3, 64).
                        const int64_t cost = num_tokens * (past + num_tokens) * hk[0] * hd;
                        if (cost > 300000 && !(hd == 64 && hk[0] == 9 && num_tokens * (past + num_tokens) < 20000))
                            continue;
                        const float q_scale = (seed % 3 == 0) ? 30.0f : 1.0f;
                        seed += 7;
                        AttentionShape s{num_tokens, hk[0], hk[1], hd, window};
                        if (seed % 4 == 1) s.softcap = 2.5f;  // Gemma 2's soft-capped scores, on a quarter
                        const Data d = make_data(s, past, seed, q_scale);
                        const float tol = q_scale > 1.0f ? 1e-4f : 1e-5f;
                        const std::string what = std::string(isa_name(isa)) + " " + describe(d, seed) +
                                                 " q_scale=" + std::to_string(q_scale) +
                                                 " softcap=" + std::to_string(s.softcap);
                        const std::vector<float> whole = run_whole(fn, d);
                        expect_close(whole, d.want, tol, what + " whole");
                        // A row's arithmetic must not depend on how tokens are tiled into tasks.
                        if (num_tokens > 1) {
                            EXPECT_EQ(run_tiles(fn, d, 3), whole) << what << " tiles of 3";
                        }
                        expect_close(run_split(fn, d), d.want, tol, what + " split");
                        if (::testing::Test::HasFailure()) return;
                    }
                }
            }
        }
    }
}

TEST(AttentionKernel, RefMatchesReference) {
    check_isa(Isa::kRef);
}
TEST(AttentionKernel, Avx2MatchesReference) {
    check_isa(Isa::kAvx2);
}
TEST(AttentionKernel, Avx512MatchesReference) {
    check_isa(Isa::kAvx512);
}

TEST(AttentionKernel, EmptyKeyRangeGivesZerosAndMinusInfLse) {
    const AttentionShape s{2, 4, 2, 16, 3};
    const Data d = make_data(s, 10, 5, 1.0f);
    std::vector<float> out(d.q.size(), 9.0f), lse(size_t(2 * 4), 9.0f), scratch(attention_scratch_floats(s, 2));
    for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        // Tokens at positions 10, 11 with window 3 see keys 8..11 only: [0, 8) is empty for both.
        AttentionTask task{1, 0, 2, 0, 8};
        const AttentionFn fn = find_attention_kernel(isa);
        ASSERT_NE(fn, nullptr) << isa_name(isa);
        fn(d.q.data(), d.kv(), s, task, out.data(), lse.data(), scratch.data());
        for (int64_t t = 0; t < 2; ++t) {
            for (int64_t h = 2; h < 4; ++h) {
                EXPECT_EQ(lse[size_t(t * 4 + h)], -INFINITY) << isa_name(isa);
                for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(out[size_t((t * 4 + h) * 16 + e)], 0.0f);
            }
            EXPECT_EQ(lse[size_t(t * 4)], 9.0f) << "rows of other KV heads untouched";
        }
    }
}

TEST(AttentionKernel, OpsAttentionAcrossThreadCounts) {
    core::ThreadPool pool1(1), pool2(2), pool3(3);
    struct Case {
        int64_t heads, kv_heads, hd, num_tokens, past, window;
    };
    const Case cases[] = {{9, 3, 64, 1, 0, 0},     {9, 3, 64, 1, 511, 0}, {9, 3, 64, 1, 700, 64},
                          {8, 2, 128, 3, 300, 0},  {9, 3, 64, 130, 0, 0}, {9, 3, 64, 70, 100, 5},
                          {32, 8, 64, 1, 2000, 0}, {6, 1, 72, 33, 40, 0}, {6, 2, 10, 5, 7, 4}};
    uint32_t seed = 77;
    for (const Case& c : cases) {
        for (float q_scale : {1.0f, 30.0f}) {
            const AttentionShape s{c.num_tokens, c.heads, c.kv_heads, c.hd, c.window};
            const Data d = make_data(s, c.past, ++seed, q_scale);
            std::vector<float> got1(d.q.size()), got2(d.q.size()), got3(d.q.size());
            ASSERT_TRUE(ops::attention(pool1, d.q.data(), d.kv(), s, got1.data()).is_ok());
            ASSERT_TRUE(ops::attention(pool2, d.q.data(), d.kv(), s, got2.data()).is_ok());
            ASSERT_TRUE(ops::attention(pool3, d.q.data(), d.kv(), s, got3.data()).is_ok());
            const std::string what = describe(d, seed) + " q_scale=" + std::to_string(q_scale);
            EXPECT_EQ(got1, got2) << what;
            EXPECT_EQ(got1, got3) << what;
            expect_close(got1, d.want, q_scale > 1.0f ? 1e-4f : 1e-5f, what);
        }
    }
}

// ops::attention (ops::batch_attention) at every ISA level this CPU runs: the reference's values,
// and the level reaches the kernel (the scalar kernel's std::exp and the SIMD kernels' exp differ
// in the last bits, so kRef and the best level do not agree bit for bit in every case).
TEST(AttentionKernel, OpsAttentionAtEveryIsa) {
    core::ThreadPool pool(2);
    struct Case {
        int64_t heads, kv_heads, hd, num_tokens, past, window;
    };
    const Case cases[] = {{9, 3, 64, 1, 700, 0}, {8, 2, 128, 3, 300, 0}, {9, 3, 64, 70, 100, 5}, {6, 2, 10, 5, 7, 4}};
    uint32_t seed = 501;
    bool any_differs = false;
    for (const Case& c : cases) {
        const AttentionShape s{c.num_tokens, c.heads, c.kv_heads, c.hd, c.window};
        const Data d = make_data(s, c.past, ++seed, 1.0f);
        std::vector<float> ref_out(d.q.size());
        ASSERT_TRUE(ops::attention(pool, d.q.data(), d.kv(), s, ref_out.data(), Isa::kRef).is_ok());
        expect_close(ref_out, d.want, 1e-5f, describe(d, seed) + " ref");
        for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni}) {
            std::vector<float> got(d.q.size());
            const core::Status st = ops::attention(pool, d.q.data(), d.kv(), s, got.data(), isa);
            if (!isa_supported(isa)) {
                EXPECT_EQ(st.code(), core::StatusCode::kUnsupported) << isa_name(isa);
                continue;
            }
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            expect_close(got, d.want, 1e-5f, describe(d, seed) + " " + isa_name(isa));
            if (isa == kernels::cpu::best_isa()) any_differs = any_differs || got != ref_out;
        }
    }
    if (kernels::cpu::best_isa() != Isa::kRef) {
        EXPECT_TRUE(any_differs) << "the best level gave the scalar kernel's bits: is the ISA ignored?";
    }
}

TEST(AttentionKernel, OpsAttentionInPlace) {
    // out == q is allowed by ops::attention (q is copied first): the same bits as out apart.
    core::ThreadPool pool2(2);
    const AttentionShape s{5, 9, 3, 64, 0};
    const Data d = make_data(s, 20, 321, 1.0f);
    std::vector<float> apart(d.q.size());
    ASSERT_TRUE(ops::attention(pool2, d.q.data(), d.kv(), s, apart.data()).is_ok());
    std::vector<float> buf = d.q;
    ASSERT_TRUE(ops::attention(pool2, buf.data(), d.kv(), s, buf.data()).is_ok());
    EXPECT_EQ(buf, apart);
    expect_close(buf, d.want, 1e-5f, "in place");
}

// d's cache scattered into a block pool: logical block i of the sequence in physical block
// table[i], a shuffled permutation of num_blocks = ceil(kv_len / block_size) + 3 blocks; the spare
// blocks and the slots past kv_len hold NaN.
struct PagedCache {
    int64_t block_size = 0;
    std::vector<float> k, v;     // [num_blocks, block_size, KVH, D]
    std::vector<int32_t> table;  // [ceil(kv_len / block_size)]
    int64_t kv_len = 0;
    KvSpan kv() const { return KvSpan{k.data(), v.data(), kv_len, table.data(), block_size}; }
};

PagedCache make_paged(const Data& d, int64_t block_size, uint32_t seed) {
    const int64_t row = d.s.num_kv_heads * d.s.head_dim;  // floats per token
    const int64_t num_logical = (d.kv_len + block_size - 1) / block_size, num_blocks = num_logical + 3;
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    PagedCache p;
    p.block_size = block_size;
    p.kv_len = d.kv_len;
    p.table.assign(perm.begin(), perm.begin() + num_logical);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    p.k.assign(size_t(num_blocks * block_size * row), nan);
    p.v.assign(p.k.size(), nan);
    for (int64_t j = 0; j < d.kv_len; ++j) {
        const int64_t dst = (int64_t(p.table[size_t(j / block_size)]) * block_size + j % block_size) * row;
        EXPECT_EQ(dst / row, ref::kv_row(p.kv(), j));
        std::copy_n(d.k.begin() + j * row, row, p.k.begin() + dst);
        std::copy_n(d.v.begin() + j * row, row, p.v.begin() + dst);
    }
    return p;
}

// Bitwise equality (NaN-safe, -0.0 != 0.0): the paged runs must repeat every operation.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The paged grid: calls fn(d, paged, what) for block sizes x GQA x head_dim x window x num_tokens.
template <typename Fn>
void for_each_paged_case(Fn fn) {
    const int64_t heads[][2] = {{1, 1}, {2, 2}, {3, 1}, {8, 2}};
    uint32_t seed = 5000;
    for (int64_t block_size : {1, 3, 16, 64, 100}) {
        for (const auto& hk : heads) {
            for (int64_t hd : {64, 80, 24}) {
                for (int64_t window : {0, 70}) {
                    for (int64_t num_tokens : {1, 37}) {
                        // Keep the (debug) run short: 8 heads only at head_dim 64.
                        if (hk[0] == 8 && hd != 64) continue;
                        int64_t past = 150;  // kv_len 151 or 187: a partial last block for block sizes > 1
                        while (block_size > 1 && (past + num_tokens) % block_size == 0) ++past;
                        seed += 11;
                        const float q_scale = (seed % 3 == 0) ? 30.0f : 1.0f;
                        const AttentionShape s{num_tokens, hk[0], hk[1], hd, window};
                        const Data d = make_data(s, past, seed, q_scale);
                        const PagedCache paged = make_paged(d, block_size, seed + 3);
                        const std::string what = describe(d, seed) + " block_size=" + std::to_string(block_size) +
                                                 " q_scale=" + std::to_string(q_scale);
                        fn(d, paged, q_scale, what);
                        if (::testing::Test::HasFailure()) return;
                    }
                }
            }
        }
    }
}

void check_paged_isa(Isa isa) {
    if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
    const AttentionFn fn = find_attention_kernel(isa);
    if (!fn) GTEST_FAIL() << "this CPU runs " << isa_name(isa) << " but its kernel was not built";
    for_each_paged_case([&](const Data& d, const PagedCache& paged, float q_scale, const std::string& case_what) {
        const std::string what = std::string(isa_name(isa)) + " " + case_what;
        const float tol = q_scale > 1.0f ? 1e-4f : 1e-5f;
        std::vector<float> lse_c, lse_p;
        const std::vector<float> whole_c = run_whole(fn, d, d.kv(), &lse_c);
        const std::vector<float> whole_p = run_whole(fn, d, paged.kv(), &lse_p);
        EXPECT_TRUE(same_bits(whole_p, whole_c)) << what << " whole out";
        EXPECT_TRUE(same_bits(lse_p, lse_c)) << what << " whole lse";
        expect_close(whole_p, d.want, tol, what + " whole");

        const std::vector<float> tiles_c = run_tiles(fn, d, d.kv(), 5, &lse_c);
        const std::vector<float> tiles_p = run_tiles(fn, d, paged.kv(), 5, &lse_p);
        EXPECT_TRUE(same_bits(tiles_p, tiles_c)) << what << " tiles out";
        EXPECT_TRUE(same_bits(lse_p, lse_c)) << what << " tiles lse";
        EXPECT_TRUE(same_bits(tiles_p, whole_p)) << what << " tiles of 5 vs whole";

        std::vector<float> part_out_c, part_out_p;
        const std::vector<float> split_c = run_split(fn, d, d.kv(), &part_out_c, &lse_c);
        const std::vector<float> split_p = run_split(fn, d, paged.kv(), &part_out_p, &lse_p);
        EXPECT_TRUE(same_bits(part_out_p, part_out_c)) << what << " split partial out";
        EXPECT_TRUE(same_bits(lse_p, lse_c)) << what << " split partial lse";
        EXPECT_TRUE(same_bits(split_p, split_c)) << what << " split merged";
        expect_close(split_p, d.want, tol, what + " split");
    });
}

TEST(AttentionKernel, RefPagedBitIdenticalToContiguous) {
    check_paged_isa(Isa::kRef);
}
TEST(AttentionKernel, Avx2PagedBitIdenticalToContiguous) {
    check_paged_isa(Isa::kAvx2);
}
TEST(AttentionKernel, Avx512PagedBitIdenticalToContiguous) {
    check_paged_isa(Isa::kAvx512);
}

TEST(AttentionKernel, ReferencePagedBitIdenticalToContiguous) {
    for_each_paged_case([&](const Data& d, const PagedCache& paged, float, const std::string& what) {
        std::vector<float> got(d.q.size(), -7.0f);
        ref::attention(d.q.data(), paged.kv(), d.s, got.data());
        EXPECT_TRUE(same_bits(got, d.want)) << what;
    });
}

TEST(AttentionKernel, OpsAttentionPagedBitIdenticalToContiguous) {
    core::ThreadPool pool2(2);
    for_each_paged_case([&](const Data& d, const PagedCache& paged, float q_scale, const std::string& what) {
        std::vector<float> got_c(d.q.size()), got_p(d.q.size());
        ASSERT_TRUE(ops::attention(pool2, d.q.data(), d.kv(), d.s, got_c.data()).is_ok());
        ASSERT_TRUE(ops::attention(pool2, d.q.data(), paged.kv(), d.s, got_p.data()).is_ok());
        EXPECT_TRUE(same_bits(got_p, got_c)) << what;
        expect_close(got_p, d.want, q_scale > 1.0f ? 1e-4f : 1e-5f, what);
    });
    float dummy[64] = {};
    const int32_t table[1] = {0};
    const KvSpan bad{dummy, dummy, 1, table, 0};
    EXPECT_FALSE(ops::attention(pool2, dummy, bad, AttentionShape{1, 1, 1, 8, 0}, dummy + 32).is_ok())
        << "block_size 0 with a block table";
}

}  // namespace
}  // namespace kiln::kernels::cpu

namespace kiln::kernels::cpu {
namespace {

// The f16, int8 and fp8 KV caches: every kernel (and the reference) on a paged cache of those rows
// (kernels/ref kv_store_row) gives exactly what it gives on the f32 cache holding what the rows read
// back as (kv_load), since widening is exact (codes times the head's scale, one rounding, in every
// kernel) and the arithmetic after it is the f32 path's.
void check_widened_cache(Isa isa, KvDtype dt) {
    if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
    const AttentionFn fn = find_attention_kernel(isa);
    if (!fn) GTEST_FAIL() << "this CPU runs " << isa_name(isa) << " but its kernel was not built";
    for_each_paged_case([&](const Data& d0, const PagedCache& paged0, float q_scale, const std::string& case_what) {
        const std::string what = std::string(isa_name(isa)) + " " + ref::kv_dtype_name(dt) + " " + case_what;
        const int64_t kvh = d0.s.num_kv_heads, hd = d0.s.head_dim, row = kvh * hd;
        const int64_t row_bytes = kv_row_bytes(dt, kvh, hd);
        // rows of floats -> the stored rows' bytes, and what they read back as
        auto store = [&](const std::vector<float>& f) {
            std::vector<uint8_t> bytes(f.size() / size_t(row) * size_t(row_bytes));
            for (size_t r = 0; r < f.size() / size_t(row); ++r)
                ref::kv_store_row(dt, f.data() + r * size_t(row), kvh, hd, bytes.data() + r * size_t(row_bytes));
            return bytes;
        };
        auto read_back = [&](const std::vector<float>& f) {
            const std::vector<uint8_t> bytes = store(f);
            std::vector<float> out(f.size());
            for (size_t r = 0; r < f.size() / size_t(row); ++r)
                for (int64_t h = 0; h < kvh; ++h)
                    for (int64_t d = 0; d < hd; ++d)
                        out[r * size_t(row) + size_t(h * hd + d)] =
                            ref::kv_load(dt, bytes.data() + r * size_t(row_bytes), kvh, hd, h, d);
            return out;
        };
        Data d = d0;  // the f32 cache of the read-back values, and its reference output
        d.k = read_back(d0.k);
        d.v = read_back(d0.v);
        ref::attention(d.q.data(), d.kv(), d.s, d.want.data());
        const std::vector<uint8_t> kq = store(paged0.k), vq = store(paged0.v);
        KvSpan stored = paged0.kv();
        stored.k = kq.data();
        stored.v = vq.data();
        stored.dtype = dt;
        std::vector<float> lse_f, lse_h;
        const std::vector<float> want = run_whole(fn, d, d.kv(), &lse_f);
        const std::vector<float> got = run_whole(fn, d, stored, &lse_h);
        EXPECT_TRUE(same_bits(got, want)) << what << " whole out";
        EXPECT_TRUE(same_bits(lse_h, lse_f)) << what << " whole lse";
        EXPECT_TRUE(same_bits(run_tiles(fn, d, stored, 5, &lse_h), run_tiles(fn, d, d.kv(), 5, &lse_f))) << what;
        std::vector<float> ref_stored(d.q.size());
        ref::attention(d.q.data(), stored, d.s, ref_stored.data());
        EXPECT_TRUE(same_bits(ref_stored, d.want)) << what << " reference";
        // And close to the f32 cache's output: the quantization error only (values ~N(0, 1); measured
        // worst 0.013 int8, 0.068 fp8; a wrong scale or code is O(1)). Not with q_scale 30: there the
        // softmax is nearly one-hot and a small score error may pick another key.
        if (dt != KvDtype::kF16 && q_scale == 1.0f) {
            float worst = 0.0f;
            for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - d0.want[i]));
            EXPECT_LT(worst, dt == KvDtype::kI8 ? 0.03f : 0.15f) << what << " against the f32 cache";
        }
    });
}

// kernels/ref kv_store_row's rules on one row of three heads: the head's largest magnitude becomes
// code +-127 (int8) or +-448 (fp8) with scale amax / 127 or / 448, the others round to nearest, and an
// all-zero head stores scale 0 and zero codes; kv_load reads code * scale.
TEST(KvQuant, StoreRowFollowsTheRules) {
    const int64_t kvh = 3, hd = 8;
    const std::vector<float> x = {0.5f, -2.0f, 1.0f, 0.25f, 0.0f, 0.01f, -0.7f, 1.99f,  // head 0: amax 2
                                  0,    0,     0,    0,     0,    0,     0,     0,       // head 1: zeros
                                  3.0f, 1.0f,  -1.5f, 0.1f, 0,    0,     0,     2.9f};  // head 2: amax 3
    for (KvDtype dt : {KvDtype::kI8, KvDtype::kFp8}) {
        const float top = dt == KvDtype::kI8 ? 127.0f : 448.0f;
        std::vector<uint8_t> row(size_t(kv_row_bytes(dt, kvh, hd)), 0xcd);
        ASSERT_EQ(row.size(), size_t(kvh * hd + 4 * kvh));
        ref::kv_store_row(dt, x.data(), kvh, hd, row.data());
        for (int64_t h = 0; h < kvh; ++h) {
            float amax = 0.0f, scale;
            for (int64_t d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[size_t(h * hd + d)]));
            std::memcpy(&scale, row.data() + kvh * hd + 4 * h, 4);
            EXPECT_EQ(scale, amax / top) << ref::kv_dtype_name(dt) << " head " << h;
            for (int64_t d = 0; d < hd; ++d) {
                const float v = x[size_t(h * hd + d)];
                const uint8_t code = row[size_t(h * hd + d)];
                const float got = ref::kv_load(dt, row.data(), kvh, hd, h, d);
                if (amax == 0.0f) {
                    EXPECT_EQ(code, 0);
                    EXPECT_EQ(got, 0.0f);
                    continue;
                }
                const float want_code = dt == KvDtype::kI8 ? std::nearbyint(v / scale) : 0.0f;
                if (dt == KvDtype::kI8) EXPECT_EQ(float(int8_t(code)), want_code) << h << "," << d;
                if (dt == KvDtype::kFp8) EXPECT_EQ(code, core::f32_to_fp8_e4m3(v / scale)) << h << "," << d;
                if (std::fabs(v) == amax) EXPECT_EQ(std::fabs(got), amax * (top * scale / amax)) << h << "," << d;
                EXPECT_NEAR(got, v, dt == KvDtype::kI8 ? 0.5f * scale : 0.0625f * std::fabs(v) + 1e-6f) << h << "," << d;
            }
        }
    }
    // Ties round to even: with amax 127 the scale is exactly 1 and the codes are the values rounded.
    const float ties[8] = {127.0f, 2.5f, -3.5f, 0.5f, 1.5f, -0.5f, 126.5f, -126.5f};
    const int8_t want_ties[8] = {127, 2, -4, 0, 2, 0, 126, -126};
    std::vector<uint8_t> t8(size_t(kv_row_bytes(KvDtype::kI8, 1, 8)));
    ref::kv_store_row(KvDtype::kI8, ties, 1, 8, t8.data());
    for (int d = 0; d < 8; ++d) EXPECT_EQ(int8_t(t8[size_t(d)]), want_ties[d]) << ties[d];
    std::vector<uint8_t> h16(size_t(kv_row_bytes(KvDtype::kF16, kvh, hd)));
    ref::kv_store_row(KvDtype::kF16, x.data(), kvh, hd, h16.data());
    EXPECT_EQ(ref::kv_load(KvDtype::kF16, h16.data(), kvh, hd, 0, 5), core::fp16_to_f32(core::f32_to_fp16(0.01f)));
    EXPECT_EQ(ref::parse_kv_dtype("fp8_e4m3"), KvDtype::kFp8);
    EXPECT_EQ(ref::parse_kv_dtype("int8"), KvDtype::kI8);
    EXPECT_FALSE(ref::parse_kv_dtype("int4"));
}

TEST(AttentionKernel, WidenedCachesEqualF32OfTheirValues) {
    for (KvDtype dt : {KvDtype::kF16, KvDtype::kI8, KvDtype::kFp8}) {
        check_widened_cache(Isa::kRef, dt);
        if (isa_supported(Isa::kAvx2)) check_widened_cache(Isa::kAvx2, dt);
        if (isa_supported(Isa::kAvx512)) check_widened_cache(Isa::kAvx512, dt);
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
