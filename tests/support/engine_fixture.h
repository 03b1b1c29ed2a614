// The serving engine's test fixture over a real model (parameter "stories260k" or "smollm2"; SmolLM2
// only where installed, and not in the sanitizer build): requests (Spec) with seeded sampling, run
// alone in fresh engines or batched in one, results (tokens, raw logits, finish) compared bit for bit.
// Used by engine_batch_test (batch invariance) and engine_spec_test (speculative decoding).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "kv/kv_storage.h"
#include "loader/checkpoint.h"
#include "loader/checkpoint_tokenizer.h"
#include "model/cpu_model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kiln::engine {

struct Result {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<std::vector<float>> logits;
    FinishReason reason = FinishReason::kNone;
    int finishes = 0;
    int64_t cached_tokens = 0;
};

struct Spec {
    std::vector<int32_t> prompt;
    sampling::SamplingParams params;
};

class EngineFixture : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        std::string path;
        if (GetParam() == "stories260k") {
            path = test::testdata("models/stories260K/stories260K.bin");
            if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no test data";
        } else {
#if defined(__SANITIZE_ADDRESS__)
            GTEST_SKIP() << "SmolLM2 runs in the optimized build; the sanitizer pass covers stories260K";
#endif
            path = test::smollm2_path();
            if (!test::file_exists(path)) KILN_SKIP_MISSING() << "SmolLM2 not installed (scripts/setup)";
        }
        auto ck = loader::load_checkpoint(path);
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        ck_ = std::move(*ck);
        auto tok = loader::find_tokenizer(ck_, "");
        ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
        tok_ = std::move(*tok);
        pool_ = std::make_unique<core::ThreadPool>(2);
        auto m = model::CpuModel::create(ck_, pool_.get());
        ASSERT_TRUE(m.is_ok()) << m.status().to_string();
        model_ = std::move(*m);
        small_ = GetParam() == "stories260k";
    }

    // 16 requests: prompt lengths 1..~90 (a third share a 40-token prefix), greedy and seeded
    // sampling with top-k / top-p / penalties, different output lengths.
    std::vector<Spec> make_specs(int n, uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const int32_t vocab = int32_t(model_->config().vocab_size);
        std::uniform_int_distribution<int32_t> pick(3, vocab - 1);
        std::vector<int32_t> shared(40);
        for (int32_t& t : shared) t = pick(rng);
        std::vector<Spec> specs;
        for (int i = 0; i < n; ++i) {
            Spec s;
            const int len = 1 + int(rng() % (small_ ? 90 : 40));
            if (i % 3 == 0) s.prompt = shared;
            while (int(s.prompt.size()) < len + (i % 3 == 0 ? 40 : 0)) s.prompt.push_back(pick(rng));
            s.params.max_tokens = int32_t(small_ ? 8 + rng() % 40 : 4 + rng() % 8);
            s.params.ignore_eos = i % 2 == 0;
            if (i % 4 == 1) {
                s.params.temperature = 0.0f;
            } else {
                s.params.temperature = 0.7f + 0.1f * float(i % 3);
                s.params.top_k = i % 5 == 0 ? 20 : 0;
                s.params.top_p = i % 2 ? 0.9f : 1.0f;
                s.params.presence_penalty = i % 7 == 0 ? 0.5f : 0.0f;
                s.params.seed = 1000 + uint64_t(i);
                s.params.has_seed = true;
            }
            specs.push_back(std::move(s));
        }
        return specs;
    }

    std::unique_ptr<EngineCore> make_core(const EngineConfig& c) {
        auto core = EngineCore::create(model_.get(), tok_.get(), c);
        EXPECT_TRUE(core.is_ok()) << core.status().to_string();
        return core.is_ok() ? std::move(*core) : nullptr;
    }

    void add(EngineCore& core, int64_t id, const Spec& s, std::map<int64_t, Result>& results) {
        Request r;
        r.prompt = s.prompt;
        r.params = s.params;
        r.return_logits = true;
        Result* res = &results[id];
        r.on_output = [res](const StepOutput& o) {
            res->tokens.insert(res->tokens.end(), o.token_ids.begin(), o.token_ids.end());
            res->text += o.text;
            for (const auto& l : o.logits) res->logits.push_back(l);
            if (o.finished) {
                res->reason = o.finish_reason;
                res->cached_tokens = o.cached_tokens;
                ++res->finishes;
            }
        };
        ASSERT_TRUE(core.add(id, std::move(r)).is_ok());
    }

    // Every spec alone, each in a fresh engine (`base`'s settings) without a prefix cache.
    std::map<int64_t, Result> run_alone(const std::vector<Spec>& specs,
                                        kernels::KvDtype kv_dtype = kernels::KvDtype::kF32,
                                        const EngineConfig& base = {}) {
        std::map<int64_t, Result> out;
        EngineConfig c = base;
        c.kv_dtype = kv_dtype;
        c.prefix_cache = false;
        c.num_kv_blocks = 256;
        for (size_t i = 0; i < specs.size(); ++i) {
            auto core = make_core(c);
            add(*core, int64_t(i), specs[i], out);
            while (core->step()) {
            }
        }
        return out;
    }

    std::map<int64_t, Result> run_batched(const std::vector<Spec>& specs, const EngineConfig& c, EngineStats* stats) {
        std::map<int64_t, Result> out;
        auto core = make_core(c);
        for (size_t i = 0; i < specs.size(); ++i) add(*core, int64_t(i), specs[i], out);
        while (core->step()) {
        }
        EXPECT_FALSE(core->has_work());
        *stats = core->stats();
        EXPECT_EQ(stats->kv_blocks_in_use, 0) << "blocks left referenced after every request finished";
        return out;
    }

    static void expect_same(const std::map<int64_t, Result>& want, const std::map<int64_t, Result>& got,
                            const std::string& what) {
        ASSERT_EQ(want.size(), got.size()) << what;
        for (const auto& [id, w] : want) {
            const Result& g = got.at(id);
            EXPECT_EQ(g.finishes, 1) << what << ": request " << id;
            EXPECT_EQ(g.reason, w.reason) << what << ": request " << id;
            ASSERT_EQ(g.tokens, w.tokens) << what << ": request " << id;
            ASSERT_EQ(g.logits.size(), w.logits.size()) << what << ": request " << id;
            for (size_t s = 0; s < w.logits.size(); ++s) {
                ASSERT_EQ(g.logits[s].size(), w.logits[s].size());
                EXPECT_EQ(0, std::memcmp(g.logits[s].data(), w.logits[s].data(), w.logits[s].size() * sizeof(float)))
                    << what << ": request " << id << " step " << s << ": logits differ from the request run alone";
            }
        }
    }

    // A K/V pool the test owns (f32), as a model with its own pool (PagedModel) would hold it.
    void own_pool(int64_t num_blocks, int64_t block_size, std::unique_ptr<kv::KvStorage>& storage,
                  model::KvLayers& layers) const {
        const loader::ModelConfig& mc = model_->config();
        auto created = kv::KvStorage::create(mc.num_layers, num_blocks, block_size, 4 * mc.kv_dim());
        ASSERT_TRUE(created.is_ok()) << created.status().to_string();
        storage = std::move(*created);
        for (int64_t l = 0; l < mc.num_layers; ++l) {
            layers.k.push_back(storage->k(l));
            layers.v.push_back(storage->v(l));
        }
        layers.block_size = block_size;
        layers.num_slots = num_blocks * block_size;
    }

    loader::Checkpoint ck_;
    std::unique_ptr<tokenizer::Tokenizer> tok_;
    std::unique_ptr<core::ThreadPool> pool_;
    std::unique_ptr<model::CpuModel> model_;
    bool small_ = true;
};

}  // namespace kiln::engine
