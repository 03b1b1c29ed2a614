// Pipeline parallelism on one machine: loader::pp_stage_layers / pp_slice, and the staged model run
// by a job of ranks (threads: a world group and one tensor-parallel group per stage) against the
// whole model. Pipeline stages alone change no arithmetic (each token's row is computed as alone:
// batch invariance), so their logits must equal one rank's bit for bit, prompt and decode, with the
// default int8 activations too, for the dense families, the mixture-of-experts ones, stories260K and
// SmolLM2. Tensor x pipeline (TP 2 x PP 2) within f32 rounding of one rank (f32 activations). Then
// the serving engine over PP 2 and TP 2 x PP 2 against one rank's tokens and logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "dist/communicator.h"
#include "engine/engine_core.h"
#include "engine/parallel.h"
#include "loader/checkpoint_tokenizer.h"
#include "loader/layer_tensors.h"
#include "loader/pipeline_parallel.h"
#include "loader/tensor_parallel.h"
#include "model/cpu_model.h"
#include "support/parallel_engine_run.h"
#include "support/test_support.h"

namespace kiln {
namespace {

using loader::Checkpoint;

std::string family(const std::string& name) {
    const std::string here = __FILE__;
    return here.substr(0, here.rfind("/tests/")) + "/tests/golden/data/families/" + name;
}

TEST(PipelineParallel, StageLayers) {
    const std::pair<int64_t, int64_t> want[] = {{0, 8}, {8, 16}, {16, 23}, {23, 30}};  // the longer runs first
    for (int s = 0; s < 4; ++s) {
        auto r = loader::pp_stage_layers(30, s, 4);
        ASSERT_TRUE(r.is_ok());
        EXPECT_EQ(*r, want[s]) << "stage " << s;
    }
    auto one = loader::pp_stage_layers(5, 0, 1);
    ASSERT_TRUE(one.is_ok());
    EXPECT_EQ(one->second, 5);
    EXPECT_FALSE(loader::pp_stage_layers(3, 0, 4).is_ok());  // a stage with no layer
    EXPECT_FALSE(loader::pp_stage_layers(8, 2, 2).is_ok());  // no stage 2 of 2
    EXPECT_FALSE(loader::pp_stage_layers(8, 0, 0).is_ok());
}

TEST(PipelineParallel, SliceHoldsTheStagesTensorsOnly) {
    auto ck = loader::load_checkpoint(family("llama"));  // 2 layers, untied
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    ASSERT_EQ(ck->config.num_layers, 2);
    auto s0 = loader::pp_slice(*ck, 0, 2), s1 = loader::pp_slice(*ck, 1, 2);
    ASSERT_TRUE(s0.is_ok() && s1.is_ok()) << s0.status().to_string() << s1.status().to_string();
    EXPECT_NE(s0->find("token_embd.weight"), nullptr);
    EXPECT_EQ(s0->find("output.weight"), nullptr);
    EXPECT_NE(s0->find("blk.0.attn_q.weight"), nullptr);
    EXPECT_EQ(s0->find("blk.1.attn_q.weight"), nullptr);
    EXPECT_EQ(s1->find("token_embd.weight"), nullptr);
    EXPECT_NE(s1->find("output.weight"), nullptr);
    EXPECT_EQ(s1->find("blk.0.ffn_down.weight"), nullptr);
    EXPECT_NE(s1->find("blk.1.ffn_down.weight"), nullptr);
    EXPECT_NE(s1->find("output_norm.weight"), nullptr);
    EXPECT_EQ(s1->config.stage_begin, 1);
    EXPECT_EQ(s1->config.stage_end(), 2);
    // the parts add up to the whole: every tensor of the model is on some stage
    std::set<std::string> names;
    for (const auto* s : {&*s0, &*s1})
        for (const auto& t : s->tensors) names.insert(t.name);
    for (const auto& t : loader::checkpoint_tensors(ck->config)) EXPECT_TRUE(names.count(t.name)) << t.name;
    EXPECT_FALSE(loader::pp_slice(*s1, 0, 2).is_ok());  // a stage is not sliced again
    EXPECT_FALSE(loader::pp_slice(*ck, 0, 3).is_ok());  // 3 stages over 2 layers
    // tied embeddings: the last stage keeps token_embd for its output layer
    auto st = loader::load_checkpoint(test::testdata("models/stories260K/stories260K.bin"));
    if (st.is_ok() && st->config.tie_word_embeddings) {
        auto last = loader::pp_slice(*st, 1, 2);
        ASSERT_TRUE(last.is_ok());
        EXPECT_NE(last->find("token_embd.weight"), nullptr);
        // under TP the last stage's output rows are a view of them; the embeddings themselves go
        auto tp = loader::tp_slice(*last, 1, 2);
        ASSERT_TRUE(tp.is_ok()) << tp.status().to_string();
        EXPECT_EQ(tp->find("token_embd.weight"), nullptr);
        EXPECT_NE(tp->find("output.weight"), nullptr);
    }
}

// A job of tp x pp thread ranks: world rank r is stage r / tp, tensor-parallel rank r % tp. fn(rank
// checkpoint, world, stage group or null) runs on each; returns its results by rank.
template <typename Result, typename Fn>
std::vector<Result> run_job(const Checkpoint& ck, int tp, int pp, Fn fn) {
    auto world = dist::make_thread_group(tp * pp);
    std::vector<std::vector<std::unique_ptr<dist::Communicator>>> stage_groups;
    for (int s = 0; s < pp; ++s) stage_groups.push_back(tp > 1 ? dist::make_thread_group(tp) : decltype(world)());
    std::vector<Result> out(size_t(tp * pp));
    std::vector<std::thread> threads;
    for (int r = 0; r < tp * pp; ++r)
        threads.emplace_back([&, r] {
            dist::Communicator* w = world[size_t(r)].get();
            w->set_timeout_seconds(60);
            dist::Communicator* t = tp > 1 ? stage_groups[size_t(r / tp)][size_t(r % tp)].get() : nullptr;
            if (t) t->set_timeout_seconds(60);
            auto stage = loader::pp_slice(ck, r / tp, pp);
            auto part = stage.is_ok() ? loader::tp_slice(*stage, r % tp, tp) : core::Result<Checkpoint>(stage.status());
            if (!part.is_ok()) {
                out[size_t(r)].status = part.status();
                return;
            }
            out[size_t(r)] = fn(*part, w, t);
        });
    for (auto& th : threads) th.join();
    return out;
}

// Logits [tokens, vocab] of a 100-token prompt (a micro-batch per stage: model/cpu_model.cc
// kMicroTokens), then three decode steps (one micro-batch each).
struct Run {
    std::vector<float> logits;
    core::Status status;
};
Run run_model(const Checkpoint& ck, dist::Communicator* world, dist::Communicator* tp, const ops::LinearOptions& lo) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 100; ++i) prompt.push_back(int32_t((i * 37 + 5) % ck.config.vocab_size));
    Run out;
    core::ThreadPool pool(1);
    auto m = model::CpuModel::create(ck, &pool, lo);
    if (!m.is_ok()) return {{}, m.status()};
    (*m)->set_tensor_parallel(tp);
    (*m)->set_pipeline(world);
    model::KvCache cache((*m)->config(), int64_t(prompt.size()) + 3);
    std::vector<float> logits;
    if (core::Status s = (*m)->forward(prompt, cache, /*all_logits=*/true, logits); !s.is_ok()) return {{}, s};
    out.logits = logits;
    int32_t next = prompt.back();
    for (int step = 0; step < 3; ++step) {
        next = (next * 7 + 3) % int32_t(ck.config.vocab_size);
        const int32_t one[] = {next};
        if (core::Status s = (*m)->forward(one, cache, false, logits); !s.is_ok()) return {{}, s};
        out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    }
    return out;
}

// tol < 0: bit for bit; else within tol of the range of one rank's logits.
void expect_matches(const Checkpoint& ck, int tp, int pp, double tol, bool f32_activations) {
    ops::LinearOptions lo;
    lo.f32_activations = f32_activations;
    const Run whole = run_model(ck, nullptr, nullptr, lo);
    ASSERT_TRUE(whole.status.is_ok()) << whole.status.to_string();
    const auto runs = run_job<Run>(ck, tp, pp, [&](const Checkpoint& part, dist::Communicator* w, dist::Communicator* t) {
        return run_model(part, w, t, lo);
    });
    for (size_t r = 0; r < runs.size(); ++r) {
        ASSERT_TRUE(runs[r].status.is_ok()) << "rank " << r << ": " << runs[r].status.to_string();
        if (r > 0) {
            EXPECT_TRUE(runs[r].logits.empty()) << "rank " << r << " got logits";
        }
    }
    const std::vector<float>& got = runs[0].logits;
    ASSERT_EQ(got.size(), whole.logits.size());
    if (tol < 0) {
        size_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += got[i] != whole.logits[i];
        EXPECT_EQ(differ, 0u) << ck.path << " TP " << tp << " x PP " << pp << ": logits not bit-identical";
        return;
    }
    const auto [lo_it, hi_it] = std::minmax_element(whole.logits.begin(), whole.logits.end());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - double(whole.logits[i])));
    EXPECT_LE(worst, tol * (double(*hi_it) - double(*lo_it))) << ck.path << " TP " << tp << " x PP " << pp;
}

TEST(PipelineParallel, FamiliesMatchOneRank) {
    for (const char* name : {"llama", "llama3-rope", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mixtral",
                             "qwen2-moe", "qwen3-moe", "olmoe", "gpt-oss"}) {
        SCOPED_TRACE(name);
        auto ck = loader::load_checkpoint(family(name));
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        expect_matches(*ck, 1, 2, -1, false);  // stage boundaries change nothing: the same bits
        expect_matches(*ck, 1, 2, -1, true);
        if (!ck->config.qk_norm_full)  // OLMoE: tensor parallelism refuses its all-head q/k norms
            expect_matches(*ck, 2, 2, 1e-5, true);
    }
}

TEST(PipelineParallel, Stories260K) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto ck = loader::load_checkpoint(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    for (int pp : {2, 3, 5}) expect_matches(*ck, 1, pp, -1, false);  // 5 layers: one each at PP 5
    expect_matches(*ck, 2, 2, 1e-5, true);
    expect_matches(*ck, 4, 2, 1e-5, true);
}

TEST(PipelineParallel, SmolLM2Q4_1) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "SmolLM2 runs in the optimized build; the sanitizer pass covers the small models";
#endif
    const std::string path = test::smollm2_path();
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto ck = loader::load_checkpoint(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    expect_matches(*ck, 1, 2, -1, false);
    expect_matches(*ck, 1, 4, -1, false);
    expect_matches(*ck, 2, 2, 1e-5, true);  // SmolLM2's 3 KV heads as 2 + 1 on each stage
}

using test::EngineRun;

// stories260K and its 8 requests run by one engine alone (test::run_engine), what the parallel
// engines are held to.
void stories_alone(std::optional<Checkpoint>* ck, EngineRun* one) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto loaded = loader::load_checkpoint(path);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    ck->emplace(std::move(*loaded));
    *one = test::run_engine(**ck, **ck, nullptr, nullptr);
    ASSERT_TRUE(one->status.is_ok()) << one->status.to_string();
}

TEST(PipelineParallel, EngineMatchesOneRank) {
    std::optional<Checkpoint> ck;
    EngineRun one;
    stories_alone(&ck, &one);
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_EQ(one.tokens.size(), 8u);
    // (TP, PP, lanes: 0 = one batch in flight per stage, step size): the plain pipelines, one batch at a
    // time, and steps big enough for micro-batches (sequences cut between them).
    struct Job {
        int tp, pp, lanes;
        int64_t max_batch_tokens;
    };
    for (const Job job : {Job{1, 2, 0, 24}, Job{1, 3, 0, 24}, Job{2, 2, 0, 24}, Job{1, 2, 1, 24}, Job{1, 3, 0, 100},
                          Job{1, 2, 1, 100}}) {
        const int tp = job.tp, pp = job.pp;
        SCOPED_TRACE("lanes " + std::to_string(job.lanes) + ", step tokens " + std::to_string(job.max_batch_tokens));
        const auto runs = run_job<EngineRun>(*ck, tp, pp, [&](const Checkpoint& part, dist::Communicator* w, dist::Communicator* t) {
            return test::run_engine(part, part, t, w, job.lanes, job.max_batch_tokens);
        });
        for (size_t r = 0; r < runs.size(); ++r) ASSERT_TRUE(runs[r].status.is_ok()) << r << ": " << runs[r].status.to_string();
        EXPECT_EQ(runs[0].tokens, one.tokens) << "TP " << tp << " x PP " << pp;
        double worst = 0;
        for (const auto& [id, l] : one.logits) {
            ASSERT_EQ(runs[0].logits.at(id).size(), l.size());
            for (size_t i = 0; i < l.size(); ++i) worst = std::max(worst, double(std::fabs(runs[0].logits.at(id)[i] - l[i])));
        }
        if (tp == 1) {
            EXPECT_EQ(worst, 0.0) << "PP " << pp << ": the logits must be one rank's bits";
        } else {
            EXPECT_LE(worst, 1e-4) << "TP " << tp << " x PP " << pp;
        }
    }
}

// Requests aborted while their lane's batch is in flight: each ends once, with kAbort; the rest run
// as they do alone (the pipeline's ranks stay in step).
TEST(PipelineParallel, AbortWithBatchesInFlight) {
    std::optional<Checkpoint> ck;
    EngineRun one;
    stories_alone(&ck, &one);
    if (HasFatalFailure() || IsSkipped()) return;
    for (int abort_after : {1, 2, 5}) {
        SCOPED_TRACE("aborted after " + std::to_string(abort_after) + " steps");
        const auto runs = run_job<EngineRun>(*ck, 1, 2, [&](const Checkpoint& part, dist::Communicator* w, dist::Communicator* t) {
            return test::run_engine(part, part, t, w, 0, 24, abort_after);
        });
        for (size_t r = 0; r < runs.size(); ++r) ASSERT_TRUE(runs[r].status.is_ok()) << r << ": " << runs[r].status.to_string();
        for (int64_t id = 0; id < 8; ++id) {
            const std::vector<engine::FinishReason>& f = runs[0].finished.count(id) ? runs[0].finished.at(id)
                                                                                    : std::vector<engine::FinishReason>{};
            ASSERT_EQ(f.size(), 1u) << "request " << id << " finished " << f.size() << " times";
            if (id == 1 || id == 4) {
                EXPECT_EQ(f[0], engine::FinishReason::kAbort) << id;
            } else {
                EXPECT_EQ(f[0], engine::FinishReason::kLength) << id;
                EXPECT_EQ(runs[0].tokens.at(id), one.tokens.at(id)) << id;
            }
        }
    }
}

}  // namespace
}  // namespace kiln
