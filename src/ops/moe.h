// The router and dispatch of a mixture-of-experts MLP on the host, the parts of ops::Backend::moe_mlp
// that are the same for any device's expert products: which experts each token goes to, with what
// weight (moe_route), and each expert's tokens in a fixed order (MoeGroups).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::ops {

// Row r's top_k experts from its router logits [rows, E]: ids [rows, top_k] in descending order of
// logit (ties to the lower expert id, as the highest softmax probability is the highest logit), and
// weights [rows, top_k]: their softmax probabilities over all E experts (float, max-subtracted, as
// torch computes softmax), divided by their sum when norm_topk.
void moe_route(const float* logits, int64_t rows, int64_t num_experts, int64_t top_k, bool norm_topk, int32_t* ids,
               float* weights);

// The (row, slot) pairs routed to each expert, in row order: entries[offsets[e] .. offsets[e + 1])
// hold r * top_k + j for every row r whose slot j chose expert e.
struct MoeGroups {
    std::vector<int64_t> offsets;  // [E + 1]
    std::vector<int64_t> entries;  // [rows * top_k]
    void build(const int32_t* ids, int64_t rows, int64_t top_k, int64_t num_experts);
    int64_t count(int64_t e) const { return offsets[size_t(e) + 1] - offsets[size_t(e)]; }
};

}  // namespace kiln::ops
