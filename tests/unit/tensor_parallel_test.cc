// Tensor parallelism on one machine: loader::tp_slice's shares, and the sliced model run by a group
// of ranks (threads, dist::make_thread_group) against the whole model: the same logits within f32
// rounding at every position, prompt and decode, for the dense families (biases, q/k norms,
// soft-capping, sandwich norms, sliding windows), stories260K and SmolLM2, with the KV heads split
// (TP <= KV heads) and replicated (TP > KV heads), and every rank's logits bit-identical. Then the
// serving engine over a TP group (rank 0 the engine, the others engine::run_follower): a batch of
// greedy and seeded requests gives the tokens one rank gives, and logits within f32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "dist/communicator.h"
#include "engine/engine_core.h"
#include "engine/parallel.h"
#include "loader/checkpoint_tokenizer.h"
#include "loader/layer_tensors.h"
#include "loader/tensor_parallel.h"
#include "model/cpu_model.h"
#include "support/parallel_engine_run.h"
#include "support/test_support.h"

namespace kiln {
namespace {

using loader::Checkpoint;
using loader::ModelConfig;
using loader::TpShare;

std::string family(const std::string& name) {
    const std::string here = __FILE__;
    return here.substr(0, here.rfind("/tests/")) + "/tests/golden/data/families/" + name;
}

TEST(TensorParallel, Shares) {
    ModelConfig c;  // SmolLM2-135M: 9 query heads over 3 KV heads, 1536 hidden units
    c.num_heads = 9;
    c.num_kv_heads = 3;
    c.intermediate_size = 1536;
    c.vocab_size = 49152;
    auto s0 = loader::tp_share(c, 0, 2, 32), s1 = loader::tp_share(c, 1, 2, 32);
    ASSERT_TRUE(s0.is_ok() && s1.is_ok());
    EXPECT_EQ(s0->kv_head_begin, 0);  // the larger share on rank 0 (its row size sizes the pools)
    EXPECT_EQ(s0->num_kv_heads, 2);
    EXPECT_EQ(s0->num_heads, 6);
    EXPECT_EQ(s1->kv_head_begin, 2);
    EXPECT_EQ(s1->num_kv_heads, 1);
    EXPECT_EQ(s1->q_head_begin, 6);
    EXPECT_EQ(s1->num_heads, 3);
    EXPECT_EQ(s0->ffn_begin, 0);
    EXPECT_EQ(s0->ffn_size, 768);
    EXPECT_EQ(s1->ffn_begin, 768);
    EXPECT_EQ(s0->vocab_size, 24576);
    EXPECT_EQ(s1->vocab_begin, 24576);
    EXPECT_EQ(s1->vocab_size, 24576);
    auto k = loader::tp_share(c, 1, 2, 256);  // 6 K-quant blocks: 3 each
    ASSERT_TRUE(k.is_ok());
    EXPECT_EQ(k->ffn_begin, 768);
    // more ranks than KV heads: each KV head on two ranks, its 3 query heads split 1 / 2
    c.num_heads = 6;
    c.num_kv_heads = 2;
    std::vector<TpShare> s;
    for (int r = 0; r < 4; ++r) {
        auto x = loader::tp_share(c, r, 4);
        ASSERT_TRUE(x.is_ok()) << x.status().to_string();
        s.push_back(*x);
    }
    EXPECT_EQ(s[0].kv_head_begin, 0);
    EXPECT_EQ(s[1].kv_head_begin, 0);
    EXPECT_EQ(s[2].kv_head_begin, 1);
    EXPECT_EQ(s[0].num_heads + s[1].num_heads, 3);
    EXPECT_EQ(s[3].q_head_begin + s[3].num_heads, 6);
    for (const TpShare& x : s) EXPECT_EQ(x.num_kv_heads, 1);
    // the vocabulary in shares of ceil(V / ranks), the last one shorter
    c.vocab_size = 10;
    auto v3 = loader::tp_share(c, 3, 4);
    ASSERT_TRUE(v3.is_ok());
    EXPECT_EQ(v3->vocab_begin, 9);
    EXPECT_EQ(v3->vocab_size, 1);
    c.vocab_size = 3;
    EXPECT_FALSE(loader::tp_share(c, 3, 4).is_ok());  // nothing left for rank 3
    c.vocab_size = 10;
    // impossible splits are errors
    EXPECT_FALSE(loader::tp_share(c, 0, 3).is_ok());   // 3 ranks over 2 KV heads
    EXPECT_FALSE(loader::tp_share(c, 0, 8).is_ok());   // more ranks than query heads
    EXPECT_FALSE(loader::tp_share(c, 2, 2).is_ok());   // no rank 2 of 2
    EXPECT_FALSE(loader::tp_share(c, 0, 2, 1000).is_ok());  // 1536 is not whole blocks of 1000
    // experts: whole experts in runs, the larger first (8 experts at 3 ranks: 3, 3, 2); MLP units whole
    c.num_experts = 8;
    c.num_heads = 6;
    c.num_kv_heads = 3;
    std::vector<TpShare> e;
    for (int r = 0; r < 3; ++r) {
        auto x = loader::tp_share(c, r, 3);
        ASSERT_TRUE(x.is_ok()) << x.status().to_string();
        e.push_back(*x);
    }
    EXPECT_EQ(e[0].expert_begin, 0);
    EXPECT_EQ(e[0].num_experts, 3);
    EXPECT_EQ(e[1].expert_begin, 3);
    EXPECT_EQ(e[1].num_experts, 3);
    EXPECT_EQ(e[2].expert_begin, 6);
    EXPECT_EQ(e[2].num_experts, 2);
    EXPECT_EQ(e[2].ffn_size, c.intermediate_size);
    c.num_experts = 2;
    EXPECT_FALSE(loader::tp_share(c, 0, 3).is_ok());  // more ranks than experts
}

// Logits [tokens, vocab] of a prompt and then three decode steps, by one rank or a group.
struct Run {
    std::vector<float> logits;
    core::Status status;
};
Run run_model(const Checkpoint& ck, dist::Communicator* tp, const std::vector<int32_t>& prompt,
              const ops::LinearOptions& lo) {
    Run out;
    core::ThreadPool pool(1);
    auto m = model::CpuModel::create(ck, &pool, lo);
    if (!m.is_ok()) return {{}, m.status()};
    (*m)->set_tensor_parallel(tp);
    model::KvCache cache((*m)->config(), int64_t(prompt.size()) + 3);
    auto first = (*m)->forward(prompt, cache, /*all_logits=*/true);
    if (!first.is_ok()) return {{}, first.status()};
    out.logits = *first;
    int32_t next = prompt.back();
    for (int step = 0; step < 3; ++step) {
        next = (next * 7 + 3) % int32_t(ck.config.vocab_size);
        auto l = (*m)->forward(std::vector<int32_t>{next}, cache, false);
        if (!l.is_ok()) return {{}, l.status()};
        out.logits.insert(out.logits.end(), l->begin(), l->end());
    }
    return out;
}

std::vector<Run> run_group(const Checkpoint& ck, int n, const std::vector<int32_t>& prompt, const ops::LinearOptions& lo) {
    auto group = dist::make_thread_group(n);
    std::vector<Run> runs(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            group[size_t(r)]->set_timeout_seconds(30);
            auto sliced = loader::tp_slice(ck, r, n);
            if (!sliced.is_ok()) {
                runs[size_t(r)].status = sliced.status();
                return;
            }
            runs[size_t(r)] = run_model(*sliced, group[size_t(r)].get(), prompt, lo);
        });
    for (auto& t : threads) t.join();
    return runs;
}

// Every rank's logits bit for bit the same, and within `tol` of the range of the whole model's
// (tol < 0: not compared).
void expect_tp_matches(const Checkpoint& ck, const std::vector<int>& sizes, double tol, bool f32_activations) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 11; ++i) prompt.push_back(int32_t((i * 37 + 5) % ck.config.vocab_size));
    ops::LinearOptions lo;
    lo.f32_activations = f32_activations;
    const Run whole = run_model(ck, nullptr, prompt, lo);
    ASSERT_TRUE(whole.status.is_ok()) << whole.status.to_string();
    const auto [lo_it, hi_it] = std::minmax_element(whole.logits.begin(), whole.logits.end());
    const double range = double(*hi_it) - double(*lo_it);
    for (int n : sizes) {
        const std::vector<Run> runs = run_group(ck, n, prompt, lo);
        for (int r = 0; r < n; ++r) {
            ASSERT_TRUE(runs[size_t(r)].status.is_ok()) << "TP " << n << " rank " << r << ": " << runs[size_t(r)].status.to_string();
            ASSERT_EQ(runs[size_t(r)].logits.size(), whole.logits.size());
            EXPECT_TRUE(runs[size_t(r)].logits == runs[0].logits) << "TP " << n << ": rank " << r << " differs from rank 0";
        }
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < whole.logits.size(); ++i) {
            const double d = std::fabs(double(runs[0].logits[i]) - double(whole.logits[i]));
            if (d > worst) worst = d, at = i;
        }
        if (tol >= 0) {
            EXPECT_LE(worst, tol * range) << ck.path << " TP " << n << ": worst " << worst << " at " << at << " (range "
                                      << range << ")";
        }
    }
}

TEST(TensorParallel, FamiliesMatchOneRank) {
    for (const char* name : {"llama", "llama3-rope", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}) {
        SCOPED_TRACE(name);
        auto ck = loader::load_checkpoint(family(name));
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        // 4 query heads over 2 KV heads: TP 2 splits the KV heads, TP 4 replicates them
        expect_tp_matches(*ck, {2, 4}, 1e-5, /*f32_activations=*/true);
    }
}

// A mixture of experts: attention split by heads, experts spread over the ranks (expert
// parallelism: each rank runs its experts on every token routed to them, the outputs go to the
// token's rank by all-to-all and are summed there). Mixtral, Qwen2-MoE (shared expert), Qwen3-MoE
// (8 experts, top 3), gpt-oss (biased router, expert biases, attention sinks, sliding windows).
TEST(TensorParallel, ExpertParallelFamiliesMatchOneRank) {
    for (const char* name : {"mixtral", "qwen2-moe", "qwen3-moe", "gpt-oss"}) {
        SCOPED_TRACE(name);
        auto ck = loader::load_checkpoint(family(name));
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        expect_tp_matches(*ck, {2, 4}, 1e-5, /*f32_activations=*/true);
        expect_tp_matches(*ck, {2}, -1, false);  // ranks agree bit for bit with int8 activations too
        auto s = loader::tp_slice(*ck, 1, 2);
        ASSERT_TRUE(s.is_ok()) << s.status().to_string();
        const int64_t half = (ck->config.num_experts + 1) / 2;
        EXPECT_EQ(s->config.expert_begin, half);
        EXPECT_EQ(s->find(loader::layer_tensor_name(0, loader::LayerTensor::kExpertDown, 0)), nullptr);
        EXPECT_NE(s->find(loader::layer_tensor_name(0, loader::LayerTensor::kExpertDown, half)), nullptr);
        EXPECT_NE(s->find(loader::layer_tensor_name(0, loader::LayerTensor::kRouter)), nullptr);
    }
    auto olmoe = loader::load_checkpoint(family("olmoe"));  // q/k norms over all heads: refused
    ASSERT_TRUE(olmoe.is_ok());
    EXPECT_FALSE(loader::tp_slice(*olmoe, 0, 2).is_ok());
}

TEST(TensorParallel, Stories260K) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto ck = loader::load_checkpoint(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    expect_tp_matches(*ck, {2, 4, 8}, 1e-5, true);
}

TEST(TensorParallel, SmolLM2Q4_1) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "SmolLM2 runs in the optimized build; the sanitizer pass covers the small models";
#endif
    const std::string path = test::smollm2_path();
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto ck = loader::load_checkpoint(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    // 9 query heads over 3 KV heads: TP 2 (2 + 1 KV heads) and TP 3, f32 activations. With the
    // default int8 activations the ranks still agree bit for bit, but not with one rank to 1e-5:
    // the partial sums' f32 rounding (1e-6) flips an activation's int8 rounding now and then, and
    // 30 layers carry that to ~1-2% of the logit range (the f16 KV cache's effect; docs/parallel.md).
    expect_tp_matches(*ck, {2, 3}, 1e-5, true);
    expect_tp_matches(*ck, {2}, -1, false);
}

TEST(TensorParallel, RowScalesAndCutBlocks) {
    // attn_output cut inside a block is decoded to f32 for that rank; shapes checked on the slices
    auto ck = loader::load_checkpoint(family("llama"));
    ASSERT_TRUE(ck.is_ok());
    auto s = loader::tp_slice(*ck, 1, 2);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ(s->config.num_heads, 2);
    EXPECT_EQ(s->config.num_kv_heads, 1);
    EXPECT_EQ(s->config.intermediate_size, 32);
    const loader::TensorRef* o = s->find("blk.0.attn_output.weight");
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o->shape[1], uint64_t(2 * ck->config.head_dim));
    // the output layer: rank 1's half of the vocabulary, tied embeddings or not
    const loader::TensorRef* out = s->find("output.weight");
    ASSERT_NE(out, nullptr);
    EXPECT_FALSE(s->config.tie_word_embeddings);
    EXPECT_EQ(out->shape[0], uint64_t(ck->config.vocab_size - (ck->config.vocab_size + 1) / 2));
    EXPECT_EQ(s->config.output_row_begin, (ck->config.vocab_size + 1) / 2);
    // the token embeddings: the same rows (vocabulary-parallel lookups, summed by an all-reduce)
    const loader::TensorRef* emb = s->find("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->shape[0], out->shape[0]);
    EXPECT_EQ(s->config.embed_row_begin, s->config.output_row_begin);
    EXPECT_FALSE(loader::tp_slice(*ck, 0, 3).is_ok());  // 3 ranks over 2 KV heads
}

using test::EngineRun;

TEST(TensorParallel, EngineMatchesOneRank) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) KILN_SKIP_MISSING() << "no " << path;
    auto stories = loader::load_checkpoint(path);
    ASSERT_TRUE(stories.is_ok()) << stories.status().to_string();
    // stories260K (TP 2 and 4), and two mixtures of experts under expert parallelism (with
    // stories260K's tokenizer: token ids stay below their 256-token vocabularies)
    for (const std::string name : {"stories260K", "mixtral", "qwen2-moe"}) {
        SCOPED_TRACE(name);
        auto loaded = name == "stories260K" ? stories : loader::load_checkpoint(family(name));
        ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
        const Checkpoint& ck = *loaded;
        const EngineRun one = test::run_engine(ck, *stories, nullptr, nullptr);
        ASSERT_TRUE(one.status.is_ok()) << one.status.to_string();
        ASSERT_EQ(one.tokens.size(), 8u);
        for (int n : {2, 4}) {
            auto group = dist::make_thread_group(n);
            std::vector<EngineRun> runs(static_cast<size_t>(n));
            std::vector<std::thread> threads;
            for (int r = 0; r < n; ++r)
                threads.emplace_back([&, r] {
                    group[size_t(r)]->set_timeout_seconds(30);
                    auto sliced = loader::tp_slice(ck, r, n);
                    runs[size_t(r)] = sliced.is_ok() ? test::run_engine(*sliced, *stories, group[size_t(r)].get(), nullptr)
                                                     : EngineRun{{}, {}, {}, sliced.status()};
                });
            for (auto& t : threads) t.join();
            for (int r = 0; r < n; ++r)
                ASSERT_TRUE(runs[size_t(r)].status.is_ok()) << r << ": " << runs[size_t(r)].status.to_string();
            EXPECT_EQ(runs[0].tokens, one.tokens) << "TP " << n;
            double worst = 0;
            for (const auto& [id, l] : one.logits) {
                ASSERT_EQ(runs[0].logits.at(id).size(), l.size());
                for (size_t i = 0; i < l.size(); ++i)
                    worst = std::max(worst, double(std::fabs(runs[0].logits.at(id)[i] - l[i])));
            }
            EXPECT_LE(worst, 1e-4) << "TP " << n;  // logits of magnitude ~10: 1e-5 of their range
        }
    }
}

}  // namespace
}  // namespace kiln
