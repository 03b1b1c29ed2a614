// The serving engine's batch invariance on real models (stories260K; SmolLM2-135M where installed):
// every request yields the same tokens, and the same logits bit for bit, whether it runs alone or
// among 16 concurrent requests of different lengths and sampling settings, under a KV budget small
// enough to force preemption, with tiny prefill chunks, with odd block sizes, and with its prefix
// served by the prefix cache. Also: aborts mid-flight free every block, each request's callback
// ends exactly once, and a randomized add / abort / step sequence keeps the pool's invariants.
// Label `unit`, so the sanitizer pass runs it too (on stories260K; SmolLM2 only in optimized builds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/kv_quant.h"
#include "support/engine_fixture.h"

namespace kiln::engine {
namespace {

class EngineBatch : public EngineFixture {
protected:
    void check_cache_dtype(kernels::KvDtype dt, double rms_limit, float top_margin);
};

TEST_P(EngineBatch, BatchedEqualsAlone) {
    const std::vector<Spec> specs = make_specs(16, 7);
    const auto alone = run_alone(specs);
    for (const auto& [id, r] : alone) EXPECT_EQ(r.finishes, 1);
    struct Case {
        const char* name;
        EngineConfig config;
    };
    std::vector<Case> cases;
    cases.push_back({"default", EngineConfig{}});
    EngineConfig tight;  // a few blocks more than the longest request needs: forces preemption
    tight.num_kv_blocks = small_ ? 12 : 6;
    cases.push_back({"tiny KV budget", tight});
    EngineConfig chunks;
    chunks.max_batch_tokens = 3;
    cases.push_back({"3-token steps", chunks});
    EngineConfig odd;
    odd.block_size = 7;
    odd.max_seqs = 5;
    odd.max_batch_tokens = 29;
    cases.push_back({"block 7, 5 seqs, 29 tokens", odd});
    EngineConfig no_cache;
    no_cache.prefix_cache = false;
    no_cache.block_size = 1;
    cases.push_back({"block 1, no prefix cache", no_cache});
    for (const Case& c : cases) {
        EngineStats stats;
        const auto got = run_batched(specs, c.config, &stats);
        expect_same(alone, got, c.name);
        if (std::string(c.name) == "tiny KV budget") {
            EXPECT_GT(stats.num_preemptions, 0) << "the budget forced none";
        }
    }
}

// The engine over a PagedModel (a model that owns its KV pool: how the GPU model plugs in), here the
// CPU model over a pool this test owns: the same tokens and logits as the engine's own pool, also
// with the pool's block size and size taken from the model and small enough to preempt.
TEST_P(EngineBatch, PagedModelRunsLikeTheEnginesOwnPool) {
    const std::vector<Spec> specs = make_specs(12, 5);
    const auto alone = run_alone(specs);
    const loader::ModelConfig& mc = model_->config();
    const int64_t num_blocks = small_ ? 24 : 12, block_size = 8;  // as the "tiny KV budget" case
    std::unique_ptr<kv::KvStorage> storage;
    model::KvLayers layers;
    ASSERT_NO_FATAL_FAILURE(own_pool(num_blocks, block_size, storage, layers));
    PagedModel pm;
    pm.config = &mc;
    pm.num_kv_blocks = num_blocks;
    pm.block_size = int32_t(block_size);
    int64_t calls = 0;
    pm.forward = [&](std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs,
                     std::vector<float>& logits) {
        ++calls;
        return model_->forward_batch(tokens, seqs, layers, logits);
    };
    EngineConfig c;
    c.block_size = 16;         // overridden by the model's 8
    c.num_kv_blocks = 1000;    // likewise: the model's pool
    auto core = EngineCore::create(std::move(pm), tok_.get(), c);
    ASSERT_TRUE(core.is_ok()) << core.status().to_string();
    EXPECT_EQ((*core)->config().block_size, 8);
    EXPECT_EQ((*core)->config().num_kv_blocks, num_blocks);
    std::map<int64_t, Result> out;
    for (size_t i = 0; i < specs.size(); ++i) add(**core, int64_t(i), specs[i], out);
    while ((*core)->step()) {
    }
    EXPECT_GT(calls, 0);
    const EngineStats st = (*core)->stats();
    EXPECT_EQ(st.kv_blocks_total, num_blocks);
    EXPECT_GT(st.num_preemptions, 0) << "the pool was meant to be small enough to preempt";
    expect_same(alone, out, "paged model");
    // A pool the engine cannot use is an error, not a crash.
    PagedModel empty;
    empty.config = &mc;
    empty.block_size = 8;
    empty.forward = [](std::span<const int32_t>, std::span<const model::BatchSeq>, std::vector<float>&) {
        return core::Status::ok();
    };
    EXPECT_EQ(EngineCore::create(std::move(empty), tok_.get(), EngineConfig{}).status().code(),
              core::StatusCode::kInvalidArgument);
}

// A PagedModel with a greedy step (as the GPU model has): steps whose sampled sequences all decode
// plain greedy (no penalties, bias, logprobs or raw logits) take it and need no logits; a step with
// one sampling request takes the logits path; the tokens are those of each request alone.
TEST_P(EngineBatch, PlainGreedyStepsTakeTheModelsGreedyPath) {
    std::vector<Spec> specs = make_specs(8, 11);
    for (size_t i = 0; i < specs.size(); ++i) {  // all plain greedy but the last
        sampling::SamplingParams& p = specs[i].params;
        if (i + 1 == specs.size()) break;
        p.temperature = 0.0f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.presence_penalty = 0.0f;
        p.has_seed = false;
    }
    const auto alone = run_alone(specs);
    const loader::ModelConfig& mc = model_->config();
    const int64_t num_blocks = 64, block_size = 16;
    std::unique_ptr<kv::KvStorage> storage;
    model::KvLayers layers;
    ASSERT_NO_FATAL_FAILURE(own_pool(num_blocks, block_size, storage, layers));
    int64_t logit_steps = 0, greedy_steps = 0;
    PagedModel pm;
    pm.config = &mc;
    pm.num_kv_blocks = num_blocks;
    pm.block_size = int32_t(block_size);
    pm.forward = [&](std::span<const int32_t> t, std::span<const model::BatchSeq> q, std::vector<float>& logits) {
        ++logit_steps;
        return model_->forward_batch(t, q, layers, logits);
    };
    std::vector<float> scratch;
    pm.forward_greedy = [&](std::span<const int32_t> t, std::span<const model::BatchSeq> q, std::vector<int32_t>& ids) {
        ++greedy_steps;
        KILN_RETURN_IF_ERROR(model_->forward_batch(t, q, layers, scratch));
        const size_t V = size_t(mc.vocab_size);
        ids.clear();
        for (size_t r = 0; r < scratch.size() / V; ++r)
            ids.push_back(sampling::argmax_lowest_id(std::span<const float>(scratch).subspan(r * V, V)));
        return core::Status::ok();
    };
    auto core = EngineCore::create(std::move(pm), tok_.get(), EngineConfig{});
    ASSERT_TRUE(core.is_ok()) << core.status().to_string();
    std::map<int64_t, std::vector<int32_t>> tokens;
    // the sampling request joins only after the greedy ones finished: they run on the greedy path
    for (size_t i = 0; i + 1 < specs.size(); ++i) {
        Request r;
        r.prompt = specs[i].prompt;
        r.params = specs[i].params;
        std::vector<int32_t>* out = &tokens[int64_t(i)];
        r.on_output = [out](const StepOutput& o) { out->insert(out->end(), o.token_ids.begin(), o.token_ids.end()); };
        ASSERT_TRUE((*core)->add(int64_t(i), std::move(r)).is_ok());
    }
    while ((*core)->step()) {
    }
    EXPECT_GT(greedy_steps, 0);
    EXPECT_EQ(logit_steps, 0) << "greedy-only steps took the logits path";
    Request r;
    r.prompt = specs.back().prompt;
    r.params = specs.back().params;
    std::vector<int32_t>* out = &tokens[int64_t(specs.size() - 1)];
    r.on_output = [out](const StepOutput& o) { out->insert(out->end(), o.token_ids.begin(), o.token_ids.end()); };
    ASSERT_TRUE((*core)->add(int64_t(specs.size() - 1), std::move(r)).is_ok());
    while ((*core)->step()) {
    }
    EXPECT_GT(logit_steps, 0) << "a sampling request's steps must take the logits path";
    for (const auto& [id, want] : alone) EXPECT_EQ(tokens[id], want.tokens) << "request " << id;
    // Greedy and sampling requests together: the steps they share take the logits path (were the
    // greedy path taken, the sampling request would get argmax tokens, not its seeded draws).
    for (int64_t k : {int64_t(0), int64_t(specs.size() - 1), int64_t(1)}) {
        Request q;
        q.prompt = specs[size_t(k)].prompt;
        q.params = specs[size_t(k)].params;
        std::vector<int32_t>* dst = &tokens[100 + k];
        q.on_output = [dst](const StepOutput& o) { dst->insert(dst->end(), o.token_ids.begin(), o.token_ids.end()); };
        ASSERT_TRUE((*core)->add(100 + k, std::move(q)).is_ok());
    }
    while ((*core)->step()) {
    }
    for (int64_t k : {int64_t(0), int64_t(specs.size() - 1), int64_t(1)})
        EXPECT_EQ(tokens[100 + k], alone.at(k).tokens) << "request " << k << " beside the others";
}

// A PagedModel that samples on its side (forward_sample, as the GPU model does with
// kernels/cuda/sample_rows; here kernels/ref/sample_row on the CPU's logits): steps without
// logprobs or raw logits take it. Rows whose token does not depend on the draw (greedy with
// penalties and bias, top-k 1 with a penalty) give the host sampler's tokens; seeded draws repeat
// from run to run; a logprobs request brings the logits path back.
TEST_P(EngineBatch, StepsSampleOnTheModelsSide) {
    std::vector<Spec> specs = make_specs(9, 17);
    for (size_t i = 0; i < specs.size(); ++i) {
        sampling::SamplingParams& p = specs[i].params;
        if (i % 3 == 0) {
            p.temperature = 0.0f;
            p.repetition_penalty = 1.3f;
            p.frequency_penalty = 0.4f;
            p.logit_bias = {{5, 1.5f}, {7, -2.0f}};
        } else if (i % 3 == 1) {
            p.temperature = 1.0f;
            p.top_k = 1;
            p.presence_penalty = 0.6f;
        }  // i % 3 == 2: seeded sampling as made
    }
    const auto alone = run_alone(specs);
    const loader::ModelConfig& mc = model_->config();
    int64_t logit_steps = 0, sample_steps = 0;
    auto run = [&](const std::vector<Spec>& run_specs, bool logprobs_last) {
        std::unique_ptr<kv::KvStorage> storage;
        model::KvLayers layers;
        own_pool(64, 16, storage, layers);
        PagedModel pm;
        pm.config = &mc;
        pm.num_kv_blocks = 64;
        pm.block_size = 16;
        pm.forward = [&, lp = &layers](std::span<const int32_t> t, std::span<const model::BatchSeq> q,
                                       std::vector<float>& logits) {
            ++logit_steps;
            return model_->forward_batch(t, q, *lp, logits);
        };
        pm.forward_sample = [&, lp = &layers](std::span<const int32_t> t, std::span<const model::BatchSeq> q,
                                              std::span<const kernels::ref::SampleRow> rows,
                                              std::span<const kernels::ref::LogitAdjustment> adjust,
                                              std::vector<int32_t>& ids) {
            ++sample_steps;
            std::vector<float> logits;
            KILN_RETURN_IF_ERROR(model_->forward_batch(t, q, *lp, logits));
            const size_t V = size_t(mc.vocab_size);
            EXPECT_EQ(rows.size() * V, logits.size());
            ids.clear();
            for (size_t r = 0; r < rows.size(); ++r) {
                std::vector<float> row(logits.begin() + std::ptrdiff_t(r * V),
                                       logits.begin() + std::ptrdiff_t((r + 1) * V));
                ids.push_back(kernels::ref::sample_row(row, rows[r], adjust));
            }
            return core::Status::ok();
        };
        auto core = EngineCore::create(std::move(pm), tok_.get(), EngineConfig{});
        EXPECT_TRUE(core.is_ok()) << core.status().to_string();
        std::map<int64_t, std::vector<int32_t>> tokens;
        for (size_t i = 0; i < run_specs.size(); ++i) {
            Request r;
            r.prompt = run_specs[i].prompt;
            r.params = run_specs[i].params;
            if (logprobs_last && i + 1 == run_specs.size()) r.params.logprobs = 2;
            std::vector<int32_t>* out = &tokens[int64_t(i)];
            r.on_output = [out](const StepOutput& o) {
                out->insert(out->end(), o.token_ids.begin(), o.token_ids.end());
            };
            EXPECT_TRUE((*core)->add(int64_t(i), std::move(r)).is_ok());
        }
        while ((*core)->step()) {
        }
        return tokens;
    };
    const auto first = run(specs, false);
    EXPECT_GT(sample_steps, 0);
    EXPECT_EQ(logit_steps, 0) << "steps without logprobs or raw logits took the logits path";
    for (size_t i = 0; i < specs.size(); ++i)
        if (i % 3 != 2) {
            EXPECT_EQ(first.at(int64_t(i)), alone.at(int64_t(i)).tokens) << "request " << i;
        }
    EXPECT_EQ(run(specs, false), first) << "seeded requests sampled on the model's side must repeat";
    logit_steps = 0;
    const std::vector<Spec> two = {specs[0], specs[2]};
    const auto with_logprobs = run(two, true);
    EXPECT_GT(logit_steps, 0) << "a logprobs request needs the logits path";
    EXPECT_EQ(with_logprobs.at(0), first.at(0));
}

// A cache of f16 / int8 / fp8 rows: batch-invariant (each row is stored from its own token's values)
// through preemption and recompute, and its first-token logits close to the f32 cache's.
// rms_limit: the relative RMS of the logit difference allowed (measured in the printed line);
// top_margin: how far below the f32 cache's top logit the other cache's top token may score there.
void EngineBatch::check_cache_dtype(kernels::KvDtype dt, double rms_limit, float top_margin) {
    const char* name = kernels::ref::kv_dtype_name(dt);
    const std::vector<Spec> specs = make_specs(8, 13);
    const auto alone = run_alone(specs, dt);
    EngineConfig c;
    c.kv_dtype = dt;
    c.num_kv_blocks = small_ ? 12 : 6;  // preemption and recompute
    c.max_batch_tokens = 19;
    EngineStats stats;
    expect_same(alone, run_batched(specs, c, &stats), std::string(name) + " KV, tight budget, 19-token steps");
    // The first token's logits come from the prompt alone: close to the f32 cache's, same top token.
    const auto f32 = run_alone(specs);
    for (const auto& [id, r] : alone) {
        const std::vector<float>& a = r.logits.at(0);
        const std::vector<float>& b = f32.at(id).logits.at(0);
        double sum_sq = 0, sum_sq_diff = 0;
        float max_diff = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            sum_sq += double(b[i]) * b[i];
            sum_sq_diff += double(a[i] - b[i]) * (a[i] - b[i]);
            max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
        }
        const double rel_rms = std::sqrt(sum_sq_diff / sum_sq);
        const auto argmax = [](const std::vector<float>& v) {
            return std::max_element(v.begin(), v.end()) - v.begin();
        };
        std::printf("request %lld: %s vs f32 KV, first-token logits: relative RMS %.2e, max |diff| %.3f, argmax %s\n",
                    (long long)id, name, rel_rms, max_diff, argmax(a) == argmax(b) ? "same" : "differs");
        EXPECT_GT(max_diff, 0.0f) << "request " << id << ": " << name << " and f32 caches gave identical logits";
        EXPECT_LT(rel_rms, rms_limit) << "request " << id << " " << name;
        // The top token must not move, except between near-ties of the f32 logits: the other cache's top
        // token must score within top_margin of the f32 cache's top there (seen with f16: 22.327 vs
        // 22.368 on SmolLM2, fp8: 0.18 and 0.40 below; a wrong token from a broken cache is several
        // logits down).
        const float f32_top = b[size_t(argmax(b))], f32_of_other_top = b[size_t(argmax(a))];
        EXPECT_LT(f32_top - f32_of_other_top, top_margin)
            << "request " << id << ": top tokens " << argmax(a) << " (" << name << ") and " << argmax(b) << " (f32)";
    }
}

// Measured relative RMS (first-token logits against the f32 cache), stories260K / SmolLM2: f16
// 0.5-3e-4 / 0.7-3.7%, int8 0.3-1.2% / 0.6-4.2%, fp8 0.6-2.1% / 1.3-8.1% (E4M3 keeps 3 mantissa
// bits); a broken path (garbage rows, wrong slots, wrong scales) gives O(1).
TEST_P(EngineBatch, F16KvCacheIsBatchInvariantAndCloseToF32) {
    check_cache_dtype(kernels::KvDtype::kF16, 0.1, 0.1f);
}
TEST_P(EngineBatch, Int8KvCacheIsBatchInvariantAndCloseToF32) {
    check_cache_dtype(kernels::KvDtype::kI8, 0.1, 0.3f);
}
TEST_P(EngineBatch, Fp8KvCacheIsBatchInvariantAndCloseToF32) {
    check_cache_dtype(kernels::KvDtype::kFp8, 0.2, 0.6f);
}

TEST_P(EngineBatch, PrefixCacheHitsLeaveOutputsUnchanged) {
    const std::vector<Spec> specs = make_specs(6, 11);
    for (kernels::KvDtype dt : {kernels::KvDtype::kF32, kernels::KvDtype::kI8, kernels::KvDtype::kFp8}) {
        const std::string name = kernels::ref::kv_dtype_name(dt);
        const auto alone = run_alone(specs, dt);
        EngineConfig c;
        c.block_size = 8;
        c.kv_dtype = dt;
        auto core = make_core(c);
        std::map<int64_t, Result> first, second;
        // Sequentially, so every later request finds the earlier ones' blocks cached.
        for (size_t i = 0; i < specs.size(); ++i) {
            add(*core, int64_t(i), specs[i], first);
            while (core->step()) {
            }
        }
        for (size_t i = 0; i < specs.size(); ++i) {
            add(*core, int64_t(i), specs[i], second);
            while (core->step()) {
            }
        }
        expect_same(alone, first, name + " KV, first pass");
        expect_same(alone, second, name + " KV, second pass (prefixes cached)");
        for (size_t i = 0; i < specs.size(); ++i) {
            const int64_t len = int64_t(specs[i].prompt.size());
            EXPECT_EQ(second[int64_t(i)].cached_tokens, (len - 1) / 8 * 8)
                << name << " request " << i << " of " << len << " tokens";
        }
        EXPECT_EQ(core->stats().kv_blocks_in_use, 0) << name;
    }
}

TEST_P(EngineBatch, AbortsFreeBlocksAndRandomOpsKeepInvariants) {
    const std::vector<Spec> specs = make_specs(24, 3);
    std::map<int64_t, Spec> by_id;
    EngineConfig c;
    c.num_kv_blocks = small_ ? 20 : 10;
    c.max_batch_tokens = 37;
    auto core = make_core(c);
    std::map<int64_t, Result> results;
    std::mt19937_64 rng(5);
    size_t next = 0;
    std::vector<int64_t> aborted;
    for (int step = 0; step < 2000 && (next < specs.size() || core->has_work()); ++step) {
        const int op = int(rng() % 10);
        if (op < 3 && next < specs.size()) {
            add(*core, int64_t(next), specs[next], results);
            ++next;
        } else if (op == 3 && core->has_work()) {
            const int64_t id = int64_t(rng() % next);
            if (results[id].finishes == 0) aborted.push_back(id);
            core->abort(id);  // finished or unknown ids are no-ops
        } else {
            core->step();
        }
        const EngineStats s = core->stats();
        ASSERT_LE(s.kv_blocks_in_use, s.kv_blocks_total);
    }
    while (core->step()) {
    }
    EXPECT_FALSE(core->has_work());
    EXPECT_EQ(core->stats().kv_blocks_in_use, 0);
    ASSERT_FALSE(aborted.empty());
    for (int64_t id : aborted) EXPECT_EQ(results[id].reason, FinishReason::kAbort) << id;
    // Every request ended exactly once; the ones that were not aborted match their solo runs.
    std::vector<Spec> kept;
    std::vector<int64_t> kept_ids;
    for (const auto& [id, r] : results) {
        EXPECT_EQ(r.finishes, 1) << "request " << id;
        if (r.reason != FinishReason::kAbort) {
            kept.push_back(specs[size_t(id)]);
            kept_ids.push_back(id);
        }
    }
    const auto alone = run_alone(kept);
    for (size_t i = 0; i < kept.size(); ++i)
        EXPECT_EQ(results[kept_ids[i]].tokens, alone.at(int64_t(i)).tokens) << "request " << kept_ids[i];
}

TEST_P(EngineBatch, BadRequestsAreRejectedWithoutHarm) {
    EngineConfig c;
    c.max_model_len = 64;
    auto core = make_core(c);
    std::map<int64_t, Result> results;
    Request r;
    EXPECT_FALSE(core->add(1, r).is_ok()) << "empty prompt";
    r.prompt = {1, 2, -5};
    EXPECT_FALSE(core->add(1, r).is_ok()) << "negative token id";
    r.prompt = std::vector<int32_t>(70, 5);
    EXPECT_FALSE(core->add(1, r).is_ok()) << "prompt beyond the context";
    r.prompt = {1, 2, 3};
    r.params.max_tokens = 100;
    EXPECT_FALSE(core->add(1, r).is_ok()) << "max_tokens beyond the context";
    r.params.max_tokens = 4;
    r.params.top_p = 0.0f;
    EXPECT_FALSE(core->add(1, r).is_ok()) << "top_p = 0";
    EXPECT_FALSE(core->has_work());
    Spec ok;
    ok.prompt = {1, 2, 3};
    ok.params.max_tokens = 4;
    ok.params.temperature = 0;
    ok.params.ignore_eos = true;
    add(*core, 1, ok, results);
    EXPECT_FALSE(core->add(1, r).is_ok()) << "duplicate id";
    while (core->step()) {
    }
    EXPECT_EQ(results[1].tokens.size(), 4u);
    EXPECT_EQ(results[1].reason, FinishReason::kLength);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineBatch, ::testing::Values("stories260k", "smollm2"));

}  // namespace
}  // namespace kiln::engine
