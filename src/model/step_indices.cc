// The index arrays of a GPU forward step (see step_indices.h).
#include "model/step_indices.h"

#include <algorithm>
#include <cstring>

namespace kiln::model {

StepIndexLayout step_index_layout(int64_t T, int64_t S, int64_t NL, int64_t blocks_per_seq, int64_t NT) {
    StepIndexLayout l;
    size_t off = 0;
    auto take = [&](int64_t count, size_t elem) {
        const size_t at = off;
        off = (off + size_t(count) * elem + 15) / 16 * 16;
        return at;
    };
    l.tokens = take(T, 4);
    l.positions = take(T, 4);
    l.slots = take(T, 8);
    l.entry_rows = take(T, 4);
    l.entry_lens = take(T, 4);
    l.entry_seqs = take(T, 4);
    l.seq_q0 = take(S, 4);
    l.seq_pos0 = take(S, 4);
    l.seq_tokens = take(S, 4);
    l.tile_seqs = take(NT, 4);
    l.tile_q0 = take(NT, 4);
    l.logit_rows = take(NL, 4);
    l.tables = take(S * blocks_per_seq, 4);
    l.end = off;
    return l;
}

StepIndices build_step_indices(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, int64_t bs,
                               int64_t tile_queries, uint8_t* buf, int64_t min_blocks_per_seq) {
    StepIndices r;
    r.blocks_per_seq = min_blocks_per_seq;
    r.num_tokens = int64_t(tokens.size());
    r.num_seqs = int64_t(seqs.size());
    for (const BatchSeq& q : seqs) {
        const int64_t len = q.start + q.num_tokens;
        r.num_logits += q.num_logits;
        r.max_kv_len = std::max(r.max_kv_len, len);
        r.blocks_per_seq = std::max(r.blocks_per_seq, (len + bs - 1) / bs);
        if (tile_queries > 0 && q.num_tokens > 1) r.num_tiles += (q.num_tokens + tile_queries - 1) / tile_queries;
    }
    r.layout = step_index_layout(r.num_tokens, r.num_seqs, r.num_logits, r.blocks_per_seq, r.num_tiles);
    const StepIndexLayout& l = r.layout;
    auto i32 = [&](size_t off) { return reinterpret_cast<int32_t*>(buf + off); };
    int32_t *pos = i32(l.positions), *erows = i32(l.entry_rows), *elens = i32(l.entry_lens), *eseqs = i32(l.entry_seqs);
    int32_t *sq0 = i32(l.seq_q0), *spos = i32(l.seq_pos0), *sn = i32(l.seq_tokens), *tseq = i32(l.tile_seqs),
            *tq0 = i32(l.tile_q0), *lrows = i32(l.logit_rows), *tables = i32(l.tables);
    auto* slots = reinterpret_cast<int64_t*>(buf + l.slots);
    std::memcpy(buf + l.tokens, tokens.data(), tokens.size() * sizeof(int32_t));
    int64_t row = 0, out_row = 0, e = 0, nt = 0;
    for (int64_t i = 0; i < r.num_seqs; ++i) {
        const BatchSeq& q = seqs[size_t(i)];
        const int64_t need = (q.start + q.num_tokens + bs - 1) / bs;
        int32_t* table = tables + i * r.blocks_per_seq;
        std::copy_n(q.block_table.data(), need, table);
        std::fill(table + need, table + r.blocks_per_seq, 0);  // never read: past the sequence
        sq0[i] = int32_t(row);
        spos[i] = int32_t(q.start);
        sn[i] = int32_t(q.num_tokens);
        const bool tiled = tile_queries > 0 && q.num_tokens > 1;
        if (tiled)
            for (int64_t t0 = 0; t0 < q.num_tokens; t0 += tile_queries, ++nt) {
                tseq[nt] = int32_t(i);
                tq0[nt] = int32_t(t0);
            }
        for (int64_t t = 0; t < q.num_tokens; ++t, ++row) {
            const int64_t p = q.start + t;
            pos[row] = int32_t(p);
            slots[row] = int64_t(table[p / bs]) * bs + p % bs;
            if (!tiled) {
                erows[e] = int32_t(row);
                elens[e] = int32_t(p + 1);
                eseqs[e] = int32_t(i);
                ++e;
            }
            if (t >= q.num_tokens - q.num_logits) lrows[out_row++] = int32_t(row);
        }
    }
    r.num_entries = e;
    return r;
}

}  // namespace kiln::model
