// Mixture-of-experts routing and grouping (see moe.h).
#include "ops/moe.h"

#include <algorithm>
#include <cmath>

#include "ops/backend.h"

namespace kiln::ops {

void moe_route(const float* logits, int64_t rows, int64_t E, int64_t k, bool norm_topk, int32_t* ids, float* weights) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* l = logits + r * E;
        int32_t* id = ids + r * k;
        float* w = weights + r * k;
        // Insertion into the k best so far; experts come in ascending id, so on a tie the earlier
        // (lower) id stays ahead.
        int64_t n = 0;
        for (int64_t e = 0; e < E; ++e) {
            if (n == k && !(l[e] > l[id[k - 1]])) continue;
            int64_t pos = n < k ? n++ : k - 1;
            while (pos > 0 && l[e] > l[id[pos - 1]]) {
                id[pos] = id[pos - 1];
                --pos;
            }
            id[pos] = int32_t(e);
        }
        float max = l[0];
        for (int64_t e = 1; e < E; ++e) max = std::max(max, l[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - max);
        float chosen = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
            w[j] = std::exp(l[id[j]] - max) / sum;
            chosen += w[j];
        }
        if (norm_topk)
            for (int64_t j = 0; j < k; ++j) w[j] /= chosen;
    }
}

void MoeGroups::build(const int32_t* ids, int64_t rows, int64_t k, int64_t E) {
    offsets.assign(size_t(E) + 1, 0);
    entries.resize(size_t(rows * k));
    for (int64_t i = 0; i < rows * k; ++i) ++offsets[size_t(ids[i]) + 1];
    for (int64_t e = 0; e < E; ++e) offsets[size_t(e) + 1] += offsets[size_t(e)];
    std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (int64_t i = 0; i < rows * k; ++i) entries[size_t(fill[size_t(ids[i])]++)] = i;
}

// Expert parallelism's halves of moe_mlp: host backends only (ops/backend.h).
core::Status Backend::moe_router(const MoeWeights&, const MoeParams&, const float*, int64_t, int64_t, MoeSlots&) {
    return core::error(core::StatusCode::kUnsupported) << "expert parallelism runs on the CPU backend only";
}
core::Status Backend::moe_experts(const MoeWeights&, const MoeParams&, const float*, int64_t, MoeSlots&) {
    return core::error(core::StatusCode::kUnsupported) << "expert parallelism runs on the CPU backend only";
}
core::Status Backend::moe_combine(const MoeWeights&, const MoeParams&, const float*, int64_t, int64_t, const MoeSlots&,
                                  float*) {
    return core::error(core::StatusCode::kUnsupported) << "expert parallelism runs on the CPU backend only";
}

}  // namespace kiln::ops
