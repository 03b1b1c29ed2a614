// The index arrays one forward step on a GPU needs (model/cuda/cuda_model.cc), built on the host in
// one buffer so that a single copy moves them: per token its id, position and K/V slot; the
// attention work split between the split-KV kernel (one query per entry: decode tokens, or every
// token when prompt chunks cannot take the tensor-core kernel) and the prefill kernel (tiles of
// consecutive queries of one sequence); the rows that get logits; the block tables. Plain host
// code (no CUDA), so it is tested on any machine. Layout: sections in the order of StepIndexLayout,
// each 16-byte aligned, sized for the step (a smaller step packs tighter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "model/cpu_model.h"

namespace kiln::model {

// Byte offsets of the sections (int32 unless noted); the shapes in the comments.
struct StepIndexLayout {
    size_t tokens = 0;      // [T] token ids
    size_t positions = 0;   // [T]
    size_t slots = 0;       // int64 [T]: K/V row of each token (block * block_size + offset)
    size_t entry_rows = 0;  // [E] q/out row of each split-KV query
    size_t entry_lens = 0;  // [E] its kv length (position + 1)
    size_t entry_seqs = 0;  // [E] its sequence (row of the block tables)
    size_t seq_q0 = 0;      // [S] row of each sequence's first new token
    size_t seq_pos0 = 0;    // [S] its position (tokens cached before the step)
    size_t seq_tokens = 0;  // [S] its new tokens
    size_t tile_seqs = 0;   // [NT] the sequence of each prefill tile
    size_t tile_q0 = 0;     // [NT] its first query, counted from the sequence's first new token
    size_t logit_rows = 0;  // [NL] rows (tokens) whose logits are returned
    size_t tables = 0;      // [S, blocks_per_seq] block ids, padded with 0 past each sequence
    size_t end = 0;         // bytes used
};

struct StepIndices {
    StepIndexLayout layout;
    int64_t num_tokens = 0, num_seqs = 0, num_logits = 0;
    int64_t blocks_per_seq = 0;  // row stride of the tables: the longest sequence's blocks
    int64_t max_kv_len = 0;      // the longest sequence after the step
    int64_t num_entries = 0;     // E
    int64_t num_tiles = 0;       // NT
};

// The layout for a step of these sizes (num_tiles <= ceil(T / tile) + S); also the capacity to
// allocate for the largest step.
StepIndexLayout step_index_layout(int64_t num_tokens, int64_t num_seqs, int64_t num_logits, int64_t blocks_per_seq,
                                  int64_t num_tiles);

// Fills `buf` for a batch that check_forward_batch accepted, with paged block tables (block_size >
// 0). tile_queries > 0: sequences with more than one new token become tiles of that many queries;
// 0: every token is a split-KV entry. buf must hold step_index_layout(...).end bytes of this step
// (at most the capacity computed from the create-time limits).
// min_blocks_per_seq widens the tables' row stride (a CUDA graph's step keeps one layout per batch
// size whatever the sequences' lengths).
StepIndices build_step_indices(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs, int64_t block_size,
                               int64_t tile_queries, uint8_t* buf, int64_t min_blocks_per_seq = 0);

}  // namespace kiln::model
