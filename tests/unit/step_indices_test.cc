// model::build_step_indices, the host side of a GPU forward step: random ragged batches (decode
// tokens, prompt chunks on cached prefixes, logits for some tokens) over shuffled block tables, with
// and without prefill tiles, checked field by field against the batch; the layout's sections are
// 16-byte aligned, disjoint, and fit the capacity computed from the limits.
#include "model/step_indices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace kiln::model {
namespace {

template <class T>
std::vector<T> read(const std::vector<uint8_t>& buf, size_t off, int64_t n) {
    std::vector<T> v = std::vector<T>(size_t(n));
    if (n > 0) std::memcpy(v.data(), buf.data() + off, size_t(n) * sizeof(T));
    return v;
}

TEST(StepIndices, MatchTheBatch) {
    std::mt19937 rng(17);
    const int64_t bs = 16, num_blocks = 400;
    for (int iter = 0; iter < 200; ++iter) {
        for (int64_t tile : {int64_t(0), int64_t(4), int64_t(64)}) {
            std::vector<int32_t> blocks = std::vector<int32_t>(size_t(num_blocks));
            std::iota(blocks.begin(), blocks.end(), 0);
            std::shuffle(blocks.begin(), blocks.end(), rng);
            const int64_t S = 1 + int64_t(rng() % 6);
            std::vector<std::vector<int32_t>> tables;
            std::vector<BatchSeq> seqs;
            std::vector<int32_t> tokens;
            size_t next_block = 0;
            for (int64_t i = 0; i < S; ++i) {
                BatchSeq q;
                q.start = int64_t(rng() % 300);
                q.num_tokens = rng() % 3 == 0 ? 1 : 1 + int64_t(rng() % 150);
                q.num_logits = int64_t(rng() % uint32_t(q.num_tokens + 1));
                const int64_t need = (q.start + q.num_tokens + bs - 1) / bs;
                tables.emplace_back(blocks.begin() + long(next_block),
                                    blocks.begin() + long(next_block + size_t(need)));
                next_block += size_t(need);
                for (int64_t t = 0; t < q.num_tokens; ++t) tokens.push_back(int32_t(rng() % 1000));
                seqs.push_back(q);
            }
            for (int64_t i = 0; i < S; ++i) seqs[size_t(i)].block_table = tables[size_t(i)];
            ModelConfig config;
            config.vocab_size = 1000;
            ASSERT_TRUE(check_forward_batch(config, tokens, seqs, bs, num_blocks * bs).is_ok());
            const int64_t T = int64_t(tokens.size());
            const StepIndexLayout cap = step_index_layout(1024, 8, 1024, 64, 1024 / 4 + 8);
            std::vector<uint8_t> buf(cap.end + 64, 0xAB);
            const StepIndices ix = build_step_indices(tokens, seqs, bs, tile, buf.data());
            const StepIndexLayout& l = ix.layout;
            ASSERT_LE(l.end, cap.end);
            ASSERT_EQ(ix.num_tokens, T);
            ASSERT_EQ(ix.num_seqs, S);
            // sections aligned, in order, each large enough for its count
            const size_t offs[] = {l.tokens,     l.positions,  l.slots,    l.entry_rows, l.entry_lens,
                                   l.entry_seqs, l.seq_q0,     l.seq_pos0, l.seq_tokens, l.tile_seqs,
                                   l.tile_q0,    l.logit_rows, l.tables,   l.end};
            for (size_t i = 0; i + 1 < std::size(offs); ++i) {
                EXPECT_EQ(offs[i] % 16, 0u);
                EXPECT_LE(offs[i], offs[i + 1]);
            }
            EXPECT_GE(l.positions - l.tokens, size_t(T) * 4);
            EXPECT_GE(l.entry_rows - l.slots, size_t(T) * 8);
            EXPECT_GE(l.end - l.tables, size_t(S * ix.blocks_per_seq) * 4);

            EXPECT_EQ(read<int32_t>(buf, l.tokens, T), tokens);
            const auto pos = read<int32_t>(buf, l.positions, T);
            const auto slots = read<int64_t>(buf, l.slots, T);
            const auto erows = read<int32_t>(buf, l.entry_rows, ix.num_entries);
            const auto elens = read<int32_t>(buf, l.entry_lens, ix.num_entries);
            const auto eseqs = read<int32_t>(buf, l.entry_seqs, ix.num_entries);
            const auto sq0 = read<int32_t>(buf, l.seq_q0, S), spos = read<int32_t>(buf, l.seq_pos0, S),
                       sn = read<int32_t>(buf, l.seq_tokens, S);
            const auto tseq = read<int32_t>(buf, l.tile_seqs, ix.num_tiles),
                       tq0 = read<int32_t>(buf, l.tile_q0, ix.num_tiles);
            const auto lrows = read<int32_t>(buf, l.logit_rows, ix.num_logits);
            const auto tab = read<int32_t>(buf, l.tables, S * ix.blocks_per_seq);
            int64_t row = 0, e = 0, nt = 0, nl = 0, max_len = 0, max_blocks = 0;
            for (int64_t i = 0; i < S; ++i) {
                const BatchSeq& q = seqs[size_t(i)];
                const int64_t len = q.start + q.num_tokens, need = (len + bs - 1) / bs;
                max_len = std::max(max_len, len);
                max_blocks = std::max(max_blocks, need);
                EXPECT_EQ(sq0[size_t(i)], row);
                EXPECT_EQ(spos[size_t(i)], q.start);
                EXPECT_EQ(sn[size_t(i)], q.num_tokens);
                for (int64_t b = 0; b < ix.blocks_per_seq; ++b)
                    EXPECT_EQ(tab[size_t(i * ix.blocks_per_seq + b)], b < need ? tables[size_t(i)][size_t(b)] : 0);
                const bool tiled = tile > 0 && q.num_tokens > 1;
                if (tiled) {
                    for (int64_t t0 = 0; t0 < q.num_tokens; t0 += tile, ++nt) {
                        ASSERT_LT(nt, ix.num_tiles);
                        EXPECT_EQ(tseq[size_t(nt)], i);
                        EXPECT_EQ(tq0[size_t(nt)], t0);
                    }
                }
                for (int64_t t = 0; t < q.num_tokens; ++t, ++row) {
                    const int64_t p = q.start + t;
                    EXPECT_EQ(pos[size_t(row)], p);
                    EXPECT_EQ(slots[size_t(row)], int64_t(tables[size_t(i)][size_t(p / bs)]) * bs + p % bs);
                    if (!tiled) {
                        ASSERT_LT(e, ix.num_entries);
                        EXPECT_EQ(erows[size_t(e)], row);
                        EXPECT_EQ(elens[size_t(e)], p + 1);
                        EXPECT_EQ(eseqs[size_t(e)], i);
                        ++e;
                    }
                    if (t >= q.num_tokens - q.num_logits) {
                        ASSERT_LT(nl, ix.num_logits);
                        EXPECT_EQ(lrows[size_t(nl++)], row);
                    }
                }
            }
            EXPECT_EQ(e, ix.num_entries);
            EXPECT_EQ(nt, ix.num_tiles);
            EXPECT_EQ(nl, ix.num_logits);
            EXPECT_EQ(ix.max_kv_len, max_len);
            EXPECT_EQ(ix.blocks_per_seq, max_blocks);
            if (tile == 0) EXPECT_EQ(ix.num_entries, T);
        }
    }
}

// A CUDA graph's decode step: the same batch size and min_blocks_per_seq give the same layout and
// counts whatever the sequences' lengths and tables.
TEST(StepIndices, PaddedDecodeLayoutDependsOnlyOnTheBatchSize) {
    const int64_t bs = 16, cap = 32;  // 512-token sequences at most
    std::vector<uint8_t> a(1 << 16), b(1 << 16);
    const std::vector<int32_t> t1 = {7}, t2 = {3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18,
                                               19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34};
    const std::vector<int32_t> tokens = {1, 2, 3};
    const std::vector<BatchSeq> short_seqs = {{0, 1, t1, 1}, {3, 1, t1, 1}, {15, 1, t1, 1}};
    const std::vector<BatchSeq> long_seqs = {{511, 1, t2, 1}, {200, 1, t2, 1}, {0, 1, t1, 1}};
    const StepIndices x = build_step_indices(tokens, short_seqs, bs, 0, a.data(), cap);
    const StepIndices y = build_step_indices(tokens, long_seqs, bs, 0, b.data(), cap);
    for (const StepIndices* ix : {&x, &y}) {
        EXPECT_EQ(ix->blocks_per_seq, cap);
        EXPECT_EQ(ix->num_entries, 3);
        EXPECT_EQ(ix->num_logits, 3);
        EXPECT_EQ(ix->num_tiles, 0);
    }
    const StepIndexLayout& l = x.layout;
    const StepIndexLayout& m = y.layout;
    EXPECT_EQ(std::memcmp(&l, &m, sizeof(l)), 0);
    EXPECT_EQ(read<int32_t>(a, l.logit_rows, 3), (std::vector<int32_t>{0, 1, 2}));  // rows in batch order
    EXPECT_EQ(read<int32_t>(a, l.entry_rows, 3), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(read<int32_t>(b, m.tables + size_t(cap) * 4 * 0 + 31 * 4, 1)[0], 34);  // the last of a full row
}

}  // namespace
}  // namespace kiln::model
