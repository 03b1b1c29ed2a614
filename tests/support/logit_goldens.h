// Logit goldens from an independent implementation (transformers), as the generating scripts write
// them (scripts/gen_family_goldens.py, scripts/gen_published_quant.py): golden.json (prompts, the
// shape of each prompt's logits, a greedy continuation of one prompt) and logits.f32 (float32
// little-endian, prompts one after the other, [len, vocab]), and the comparison of a kiln model
// with them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "support/test_support.h"

namespace kiln::test {

struct Golden {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<float>> logits;  // per prompt [len, vocab]
    int64_t vocab = 0;
    size_t greedy_prompt = 0;
    std::vector<int32_t> greedy;
};

inline bool load_golden(const std::string& dir, Golden* g) {
    const nlohmann::json j = nlohmann::json::parse(test::read_text(dir + "/golden.json"), nullptr, false);
    if (j.is_discarded()) return false;
    const std::vector<uint8_t> raw = test::read_file(dir + "/logits.f32");
    size_t off = 0;
    for (size_t p = 0; p < j["prompts"].size(); ++p) {
        g->prompts.push_back(j["prompts"][p].get<std::vector<int32_t>>());
        const auto shape = j["logits_shapes"][p].get<std::vector<int64_t>>();
        g->vocab = shape[1];
        std::vector<float> l(size_t(shape[0] * shape[1]));
        if (off + l.size() * 4 > raw.size()) return false;
        std::memcpy(l.data(), raw.data() + off, l.size() * 4);
        off += l.size() * 4;
        g->logits.push_back(std::move(l));
    }
    g->greedy_prompt = j["greedy_prompt"].get<size_t>();
    g->greedy = j["greedy"].get<std::vector<int32_t>>();
    return off == raw.size();
}

// Teacher-forced logits at every position and the greedy continuation, compared with the golden:
// every logit within `rel_tol` of its prompt's logit range (max - min), and the same greedy tokens
// (with `greedy`). The f32-activation path unless `options` says otherwise.
inline void check_model(const loader::Checkpoint& ck, const Golden& g, const std::string& what,
                        double rel_tol = 1e-4, const ops::LinearOptions* options = nullptr, bool greedy = true) {
    using model::CpuModel;
    using model::KvCache;
    core::ThreadPool pool(2);
    ops::LinearOptions f32;
    f32.f32_activations = true;
    auto model = CpuModel::create(ck, &pool, options ? *options : f32);
    ASSERT_TRUE(model.is_ok()) << what << ": " << model.status().to_string();
    const int64_t V = (*model)->config().vocab_size;
    ASSERT_EQ(V, g.vocab) << what;
    for (size_t p = 0; p < g.prompts.size(); ++p) {
        const std::vector<int32_t>& ids = g.prompts[p];
        KvCache cache((*model)->config(), int64_t(ids.size()));
        auto logits = (*model)->forward(ids, cache, /*all_logits=*/true);  // [len, V]
        ASSERT_TRUE(logits.is_ok()) << what << ": " << logits.status().to_string();
        const std::vector<float>& want = g.logits[p];
        ASSERT_EQ(logits->size(), want.size()) << what;
        const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
        const double tol = rel_tol * (double(*hi) - double(*lo));
        double worst = 0;
        size_t worst_i = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            const double err = std::abs(double((*logits)[i]) - double(want[i]));
            if (err > worst) worst = err, worst_i = i;
        }
        EXPECT_LE(worst, tol) << what << " prompt " << p << ": position " << worst_i / size_t(V) << " id "
                              << worst_i % size_t(V) << ": kiln " << (*logits)[worst_i] << ", transformers "
                              << want[worst_i];
        std::printf("[ %s ] prompt %zu (%zu tokens): max |diff| %.3g, tolerance %.3g\n", what.c_str(), p, ids.size(),
                    worst, tol);
    }
    if (!greedy) return;
    const std::vector<int32_t>& prompt = g.prompts[g.greedy_prompt];
    KvCache cache((*model)->config(), int64_t(prompt.size() + g.greedy.size()));
    std::vector<int32_t> next = prompt, got;
    for (size_t step = 0; step < g.greedy.size(); ++step) {
        auto logits = (*model)->forward(next, cache, false);
        ASSERT_TRUE(logits.is_ok()) << what << ": " << logits.status().to_string();
        const int32_t best = int32_t(std::max_element(logits->begin(), logits->begin() + V) - logits->begin());
        got.push_back(best);
        next = {best};
    }
    EXPECT_EQ(got, g.greedy) << what << ": greedy continuation";
}

}  // namespace kiln::test
