// kernels/cuda decode_attention (split-KV over the paged pool) against kernels/ref attention on the
// same pool: GQA groups 1-16, head_dim 8 to 128, f32 and f16 caches, sequences of 1 to ~1000
// tokens in one batch (splits that are empty for the shorter ones), shuffled block tables, a
// sliding window; and prompt chunks as one query per token sharing their sequence's block table
// (table_rows), as the GPU model runs prefill on f32 caches; and the tensor-core prefill kernel
// (prefill_attention) on ragged prompt chunks over an f16 pool. Without a device only the argument
// checks run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/ref/transformer.h"

namespace kiln::kernels::cuda {
namespace {

using test::upload;
using kernels::KvDtype;

// decode_attention on `b` over q (device), out filled with NaN first; the output downloaded
// (n floats), or empty after a test failure.
std::vector<float> run_decode(const DecodeAttentionBatch& b, const DeviceBuffer& dq, size_t n) {
    DeviceBuffer ws = upload(std::vector<float>(decode_attention_workspace_floats(b)));
    DeviceBuffer dout = upload(std::vector<float>(n, NAN));
    const core::Status st = decode_attention(dq.as<float>(), b, dout.as<float>(), ws.as<float>());
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) return {};
    std::vector<float> got(n);
    EXPECT_TRUE(dout.copy_to_host(got.data(), n * 4).is_ok());
    return got;
}

TEST(CudaAttention, ArgumentChecks) {
    DecodeAttentionBatch b;
    b.num_seqs = 1;
    b.num_heads = 8;
    b.num_kv_heads = 3;  // not a divisor
    b.head_dim = 64;
    b.block_size = 16;
    b.max_blocks_per_seq = 4;
    b.max_kv_len = 64;
    float* p = reinterpret_cast<float*>(16);  // never dereferenced
    EXPECT_EQ(decode_attention(p, b, p, p).code(), core::StatusCode::kInvalidArgument);
    b.num_kv_heads = 2;
    b.max_kv_len = 65;  // more than the block tables hold
    EXPECT_EQ(decode_attention(p, b, p, p).code(), core::StatusCode::kInvalidArgument);
    b.max_kv_len = 64;
    b.head_dim = 96;
    EXPECT_EQ(decode_attention(p, b, p, p).code(), core::StatusCode::kInvalidArgument);  // null K/V first
    b.k = b.v = p;
    b.block_tables = b.kv_lens = reinterpret_cast<const int32_t*>(16);
    EXPECT_EQ(decode_attention(p, b, p, p).code(), core::StatusCode::kUnsupported);  // head_dim 96
    b.head_dim = 64;
    b.num_heads = 34;  // 17 query heads per KV head
    EXPECT_EQ(decode_attention(p, b, p, p).code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(decode_attention_workspace_floats(b), size_t(1 * 1 * 34 * 65));
}

TEST(CudaAttention, DecodeMatchesReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    struct Heads {
        int64_t heads, kv_heads, dim;
    };
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const std::vector<int32_t> kv_lens = {1, 300, 1000};
    const int64_t bs = 16, max_blocks = (1000 + bs - 1) / bs, num_seqs = int64_t(kv_lens.size());
    for (const Heads h : {Heads{8, 2, 64}, Heads{32, 8, 128}, Heads{9, 3, 64}, Heads{16, 1, 128}, Heads{8, 4, 8},
                          Heads{6, 2, 32}, Heads{4, 4, 16}, Heads{4, 4, 64}, Heads{8, 4, 128}, Heads{32, 4, 64}}) {
        for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kI8, KvDtype::kFp8}) {
            for (int64_t window : {0, 100}) {
                const int64_t num_blocks = num_seqs * max_blocks, row = h.kv_heads * h.dim;
                const int64_t row_bytes = kernels::kv_row_bytes(dt, h.kv_heads, h.dim);
                std::vector<float> kf(size_t(num_blocks * bs * row)), vf(kf.size());
                for (float& x : kf) x = dist(rng);
                for (float& x : vf) x = dist(rng);
                // The rows as the CPU stores them (kernels/ref kv_store_row); the reference reads the same.
                std::vector<uint8_t> kb(size_t(num_blocks * bs * row_bytes)), vb(kb.size());
                for (int64_t r = 0; r < num_blocks * bs; ++r) {
                    ref::kv_store_row(dt, kf.data() + r * row, h.kv_heads, h.dim, kb.data() + r * row_bytes);
                    ref::kv_store_row(dt, vf.data() + r * row, h.kv_heads, h.dim, vb.data() + r * row_bytes);
                }
                std::vector<int32_t> perm = std::vector<int32_t>(size_t(num_blocks));
                for (int64_t i = 0; i < num_blocks; ++i) perm[size_t(i)] = int32_t(i);
                std::shuffle(perm.begin(), perm.end(), rng);
                std::vector<float> q(size_t(num_seqs * h.heads * h.dim));
                for (float& x : q) x = 2.0f * dist(rng);
                std::vector<float> want(q.size());
                for (int64_t s = 0; s < num_seqs; ++s) {
                    ref::KvSpan kv;
                    kv.k = kb.data();
                    kv.v = vb.data();
                    kv.kv_len = kv_lens[size_t(s)];
                    kv.block_table = perm.data() + s * max_blocks;
                    kv.block_size = bs;
                    kv.dtype = dt;
                    const ref::AttentionShape shape{1, h.heads, h.kv_heads, h.dim, window};
                    ref::attention(q.data() + s * h.heads * h.dim, kv, shape, want.data() + s * h.heads * h.dim);
                }
                DeviceBuffer dk = upload(kb), dv = upload(vb);
                DeviceBuffer dq = upload(q), dt_ = upload(perm), dl = upload(kv_lens);
                DecodeAttentionBatch b;
                b.k = dk.data();
                b.v = dv.data();
                b.dtype = dt;
                b.block_size = bs;
                b.block_tables = dt_.as<int32_t>();
                b.max_blocks_per_seq = max_blocks;
                b.kv_lens = dl.as<int32_t>();
                b.num_seqs = num_seqs;
                b.num_heads = h.heads;
                b.num_kv_heads = h.kv_heads;
                b.head_dim = h.dim;
                b.window = window;
                b.max_kv_len = 1000;
                const std::vector<float> got = run_decode(b, dq, q.size());
                ASSERT_EQ(got.size(), q.size());
                for (size_t i = 0; i < got.size(); ++i)
                    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])))
                        << "heads " << h.heads << "/" << h.kv_heads << " dim " << h.dim << " kv "
                        << ref::kv_dtype_name(dt) << " window " << window << " at " << i;
            }
        }
    }
}

// Two sequences' prompt chunks in one launch, one query per token: token t of a sequence attends to
// positions <= start + t through the sequence's own block table row (table_rows), as
// model/cuda/cuda_model.cc runs prefill. The reference: kernels/ref attention per token with
// kv_len = position + 1.
TEST(CudaAttention, PromptChunksAsQueriesPerToken) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t heads = 8, kv_heads = 2, dim = 64, bs = 16, max_blocks = 40, row = kv_heads * dim;
    struct Seq {
        int64_t start, num_tokens;
    };
    const Seq seqs[] = {{0, 37}, {290, 300}};  // a fresh prompt; a chunk on top of a 290-token prefix
    const int64_t num_blocks = 2 * max_blocks;
    std::vector<float> kf(size_t(num_blocks * bs * row)), vf(kf.size());
    for (float& x : kf) x = dist(rng);
    for (float& x : vf) x = dist(rng);
    std::vector<int32_t> perm = std::vector<int32_t>(size_t(num_blocks));
    for (int64_t i = 0; i < num_blocks; ++i) perm[size_t(i)] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> kv_lens, table_rows;
    for (int32_t s = 0; s < 2; ++s)
        for (int64_t t = 0; t < seqs[s].num_tokens; ++t) {
            kv_lens.push_back(int32_t(seqs[s].start + t + 1));
            table_rows.push_back(s);
        }
    const int64_t T = int64_t(kv_lens.size());
    std::vector<float> q(size_t(T * heads * dim)), want(q.size());
    for (float& x : q) x = 2.0f * dist(rng);
    for (int64_t i = 0; i < T; ++i) {
        ref::KvSpan kv;
        kv.k = kf.data();
        kv.v = vf.data();
        kv.kv_len = kv_lens[size_t(i)];
        kv.block_table = perm.data() + table_rows[size_t(i)] * max_blocks;
        kv.block_size = bs;
        const ref::AttentionShape shape{1, heads, kv_heads, dim, 0};
        ref::attention(q.data() + i * heads * dim, kv, shape, want.data() + i * heads * dim);
    }
    DeviceBuffer dk = upload(kf), dv = upload(vf), dq = upload(q), dt = upload(perm), dl = upload(kv_lens),
                 dr = upload(table_rows);
    DecodeAttentionBatch b;
    b.k = dk.data();
    b.v = dv.data();
    b.block_size = bs;
    b.block_tables = dt.as<int32_t>();
    b.max_blocks_per_seq = max_blocks;
    b.kv_lens = dl.as<int32_t>();
    b.table_rows = dr.as<int32_t>();
    b.num_seqs = T;
    b.num_heads = heads;
    b.num_kv_heads = kv_heads;
    b.head_dim = dim;
    b.max_kv_len = 590;
    const std::vector<float> got = run_decode(b, dq, q.size());
    ASSERT_EQ(got.size(), q.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << i;
}

// q_rows: three queries at rows 4, 0 and 2 of a 6-row q / out; the other rows of out stay untouched.
TEST(CudaAttention, DecodeReadsAndWritesQueryRows) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(8);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t heads = 8, kv_heads = 2, dim = 64, bs = 16, blocks = 8, width = heads * dim;
    std::vector<float> kf(size_t(blocks * bs * kv_heads * dim)), vf(kf.size()), q(size_t(6 * width));
    for (float& x : kf) x = dist(rng);
    for (float& x : vf) x = dist(rng);
    for (float& x : q) x = dist(rng);
    const std::vector<int32_t> table = {3, 1, 6, 0, 2, 5, 4, 7}, lens = {70, 1, 128}, rows = {4, 0, 2},
                               seq_rows = {0, 0, 0};
    std::vector<float> want(q.size(), NAN);
    for (size_t e = 0; e < 3; ++e) {
        ref::KvSpan kv;
        kv.k = kf.data();
        kv.v = vf.data();
        kv.kv_len = lens[e];
        kv.block_table = table.data();
        kv.block_size = bs;
        const ref::AttentionShape shape{1, heads, kv_heads, dim, 0};
        ref::attention(q.data() + rows[e] * width, kv, shape, want.data() + rows[e] * width);
    }
    DeviceBuffer dk = upload(kf), dv = upload(vf), dq = upload(q), dt = upload(table), dl = upload(lens),
                 dr = upload(rows), ds = upload(seq_rows);
    DecodeAttentionBatch b;
    b.k = dk.data();
    b.v = dv.data();
    b.block_size = bs;
    b.block_tables = dt.as<int32_t>();
    b.max_blocks_per_seq = blocks;
    b.kv_lens = dl.as<int32_t>();
    b.table_rows = ds.as<int32_t>();
    b.q_rows = dr.as<int32_t>();
    b.num_seqs = 3;
    b.num_heads = heads;
    b.num_kv_heads = kv_heads;
    b.head_dim = dim;
    b.max_kv_len = 128;
    const std::vector<float> got = run_decode(b, dq, q.size());
    ASSERT_EQ(got.size(), q.size());
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << "row " << i / size_t(width) << " is no query's, yet written";
        } else {
            ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << i;
        }
    }
}

TEST(CudaAttention, PrefillArgumentChecks) {
    EXPECT_TRUE(prefill_attention_supports(32, 8, 128).is_ok());
    EXPECT_EQ(prefill_attention_supports(32, 8, 96).code(), core::StatusCode::kUnsupported);
    EXPECT_EQ(prefill_attention_supports(9, 2, 64).code(), core::StatusCode::kUnsupported);
    PrefillAttentionBatch b;
    b.num_tiles = 1;
    b.num_heads = 8;
    b.num_kv_heads = 2;
    b.head_dim = 64;
    b.block_size = 16;
    b.max_blocks_per_seq = 4;
    float* p = reinterpret_cast<float*>(16);                                           // never dereferenced
    EXPECT_EQ(prefill_attention(p, b, p).code(), core::StatusCode::kInvalidArgument);  // null pool and indices
    b.block_size = 0;
    EXPECT_EQ(prefill_attention(p, b, p).code(), core::StatusCode::kInvalidArgument);
}

// Ragged prompt chunks (a fresh 37-token prompt, a 130-token chunk on top of a 100-token prefix, an
// exact 64-token tile, a single token) over shuffled f16 blocks, against kernels/ref attention per
// query on the same halves. The kernel rounds q and the probabilities to f16: a layout or masking
// error is off by O(1), rounding by about 1e-3.
TEST(CudaAttention, PrefillMatchesReference) {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    struct Heads {
        int64_t heads, kv_heads, dim;
    };
    struct Seq {
        int32_t start, num_queries;
    };
    const std::vector<Seq> seqs = {{0, 37}, {100, 130}, {0, 64}, {250, 1}};
    std::mt19937 rng(21);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t bs = 16, max_blocks = 16;  // 256 tokens per sequence at most
    for (const Heads h : {Heads{8, 2, 64}, Heads{32, 8, 128}, Heads{4, 4, 128}}) {
        for (int64_t window : {0, 50}) {
            const int64_t num_seqs = int64_t(seqs.size()), num_blocks = num_seqs * max_blocks;
            const int64_t row = h.kv_heads * h.dim;
            std::vector<uint16_t> kh(size_t(num_blocks * bs * row)), vh(kh.size());
            for (uint16_t& x : kh) x = core::f32_to_fp16(dist(rng));
            for (uint16_t& x : vh) x = core::f32_to_fp16(dist(rng));
            std::vector<int32_t> perm = std::vector<int32_t>(size_t(num_blocks));
            for (int64_t i = 0; i < num_blocks; ++i) perm[size_t(i)] = int32_t(i);
            std::shuffle(perm.begin(), perm.end(), rng);
            std::vector<int32_t> q_starts, pos0, nq, tile_seqs, tile_q0;
            int32_t rows = 0;
            for (int32_t s = 0; s < int32_t(num_seqs); ++s) {
                q_starts.push_back(rows);
                pos0.push_back(seqs[size_t(s)].start);
                nq.push_back(seqs[size_t(s)].num_queries);
                for (int32_t t0 = 0; t0 < seqs[size_t(s)].num_queries; t0 += int32_t(kPrefillTileQueries)) {
                    tile_seqs.push_back(s);
                    tile_q0.push_back(t0);
                }
                rows += seqs[size_t(s)].num_queries + 1;  // a row no tile owns after each sequence
            }
            const int64_t T = rows, width = h.heads * h.dim;
            std::vector<float> q(size_t(T * width)), want(q.size(), NAN);
            for (float& x : q) x = dist(rng);
            for (int64_t s = 0; s < num_seqs; ++s)
                for (int64_t t = 0; t < nq[size_t(s)]; ++t) {
                    ref::KvSpan kv;
                    kv.k = kh.data();
                    kv.v = vh.data();
                    kv.dtype = KvDtype::kF16;
                    kv.kv_len = pos0[size_t(s)] + t + 1;
                    kv.block_table = perm.data() + s * max_blocks;
                    kv.block_size = bs;
                    const ref::AttentionShape shape{1, h.heads, h.kv_heads, h.dim, window};
                    const int64_t r = q_starts[size_t(s)] + t;
                    ref::attention(q.data() + r * width, kv, shape, want.data() + r * width);
                }
            DeviceBuffer dk = upload(kh), dv = upload(vh), dq = upload(q), dt = upload(perm);
            DeviceBuffer dqs = upload(q_starts), dp = upload(pos0), dn = upload(nq), dts = upload(tile_seqs),
                         dtq = upload(tile_q0);
            PrefillAttentionBatch b;
            b.k = dk.data();
            b.v = dv.data();
            b.block_size = bs;
            b.block_tables = dt.as<int32_t>();
            b.max_blocks_per_seq = max_blocks;
            b.q_starts = dqs.as<int32_t>();
            b.positions0 = dp.as<int32_t>();
            b.num_queries = dn.as<int32_t>();
            b.tile_seqs = dts.as<int32_t>();
            b.tile_q0 = dtq.as<int32_t>();
            b.num_tiles = int64_t(tile_seqs.size());
            b.num_heads = h.heads;
            b.num_kv_heads = h.kv_heads;
            b.head_dim = h.dim;
            b.window = window;
            DeviceBuffer dout = upload(std::vector<float>(q.size(), NAN));
            const core::Status st = prefill_attention(dq.as<float>(), b, dout.as<float>());
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            std::vector<float> got(q.size());
            ASSERT_TRUE(dout.copy_to_host(got.data(), got.size() * 4).is_ok());
            double sq = 0;
            for (int64_t sidx = 0; sidx < num_seqs; ++sidx) {  // the gap rows stay untouched
                const size_t gap = size_t(q_starts[size_t(sidx)] + nq[size_t(sidx)]) * size_t(width);
                for (int64_t j = 0; j < width; ++j) ASSERT_TRUE(std::isnan(got[gap + size_t(j)])) << "gap row written";
            }
            for (size_t i = 0; i < got.size(); ++i) {
                if (std::isnan(want[i])) continue;  // gap rows
                ASSERT_NEAR(got[i], want[i], 2e-2f * (1.0f + std::fabs(want[i])))
                    << "heads " << h.heads << "/" << h.kv_heads << " dim " << h.dim << " window " << window
                    << " at row " << i / size_t(width);
                sq += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
            }
            EXPECT_LT(std::sqrt(sq / double(T - num_seqs) / double(width)), 3e-3) << "RMS error, dim " << h.dim;
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cuda
