// Speculative decoding in the serving engine (stories260K, SmolLM2-135M where installed), with each
// proposer: n-gram lookup, a draft model (the model itself: every draft right) and self-speculation
// (its first layer as the draft: most drafts wrong):
// - greedy output, and the raw logits of every token bit for bit, equal decoding without drafts, alone
//   and batched beside sampled requests, under preemption, tiny step budgets, odd block sizes, stop
//   strings, penalties and logprobs, and on a model's greedy path (ids back instead of logits);
// - sampled output keeps the target distribution: a chi-square test of the second generated token
//   (the first one drafts are verified for) against its exact law computed from the model's logits,
//   at temperature 1 and top-p 0.9; a deliberately wrong acceptance rule fails the same test;
// - random add / abort / step with drafts keeps the pool's invariants and every callback ends once.
// Label `unit` (the sanitizer pass runs it on stories260K).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/chi_square.h"
#include "support/engine_fixture.h"

namespace kiln::engine {
namespace {

class EngineSpec : public EngineFixture {
protected:
    void SetUp() override {
        EngineFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        first_layer_ck_ = ck_;
        ASSERT_TRUE(loader::keep_first_layers(first_layer_ck_, 1).is_ok());
        auto m = model::CpuModel::create(first_layer_ck_, pool_.get());
        ASSERT_TRUE(m.is_ok()) << m.status().to_string();
        first_layer_ = std::move(*m);
    }

    static EngineConfig ngram(EngineConfig c = {}) {
        c.spec.method = SpecConfig::Method::kNgram;
        c.spec.num_draft = 5;
        c.spec.ngram_min = 1;  // drafts as often as possible: the point is to verify many
        c.spec.ngram_max = 3;
        c.spec.max_batch = 0;
        return c;
    }
    static EngineConfig drafted_by(model::CpuModel* draft, EngineConfig c = {}) {
        c.spec.method = SpecConfig::Method::kDraftModel;
        c.spec.draft_model = draft;
        c.spec.num_draft = 4;
        c.spec.max_batch = 0;
        return c;
    }
    struct Method {
        const char* name;
        EngineConfig config;
        int64_t min_accepted;  // drafts the greedy test must see accepted (a first layer guesses badly:
                               // its drafts are mostly rejected, and it backs off after total misses)
    };
    // Every proposer over `base`.
    std::vector<Method> methods(const EngineConfig& base = {}) {
        return {{"ngram", ngram(base), small_ ? 20 : 10},
                {"draft model (itself)", drafted_by(model_.get(), base), small_ ? 20 : 10},
                {"first layer", drafted_by(first_layer_.get(), base), 0}};
    }

    // Random add / abort / step over `specs` with `config`: the pool's invariants every step, every
    // callback once, the length limits kept, and the greedy requests that finished equal to decoding
    // without drafts.
    void random_ops(const std::vector<Spec>& specs, const EngineConfig& config) {
        auto core = make_core(config);
        std::map<int64_t, Result> results;
        std::mt19937_64 rng(5);
        size_t next = 0;
        std::vector<int64_t> aborted;
        for (int step = 0; step < 3000 && (next < specs.size() || core->has_work()); ++step) {
            const int op = int(rng() % 10);
            if (op < 3 && next < specs.size()) {
                add(*core, int64_t(next), specs[next], results);
                ++next;
            } else if (op == 3 && core->has_work()) {
                const int64_t id = int64_t(rng() % next);
                if (results[id].finishes == 0) aborted.push_back(id);
                core->abort(id);
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
        EXPECT_GT(core->stats().spec_draft_tokens, 0);
        ASSERT_FALSE(aborted.empty());
        for (int64_t id : aborted) EXPECT_EQ(results[id].reason, FinishReason::kAbort) << id;
        std::vector<Spec> greedy;
        std::vector<int64_t> greedy_ids;
        for (const auto& [id, r] : results) {
            EXPECT_EQ(r.finishes, 1) << "request " << id;
            if (r.reason != FinishReason::kAbort && specs[size_t(id)].params.temperature == 0.0f) {
                greedy.push_back(specs[size_t(id)]);
                greedy_ids.push_back(id);
            }
            const Spec& s = specs[size_t(id)];
            if (r.reason == FinishReason::kLength) EXPECT_EQ(int64_t(r.tokens.size()), s.params.max_tokens) << id;
            EXPECT_LE(int64_t(r.tokens.size()), s.params.max_tokens) << id;
        }
        const auto plain = run_alone(greedy);
        for (size_t i = 0; i < greedy.size(); ++i)
            EXPECT_EQ(results[greedy_ids[i]].tokens, plain.at(int64_t(i)).tokens) << "request " << greedy_ids[i];
    }

    loader::Checkpoint first_layer_ck_;
    std::unique_ptr<model::CpuModel> first_layer_;

    // Prompts that repeat a random segment (lookup finds drafts there, and outputs tend to repeat too);
    // greedy, some with a repetition or presence penalty, some asking for logprobs; outputs long enough
    // to repeat themselves.
    std::vector<Spec> repeating_specs(int n, uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const int32_t vocab = int32_t(model_->config().vocab_size);
        std::uniform_int_distribution<int32_t> pick(3, vocab - 1);
        std::vector<Spec> specs;
        for (int i = 0; i < n; ++i) {
            std::vector<int32_t> seg(size_t(6 + rng() % 10));
            for (int32_t& t : seg) t = pick(rng);
            Spec s;
            for (int r = 0; r < 3; ++r) {
                s.prompt.insert(s.prompt.end(), seg.begin(), seg.end() - (r == 2 ? long(seg.size() / 2) : 0));
                for (uint64_t k = rng() % 4; k > 0 && r < 2; --k) s.prompt.push_back(pick(rng));
            }
            s.params.temperature = 0.0f;
            s.params.max_tokens = int32_t(small_ ? 24 + rng() % 40 : 8 + rng() % 16);
            s.params.ignore_eos = i % 2 == 0;
            if (i % 4 == 1) s.params.repetition_penalty = 1.2f;
            if (i % 4 == 2) s.params.logprobs = 3;
            if (i % 4 == 3) s.params.presence_penalty = 0.5f;
            specs.push_back(std::move(s));
        }
        return specs;
    }

    static std::map<int64_t, Result> first(const std::map<int64_t, Result>& all, size_t n) {
        std::map<int64_t, Result> out;
        for (const auto& [id, r] : all)
            if (size_t(id) < n) out.emplace(id, r);
        return out;
    }
};

TEST_P(EngineSpec, GreedyOutputIsUnchangedAloneAndBatched) {
    const std::vector<Spec> specs = repeating_specs(12, 21);
    const auto plain = run_alone(specs);
    for (const Method& m : methods()) expect_same(plain, run_alone(specs, kernels::KvDtype::kF32, m.config), m.name);
    // Batched beside seeded sampling requests (their draws may differ with drafts; not compared).
    std::vector<Spec> mixed = specs;
    for (const Spec& s : make_specs(6, 9))
        if (s.params.temperature > 0) mixed.push_back(s);
    struct Case {
        const char* name;
        EngineConfig config;
    };
    std::vector<Case> cases;
    cases.push_back({"default", {}});
    EngineConfig tight;  // forces preemption; drafts get only the blocks left over
    tight.num_kv_blocks = small_ ? 14 : 7;
    cases.push_back({"tiny KV budget", tight});
    EngineConfig chunked;  // drafts cut by the step budget, prompts in chunks
    chunked.max_batch_tokens = 7;
    EngineConfig odd;
    odd.block_size = 5;
    if (small_) {  // SmolLM2 (slower) runs the two above
        cases.push_back({"7-token steps", chunked});
        cases.push_back({"block size 5", odd});
    }
    for (const Case& c : cases) {
        for (const Method& m : methods(c.config)) {
            const std::string what = std::string(c.name) + ", " + m.name;
            EngineStats stats;
            const auto got = run_batched(mixed, m.config, &stats);
            expect_same(plain, first(got, specs.size()), what);
            EXPECT_GT(stats.spec_draft_tokens, 20) << what << ": the drafts must be exercised";
            EXPECT_GE(stats.spec_accepted_tokens, m.min_accepted) << what;
            if (m.config.spec.draft_model != model_.get())  // the model drafting for itself is always right
                EXPECT_GT(stats.spec_draft_tokens, stats.spec_accepted_tokens) << what << ": and some rejected";
            if (c.config.num_kv_blocks > 0) EXPECT_GT(stats.num_preemptions, 0) << what;
        }
    }
}

TEST_P(EngineSpec, StopStringsInsideAcceptedDraftsEndTheRequestAsWithout) {
    std::vector<Spec> specs = repeating_specs(8, 33);
    const auto plain = run_alone(specs);
    int with_stop = 0;
    for (size_t i = 0; i < specs.size(); ++i) {  // a stop string from the middle of each output
        const std::string& text = plain.at(int64_t(i)).text;
        if (text.size() < 12) continue;
        specs[i].params.stop_strings = {text.substr(text.size() / 2, 3)};
        ++with_stop;
    }
    ASSERT_GT(with_stop, 2);
    const auto stopped = run_alone(specs);
    for (const Method& m : methods()) {
        const auto drafted = run_alone(specs, kernels::KvDtype::kF32, m.config);
        expect_same(stopped, drafted, m.name);
        for (const auto& [id, r] : stopped) EXPECT_EQ(drafted.at(id).text, r.text) << m.name << ": request " << id;
    }
}

// The model's greedy step (ids back, as a GPU returns them) verifies the drafts by their argmax.
TEST_P(EngineSpec, GreedyPathVerifiesDraftsFromIds) {
    std::vector<Spec> specs = repeating_specs(6, 5);
    for (Spec& s : specs) {  // plain greedy: no penalties or logprobs
        s.params.repetition_penalty = 1.0f;
        s.params.presence_penalty = 0.0f;
        s.params.logprobs = -1;
    }
    const auto plain = run_alone(specs);
    const loader::ModelConfig& mc = model_->config();
    std::unique_ptr<kv::KvStorage> storage;
    model::KvLayers layers;
    ASSERT_NO_FATAL_FAILURE(own_pool(64, 16, storage, layers));
    int64_t logit_steps = 0, greedy_steps = 0;
    PagedModel pm;
    pm.config = &mc;
    pm.num_kv_blocks = 64;
    pm.block_size = 16;
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
    auto core = EngineCore::create(std::move(pm), tok_.get(), ngram());
    ASSERT_TRUE(core.is_ok()) << core.status().to_string();
    std::map<int64_t, std::vector<int32_t>> tokens;
    for (size_t i = 0; i < specs.size(); ++i) {
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
    EXPECT_EQ(logit_steps, 0);
    EXPECT_GT((*core)->stats().spec_accepted_tokens, 0);
    for (const auto& [id, want] : plain) EXPECT_EQ(tokens[id], want.tokens) << "request " << id;
}

TEST_P(EngineSpec, RequestsCanOptOut) {
    const std::vector<Spec> specs = repeating_specs(3, 8);
    auto core = make_core(ngram());
    std::map<int64_t, Result> results;
    for (size_t i = 0; i < specs.size(); ++i) {
        Request r;
        r.prompt = specs[i].prompt;
        r.params = specs[i].params;
        r.speculate = false;
        r.on_output = [res = &results[int64_t(i)]](const StepOutput& o) {
            res->tokens.insert(res->tokens.end(), o.token_ids.begin(), o.token_ids.end());
        };
        ASSERT_TRUE(core->add(int64_t(i), std::move(r)).is_ok());
    }
    while (core->step()) {
    }
    EXPECT_EQ(core->stats().spec_draft_tokens, 0);
    const auto plain = run_alone(specs);
    for (const auto& [id, r] : results) EXPECT_EQ(r.tokens, plain.at(id).tokens) << "request " << id;
}

TEST_P(EngineSpec, RandomOpsWithDraftsKeepInvariants) {
    std::vector<Spec> specs = repeating_specs(16, 3);
    for (const Spec& s : make_specs(8, 4)) specs.push_back(s);  // greedy and sampled, without repeats
    EngineConfig c;
    c.num_kv_blocks = small_ ? 20 : 10;
    c.max_batch_tokens = 37;
    for (const Method& m : methods(c)) {
        SCOPED_TRACE(m.name);
        random_ops(specs, m.config);
    }
}

// The second generated token of many seeded requests (temperature 1, top-p 0.9) against its exact
// law p(x2) = sum over x1 of p(x1) p(x2 | x1), each factor the sampler's distribution of the
// model's logits. The first token comes from the prefill; the second is where drafts (n-gram
// lookup in the prompt, which repeats itself) are verified.
class SpecDistribution : public EngineSpec {
protected:
    struct Outcome {
        test::ChiSquare fit;
        EngineStats stats;
    };

    Outcome sample_second_token(const EngineConfig& config, int n) {
        const std::vector<int32_t> prompt =
            tok_->encode("Tom had a red ball, a blue car and a big hat. Tom liked the red ball, the blue car and the big");
        sampling::SamplingParams p;
        p.temperature = 1.0f;
        p.top_p = 0.9f;
        p.max_tokens = 3;  // a draft for the second token needs room for a token after it
        p.ignore_eos = true;
        const int32_t V = int32_t(model_->config().vocab_size);
        // Exact law: the raw logits of the prompt and of the prompt plus each likely first token.
        auto row_of = [&](const std::vector<int32_t>& ids) {
            Spec s;
            s.prompt = ids;
            s.params.temperature = 0.0f;
            s.params.max_tokens = 1;
            return run_alone({s}).at(0).logits.at(0);
        };
        sampling::Sampler exact(p, V, int32_t(prompt.size()));
        std::vector<float> row = row_of(prompt);
        std::map<int32_t, double> p2;
        for (const sampling::TokenProb& t1 : exact.distribution(row, prompt)) {
            std::vector<int32_t> longer = prompt;
            longer.push_back(t1.id);
            std::vector<float> row2 = row_of(longer);
            for (const sampling::TokenProb& t2 : exact.distribution(row2, longer)) p2[t2.id] += double(t1.prob) * t2.prob;
        }
        std::vector<Spec> specs = std::vector<Spec>(size_t(n));
        for (int i = 0; i < n; ++i) {
            specs[size_t(i)].prompt = prompt;
            specs[size_t(i)].params = p;
            specs[size_t(i)].params.seed = 7000 + uint64_t(i);
            specs[size_t(i)].params.has_seed = true;
        }
        EngineConfig c = config;
        c.max_seqs = 64;
        Outcome out;
        const auto got = run_batched(specs, c, &out.stats);
        std::map<int32_t, int64_t> counts;
        for (const auto& [id, r] : got) {
            EXPECT_EQ(r.tokens.size(), 3u);
            if (r.tokens.size() == 3) ++counts[r.tokens[1]];
        }
        out.fit = test::chi_square(p2, counts);
        return out;
    }
};

TEST_P(SpecDistribution, SampledTokensFollowTheTargetDistribution) {
    if (!small_) GTEST_SKIP() << "stories260K's small vocabulary keeps the bins full";
    const int n = 3000;
    const Outcome base = sample_second_token(EngineConfig{}, n);
    EXPECT_GT(base.fit.p_value, 1e-3) << "without drafts: chi2 " << base.fit.statistic << " dof " << base.fit.dof;
    const Outcome spec = sample_second_token(ngram(), n);
    EXPECT_GT(spec.fit.p_value, 1e-3) << "with drafts: chi2 " << spec.fit.statistic << " dof " << spec.fit.dof;
    EXPECT_GT(spec.stats.spec_verify_steps, n / 2) << "drafts must be verified for most second tokens";
    EXPECT_GT(spec.stats.spec_accepted_tokens, n / 20);
    EXPECT_GT(spec.stats.spec_draft_tokens - spec.stats.spec_accepted_tokens, n / 20) << "and rejected";
    // Draft models draw sampled requests' drafts from their own distribution q, verified with it.
    // The model drafting for itself has q = p: every draft is accepted. Its first layer is far off.
    for (model::CpuModel* draft : {model_.get(), first_layer_.get()}) {
        const bool itself = draft == model_.get();
        const Outcome d = sample_second_token(drafted_by(draft), n);
        EXPECT_GT(d.fit.p_value, 1e-3) << (itself ? "itself" : "first layer") << " as the draft: chi2 "
                                       << d.fit.statistic << " dof " << d.fit.dof;
        EXPECT_GT(d.stats.spec_verify_steps, itself ? n / 2 : n / 10);
        if (itself)
            EXPECT_EQ(d.stats.spec_accepted_tokens, d.stats.spec_draft_tokens) << "q = p must accept every draft";
        else
            EXPECT_GT(d.stats.spec_draft_tokens - d.stats.spec_accepted_tokens, n / 20) << "rejections";
        std::printf("%s as the draft: p-value %.3g, %lld drafts, %lld accepted\n", itself ? "itself" : "first layer",
                    d.fit.p_value, (long long)d.stats.spec_draft_tokens, (long long)d.stats.spec_accepted_tokens);
    }
    // A wrong rule: accept with probability p(d), else draw from p itself instead of from the
    // residual max(0, p - q). It over-weights the drafted token; the same test must catch it.
    EngineConfig wrong = ngram();
    std::mt19937_64 rng(11);
    wrong.spec.verify_for_tests = [&rng](sampling::Sampler& s, std::span<float> logits,
                                         std::span<const int32_t> history, int32_t draft) {
        std::vector<float> copy(logits.begin(), logits.end());
        double pd = 0;
        for (const sampling::TokenProb& t : s.distribution(copy, history)) pd = t.id == draft ? t.prob : pd;
        if (double(rng() >> 11) * 0x1.0p-53 < pd) return sampling::Sampler::Verdict{draft, true};
        const int32_t tok = s.sample(logits, history);
        return sampling::Sampler::Verdict{tok, tok == draft};
    };
    const Outcome bad = sample_second_token(wrong, n);
    EXPECT_LT(bad.fit.p_value, 1e-6) << "the wrong rule passed: chi2 " << bad.fit.statistic << " dof " << bad.fit.dof;
    std::printf("p-values: without drafts %.3g, with drafts %.3g (%lld verified, %lld accepted), wrong rule %.3g\n",
                base.fit.p_value, spec.fit.p_value, (long long)spec.stats.spec_draft_tokens,
                (long long)spec.stats.spec_accepted_tokens, bad.fit.p_value);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineSpec, ::testing::Values("stories260k", "smollm2"));
INSTANTIATE_TEST_SUITE_P(Models, SpecDistribution, ::testing::Values("stories260k"));

}  // namespace
}  // namespace kiln::engine
