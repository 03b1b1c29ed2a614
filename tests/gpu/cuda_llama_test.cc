// model::CudaModel against the CPU's CpuModel (f32 activations: the arithmetic the GPU's f32
// path repeats), the issue's target "GPU greedy output equals CPU greedy output on stories260K and
// SmolLM2": the same greedy tokens, and logits within fp32 rounding of another summation order.
// Random tiny models cover the architectures' variants (Qwen2 biases, Qwen3 q/k norms with the
// o_proj bias, Mistral's sliding window, Llama-3 RoPE scaling, quantized and bf16 weights), ragged
// batches over shuffled block tables against each sequence alone (argmax and device-sampled ids
// against the host on the same logits), and prompts in chunks. Mixtures of experts (CudaMoe): random
// tiny Mixtral / Qwen2-MoE / Qwen3-MoE models and the committed transformers-made ones against the
// CPU, their decode graphs against eager steps. Without a device only the error paths run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cuda/device.h"
#include "kernels/ref/sample.h"
#include "loader/checkpoint.h"
#include "loader/checkpoint_tokenizer.h"
#include "model/cuda/cuda_model.h"
#include "model/cpu_model.h"
#include "quant_tools/quantize.h"
#include "sampling/sampler.h"
#include "support/random_model.h"
#include "support/test_support.h"

namespace kiln::model {
namespace {

using core::DType;

bool have_device() {
    return kernels::cuda::device_count() > 0;
}

CudaModelOptions small_options() {
    CudaModelOptions o;
    o.max_batch_tokens = 256;
    o.max_seqs = 8;
    o.max_logits = 256;
    o.num_kv_blocks = 64;  // 1024 tokens: the tests' sequences, without sizing from device memory
    o.kv_dtype = kernels::KvDtype::kF32;  // as the CPU's KvCache: f32 K/V
    o.quantized_gemm = false;  // block weights in long steps: the exact f32 path
    return o;
}

// Largest |a - b| / (1 + |b|) over two logits vectors.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i]))));
    return worst;
}

struct GreedyRun {
    std::vector<float> prefill;             // [prompt, vocab]
    std::vector<int32_t> tokens;            // greedy continuation
    std::vector<std::vector<float>> steps;  // logits of each decode step
};

GreedyRun run_cpu(const Checkpoint& ck, const std::vector<int32_t>& prompt, int n) {
    core::ThreadPool pool(2);
    ops::LinearOptions lo;
    lo.f32_activations = true;
    auto m = CpuModel::create(ck, &pool, lo);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    GreedyRun r;
    if (!m.is_ok()) return r;
    KvCache cache((*m)->config(), int64_t(prompt.size()) + n);
    EXPECT_TRUE((*m)->forward(prompt, cache, true, r.prefill).is_ok());
    const int64_t V = (*m)->config().vocab_size;
    std::vector<float> last(r.prefill.end() - V, r.prefill.end());
    for (int i = 0; i < n; ++i) {
        const int32_t next = sampling::argmax_lowest_id(last);
        r.tokens.push_back(next);
        EXPECT_TRUE((*m)->forward(std::vector<int32_t>{next}, cache, false, last).is_ok());
        r.steps.push_back(last);
    }
    return r;
}

GreedyRun run_gpu(const Checkpoint& ck, const std::vector<int32_t>& prompt, int n, const CudaModelOptions& o) {
    auto m = CudaModel::create(ck, o);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    GreedyRun r;
    if (!m.is_ok()) return r;
    EXPECT_TRUE((*m)->forward(prompt, 0, true, r.prefill).is_ok());
    const int64_t V = (*m)->config().vocab_size;
    std::vector<float> last(r.prefill.end() - V, r.prefill.end());
    int64_t pos = int64_t(prompt.size());
    for (int i = 0; i < n; ++i, ++pos) {
        const int32_t next = sampling::argmax_lowest_id(last);
        r.tokens.push_back(next);
        EXPECT_TRUE((*m)->forward(std::vector<int32_t>{next}, pos, false, last).is_ok());
        r.steps.push_back(last);
    }
    return r;
}

void expect_same_run(const GreedyRun& gpu, const GreedyRun& cpu, double tol, bool same_tokens,
                     const std::string& what) {
    EXPECT_LE(max_rel_diff(gpu.prefill, cpu.prefill), tol) << what << " prefill";
    if (same_tokens) {
        EXPECT_EQ(gpu.tokens, cpu.tokens) << what;
    }
    for (size_t i = 0; i < std::min(gpu.steps.size(), cpu.steps.size()); ++i) {
        if (gpu.tokens[i] != cpu.tokens[i]) break;  // different inputs from here on
        ASSERT_LE(max_rel_diff(gpu.steps[i], cpu.steps[i]), tol) << what << " decode step " << i;
    }
}

TEST(CudaLlama, WithoutADeviceCreateSaysSo) {
    if (have_device()) GTEST_SKIP() << "a device is present";
    test::RandomCheckpoint b;
    b.build(test::tiny_config("llama"));
    auto m = CudaModel::create(b.ck, small_options());
    ASSERT_FALSE(m.is_ok());
    EXPECT_EQ(m.status().code(), core::StatusCode::kUnsupported) << m.status().to_string();
}

TEST(CudaLlama, BadOptionsAreErrors) {
    test::RandomCheckpoint b;
    b.build(test::tiny_config("llama"));
    CudaModelOptions o = small_options();
    o.gpu_memory_utilization = 1.5;
    EXPECT_EQ(CudaModel::create(b.ck, o).status().code(), core::StatusCode::kInvalidArgument);
    o = small_options();
    o.max_seq_len = 65;  // over the model's 64
    EXPECT_EQ(CudaModel::create(b.ck, o).status().code(), core::StatusCode::kInvalidArgument);
}

TEST(CudaLlama, RandomModelsMatchCpu) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    struct Case {
        std::string name;
        ModelConfig config;
        DType mat, emb;
        double tol;
    };
    std::vector<Case> cases;
    ModelConfig llama = test::tiny_config("llama");
    cases.push_back({"llama f32", llama, DType::kF32, DType::kF32, 1e-4});
    cases.push_back({"llama q4_0 / q8_0 embeddings", llama, DType::kQ4_0, DType::kQ8_0, 1e-4});
    cases.push_back({"llama q8_0", llama, DType::kQ8_0, DType::kF32, 1e-4});
    ModelConfig big_vocab = llama;  // an output matrix larger than any layer's: the GEMV 8 rows at a time
    big_vocab.vocab_size = 4000;
    cases.push_back({"llama q4_1, vocab 4000", big_vocab, DType::kQ4_1, DType::kF32, 1e-4});
    // bf16 weights: the GPU rounds each GEMM's input activations to bf16 (the CPU keeps f32)
    cases.push_back({"llama bf16", llama, DType::kBF16, DType::kBF16, 5e-2});
    ModelConfig qwen2 = test::tiny_config("qwen2");
    qwen2.attention_bias = true;
    qwen2.tie_word_embeddings = true;
    cases.push_back({"qwen2 bias, tied", qwen2, DType::kF32, DType::kF32, 1e-4});
    ModelConfig qwen3 = test::tiny_config("qwen3");
    qwen3.qk_norm = true;
    qwen3.attention_bias = true;
    qwen3.rope_theta = 1000000;
    cases.push_back({"qwen3 q/k norm, o bias", qwen3, DType::kF32, DType::kF32, 1e-4});
    ModelConfig mistral = test::tiny_config("mistral");
    mistral.sliding_window = 3;
    cases.push_back({"mistral window 3", mistral, DType::kF32, DType::kF32, 1e-4});
    ModelConfig llama3 = test::tiny_config("llama");
    llama3.rope_theta = 500000;
    llama3.rope_scaling.type = "llama3";
    llama3.rope_scaling.factor = 8;
    llama3.rope_scaling.original_max_position_embeddings = 16;
    cases.push_back({"llama3 rope scaling", llama3, DType::kF32, DType::kF32, 1e-4});
    const std::vector<int32_t> prompt = {1, 5, 9, 33, 70, 12, 44, 3, 90, 61, 8, 27};
    for (const Case& k : cases) {
        test::RandomCheckpoint b;
        b.build(k.config, k.mat, k.emb);
        const GreedyRun cpu = run_cpu(b.ck, prompt, 12);
        const GreedyRun gpu = run_gpu(b.ck, prompt, 12, small_options());
        expect_same_run(gpu, cpu, k.tol, /*same_tokens=*/k.tol < 1e-3, k.name);
        if (k.mat == DType::kQ4_1) {  // the same weights decoded to f32 at load
            CudaModelOptions o = small_options();
            o.quantized_weights = false;
            expect_same_run(run_gpu(b.ck, prompt, 12, o), cpu, k.tol, true, k.name + ", decoded at load");
        }
    }
}

// A ragged batch (a prompt chunk on top of a cached prefix, a fresh prompt, a decode token) over
// shuffled block tables gives each sequence the logits it gets alone; greedy ids are the argmax.
TEST(CudaLlama, RaggedBatchEqualsEachSequenceAlone) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    ModelConfig c = test::tiny_config("llama");
    test::RandomCheckpoint b;
    b.build(c);
    CudaModelOptions o = small_options();
    auto m = CudaModel::create(b.ck, o);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    const int64_t V = c.vocab_size;
    std::vector<int32_t> blocks(size_t(o.num_kv_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(3));
    // three sequences, 3 blocks (48 tokens) each
    std::vector<std::vector<int32_t>> tables = {
        {blocks[0], blocks[1], blocks[2]}, {blocks[3], blocks[4], blocks[5]}, {blocks[6], blocks[7], blocks[8]}};
    const std::vector<int32_t> a = {1, 4, 8, 15, 16, 23, 42, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    const std::vector<int32_t> p = {1, 50, 51, 52, 53};
    // alone: a in two chunks (17 then 3 tokens), p whole, then sequence 2 = p with one decode token
    std::vector<float> a_head, a_tail, p_alone, p_decode;
    const BatchSeq a1{0, 17, tables[0], 0};
    ASSERT_TRUE((*m)->forward_batch(std::span(a).subspan(0, 17), std::span(&a1, 1), a_head).is_ok());
    EXPECT_TRUE(a_head.empty());
    const BatchSeq a2{17, 3, tables[0], 3};
    ASSERT_TRUE((*m)->forward_batch(std::span(a).subspan(17), std::span(&a2, 1), a_tail).is_ok());
    const BatchSeq p1{0, 5, tables[1], 1};
    ASSERT_TRUE((*m)->forward_batch(p, std::span(&p1, 1), p_alone).is_ok());
    const BatchSeq p2{0, 5, tables[2], 0};
    std::vector<float> ignore;
    ASSERT_TRUE((*m)->forward_batch(p, std::span(&p2, 1), ignore).is_ok());
    const std::vector<int32_t> d = {77};
    const BatchSeq p3{5, 1, tables[2], 1};
    ASSERT_TRUE((*m)->forward_batch(d, std::span(&p3, 1), p_decode).is_ok());
    // Now the same work as one batch on fresh blocks: a's prefix rewritten first (chunk 1 alone),
    // then [a's last 3 | p | p's decode token] together.
    const std::vector<int32_t> alone_table2 = tables[2];  // p3 points into tables[2]: keep a copy
    tables = {{blocks[9], blocks[10], blocks[11]},
              {blocks[12], blocks[13], blocks[14]},
              {blocks[15], blocks[16], blocks[17]}};
    const BatchSeq b1{0, 17, tables[0], 0};
    ASSERT_TRUE((*m)->forward_batch(std::span(a).subspan(0, 17), std::span(&b1, 1), ignore).is_ok());
    const BatchSeq b2{0, 5, tables[2], 0};
    ASSERT_TRUE((*m)->forward_batch(p, std::span(&b2, 1), ignore).is_ok());
    std::vector<int32_t> tokens(a.begin() + 17, a.end());
    tokens.insert(tokens.end(), p.begin(), p.end());
    tokens.push_back(77);
    const std::vector<BatchSeq> seqs = {{17, 3, tables[0], 3}, {0, 5, tables[1], 1}, {5, 1, tables[2], 1}};
    std::vector<float> batched;
    ASSERT_TRUE((*m)->forward_batch(tokens, seqs, batched).is_ok());
    ASSERT_EQ(batched.size(), size_t(5 * V));
    auto rows = [&](int64_t from, int64_t n) {
        return std::vector<float>(batched.begin() + from * V, batched.begin() + (from + n) * V);
    };
    // cuBLAS may pick another algorithm for another row count: equal within fp32 rounding
    EXPECT_LE(max_rel_diff(rows(0, 3), a_tail), 1e-5);
    EXPECT_LE(max_rel_diff(rows(3, 1), p_alone), 1e-5);
    EXPECT_LE(max_rel_diff(rows(4, 1), p_decode), 1e-5);
    // greedy ids of the same batch (its K/V rewritten in place with the same values)
    std::vector<int32_t> ids;
    ASSERT_TRUE((*m)->forward_batch_greedy(tokens, seqs, ids).is_ok());
    ASSERT_EQ(ids.size(), size_t(5));
    for (int64_t r = 0; r < 5; ++r) {
        const std::vector<float> row = rows(r, 1);
        EXPECT_EQ(ids[size_t(r)], sampling::argmax_lowest_id(row)) << r;
    }
    // sampled on the device: kernels/ref/sample_row over the same logits gives the same tokens
    using kernels::ref::LogitAdjustment;
    using kernels::ref::SampleRow;
    std::vector<SampleRow> srows(5);
    const std::vector<LogitAdjustment> adjust = {{3, 4.0f, 0, 0}, {9, 0.0f, 1, 2}, {11, -1.0f, 1, 1}};
    srows[0].adjust_count = 1;  // greedy with a bias
    srows[1].temperature = 0.8f;
    srows[1].top_k = 3;
    srows[1].u = 0.5;
    srows[2].temperature = 1.0f;
    srows[2].top_p = 0.9f;
    srows[2].u = 0.3;
    srows[3].temperature = 1.2f;
    srows[3].min_p = 0.1f;
    srows[3].u = 0.77;
    srows[4].temperature = 0.7f;
    srows[4].repetition_penalty = 1.3f;
    srows[4].frequency_penalty = 0.5f;
    srows[4].adjust_begin = 1;
    srows[4].adjust_count = 2;
    srows[4].u = 0.9;
    ASSERT_TRUE((*m)->forward_batch_sample(tokens, seqs, srows, adjust, ids).is_ok());
    ASSERT_EQ(ids.size(), size_t(5));
    for (int64_t r = 0; r < 5; ++r) {
        std::vector<float> row = rows(r, 1);
        EXPECT_EQ(ids[size_t(r)], kernels::ref::sample_row(row, srows[size_t(r)], adjust)) << "sampled row " << r;
    }
    EXPECT_EQ((*m)->forward_batch_sample(tokens, seqs, std::span(srows).subspan(1), adjust, ids).code(),
              core::StatusCode::kInvalidArgument);  // a row short
    srows[4].adjust_count = 3;                      // past the entries
    EXPECT_EQ((*m)->forward_batch_sample(tokens, seqs, srows, adjust, ids).code(), core::StatusCode::kInvalidArgument);
    // over the create-time limits, bad block ids: errors, and the model still runs
    std::vector<int32_t> many(300, 5);
    const BatchSeq big{0, 300, blocks, 1};
    EXPECT_EQ((*m)->forward_batch(many, std::span(&big, 1), ignore).code(), core::StatusCode::kInvalidArgument);
    const std::vector<int32_t> bad_table = {int32_t(o.num_kv_blocks)};
    const BatchSeq bad{0, 1, bad_table, 1};
    EXPECT_EQ((*m)->forward_batch(d, std::span(&bad, 1), ignore).code(), core::StatusCode::kInvalidArgument);
    const BatchSeq p4{5, 1, alone_table2, 1};
    EXPECT_TRUE((*m)->forward_batch(d, std::span(&p4, 1), ignore).is_ok());
}

// f16 K/V with prompt chunks on tensor cores (prefill_attention: q and the probabilities in f16)
// against the CPU's f32 forward pass and against the same GPU model with one split-KV query per
// token; prompts longer than a step run in chunks on top of their cached prefix (positions0 > 0).
TEST(CudaLlama, TensorCorePrefillIsCloseToExact) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    ModelConfig c = test::tiny_config("llama");
    c.hidden_size = 256;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64;  // a head the tensor-core kernel is built for
    c.intermediate_size = 512;
    c.max_seq_len = 512;
    test::RandomCheckpoint b;
    b.build(c, DType::kF32, DType::kF32);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(int32_t((i * 37 + 11) % c.vocab_size));
    const GreedyRun cpu = run_cpu(b.ck, prompt, 4);
    CudaModelOptions o = small_options();
    o.max_batch_tokens = 128;  // 300 tokens: chunks of 128, 128, 44
    o.max_logits = 128;
    o.max_seq_len = 512;
    o.kv_dtype = kernels::KvDtype::kF16;
    const GreedyRun tc = run_gpu(b.ck, prompt, 4, o);
    o.tensor_core_prefill = false;
    const GreedyRun split = run_gpu(b.ck, prompt, 4, o);
    expect_same_run(split, cpu, 5e-3, false, "f16 K/V, split-KV prefill vs CPU f32");
    expect_same_run(tc, split, 2e-2, false, "tensor-core prefill vs split-KV prefill");
    expect_same_run(tc, cpu, 2e-2, false, "tensor-core prefill vs CPU f32");
}

// Decode steps replayed from CUDA graphs (batches padded to their bucket with sequences in the
// scratch block: 3 run as 4, then 4 with no padding, 2) give the eager path's logits and ids, and
// leave the sequences' K/V as the eager path does (the steps after them agree too); graphs were
// captured (a bucket's first step runs eagerly, its second captures) and none failed.
void expect_graphs_match_eager(const ModelConfig& config) {
    test::RandomCheckpoint b;
    b.build(config);
    CudaModelOptions o = small_options();
    auto with = CudaModel::create(b.ck, o);
    o.cuda_graphs = false;
    auto without = CudaModel::create(b.ck, o);
    ASSERT_TRUE(with.is_ok() && without.is_ok());
    const int64_t V = b.ck.config.vocab_size;
    const std::vector<std::vector<int32_t>> tables = {{5, 6, 7}, {9, 10, 11}, {20, 21, 22}, {30, 31, 32}};
    const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {1, 9, 8}, {1, 40, 41, 42, 43, 44, 45}, {1, 7}};
    std::vector<int32_t> last(4), len(4);
    for (size_t i = 0; i < 4; ++i) {
        const BatchSeq q{0, int64_t(prompts[i].size()), tables[i], 1};
        std::vector<int32_t> a, e;
        ASSERT_TRUE((*with)->forward_batch_greedy(prompts[i], std::span(&q, 1), a).is_ok());
        ASSERT_TRUE((*without)->forward_batch_greedy(prompts[i], std::span(&q, 1), e).is_ok());
        ASSERT_EQ(a, e);
        last[i] = a[0];
        len[i] = int32_t(prompts[i].size());
    }
    // batch sizes per step: sequences 0..n-1 decode together
    const int sizes[] = {3, 3, 3, 3, 4, 4, 4, 2, 2, 2, 3, 3};
    for (int step = 0; step < int(std::size(sizes)); ++step) {
        const size_t n = size_t(sizes[step]);
        std::vector<BatchSeq> seqs;
        std::vector<int32_t> toks(last.begin(), last.begin() + long(n));
        for (size_t i = 0; i < n; ++i) seqs.push_back({len[i], 1, tables[i], 1});
        if (step % 2 == 0) {  // the logits graphs
            std::vector<float> la, le;
            ASSERT_TRUE((*with)->forward_batch(toks, seqs, la).is_ok());
            ASSERT_TRUE((*without)->forward_batch(toks, seqs, le).is_ok());
            ASSERT_EQ(la.size(), n * size_t(V));
            ASSERT_LE(max_rel_diff(la, le), 1e-5) << "step " << step;
            for (size_t i = 0; i < n; ++i)
                last[i] = sampling::argmax_lowest_id(std::span<const float>(la).subspan(i * size_t(V), size_t(V)));
        } else {  // the greedy graphs
            std::vector<int32_t> a, e;
            ASSERT_TRUE((*with)->forward_batch_greedy(toks, seqs, a).is_ok());
            ASSERT_TRUE((*without)->forward_batch_greedy(toks, seqs, e).is_ok());
            ASSERT_EQ(a, e) << "step " << step;
            std::copy(a.begin(), a.end(), last.begin());
        }
        for (size_t i = 0; i < n; ++i) ++len[i];
    }
    EXPECT_GE((*with)->num_graphs(), 4) << (*with)->describe();  // buckets 4 and 2, logits and greedy
    EXPECT_EQ((*without)->num_graphs(), 0);
    EXPECT_EQ((*with)->describe().find("graphs off"), std::string::npos) << (*with)->describe();
}

TEST(CudaLlama, DecodeGraphsMatchEager) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    expect_graphs_match_eager(test::tiny_config("llama"));
}

// A tiny mixture of experts: 4 experts of width 64 (multiples of 32, as the grouped kernel takes),
// 2 per token.
ModelConfig tiny_moe(const std::string& arch, int64_t experts = 4, int64_t top_k = 2, bool norm_topk = true) {
    ModelConfig c = test::tiny_config(arch);
    c.num_experts = experts;
    c.num_experts_used = top_k;
    c.expert_intermediate_size = 64;
    c.norm_topk_prob = norm_topk;
    return c;
}

// The mixture-of-experts decode step (router, grouping, grouped launches, combine, the shared
// expert) captured in graphs.
TEST(CudaMoe, DecodeGraphsMatchEager) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    expect_graphs_match_eager(tiny_moe("mixtral"));
    ModelConfig qwen2 = tiny_moe("qwen2_moe", 4, 2, false);
    qwen2.shared_expert_intermediate_size = 96;
    expect_graphs_match_eager(qwen2);
}

// kernels/cuda/moe.h inside the model: random tiny mixtures (Mixtral's renormalized top 2, Qwen2-MoE's
// shared expert with its gate and q/k/v biases, Qwen3-MoE's q/k norms over 8 experts without
// renormalization, block and bf16 experts) against the CPU.
TEST(CudaMoe, RandomMixturesMatchCpu) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    struct Case {
        std::string name;
        ModelConfig config;
        DType mat;
        double tol;
    };
    std::vector<Case> cases;
    cases.push_back({"mixtral f32", tiny_moe("mixtral"), DType::kF32, 1e-4});
    cases.push_back({"mixtral q4_0", tiny_moe("mixtral"), DType::kQ4_0, 1e-4});
    cases.push_back({"mixtral q8_0", tiny_moe("mixtral"), DType::kQ8_0, 1e-4});
    ModelConfig qwen2 = tiny_moe("qwen2_moe", 4, 2, false);
    qwen2.attention_bias = true;
    qwen2.shared_expert_intermediate_size = 96;
    cases.push_back({"qwen2-moe shared expert", qwen2, DType::kF32, 1e-4});
    cases.push_back({"qwen2-moe shared expert q4_1", qwen2, DType::kQ4_1, 1e-4});
    // bf16: the shared expert's SiLU-mul hands its down projection the rounded input (x16)
    cases.push_back({"qwen2-moe shared expert bf16", qwen2, DType::kBF16, 5e-2});
    ModelConfig qwen3 = tiny_moe("qwen3_moe", 8, 2, false);
    qwen3.qk_norm = true;
    cases.push_back({"qwen3-moe", qwen3, DType::kF32, 1e-4});
    cases.push_back({"qwen3-moe bf16", qwen3, DType::kBF16, 5e-2});
    const std::vector<int32_t> prompt = {1, 5, 9, 33, 70, 12, 44, 3, 90, 61, 8, 27};
    for (const Case& k : cases) {
        test::RandomCheckpoint b;
        b.build(k.config, k.mat, DType::kF32);
        const GreedyRun cpu = run_cpu(b.ck, prompt, 12);
        const GreedyRun gpu = run_gpu(b.ck, prompt, 12, small_options());
        expect_same_run(gpu, cpu, k.tol, /*same_tokens=*/k.tol < 1e-3, k.name);
    }
}

std::string family_dir(const std::string& name) {
    const std::string here = __FILE__;
    return here.substr(0, here.rfind("/tests/")) + "/tests/golden/data/families/" + name;
}

// The committed transformers-made tiny mixtures (tests/golden/data/families: Mixtral, Qwen2-MoE,
// Qwen3-MoE; the CPU matches their transformers logits in the golden tests): the GPU gives the CPU's
// greedy tokens and logits. The Qwen ones have experts 16 wide (the shared expert 24): the grouped
// kernel's partial last group of 32.
TEST(CudaMoe, TransformersMixturesMatchCpu) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    for (const std::string name : {"mixtral", "qwen2-moe", "qwen3-moe"}) {
        auto ck = loader::load_checkpoint(family_dir(name));
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        const std::vector<int32_t> prompt = {1, 17, 4, 88, 23, 61, 9, 40, 12, 3};
        expect_same_run(run_gpu(*ck, prompt, 16, small_options()), run_cpu(*ck, prompt, 16), 1e-4, true, name);
    }
}

// The families whose blocks have no CUDA kernels are refused at create, before any device is
// needed, with what is missing.
TEST(CudaMoe, FamiliesWithoutKernelsAreRefused) {
    for (const auto& [name, why] : {std::pair<std::string, std::string>{"olmoe", "whole-projection q/k norms"},
                                    {"gpt-oss", "attention sinks"}}) {
        auto ck = loader::load_checkpoint(family_dir(name));
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        auto m = CudaModel::create(*ck, small_options());
        ASSERT_FALSE(m.is_ok()) << name;
        EXPECT_EQ(m.status().code(), core::StatusCode::kUnsupported) << name;
        EXPECT_NE(m.status().message().find(why), std::string::npos) << m.status().to_string();
    }
}

// Block weights in prompt-sized steps on tensor cores (kernels/cuda/gemm_blocks, f16 activations)
// against the exact path (decoded f32 copy, f32 GEMM): close, not equal.
TEST(CudaLlama, QuantizedGemmIsCloseToExact) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    ModelConfig c = test::tiny_config("llama");
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 13 + 5) % c.vocab_size));
    for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
        test::RandomCheckpoint b;
        b.build(c, type, DType::kF32);
        CudaModelOptions o = small_options();
        const GreedyRun exact = run_gpu(b.ck, prompt, 4, o);
        o.quantized_gemm = true;
        const GreedyRun tc = run_gpu(b.ck, prompt, 4, o);
        expect_same_run(tc, exact, 2e-2, false, "tensor-core block GEMM, " + std::string(core::dtype_name(type)));
        EXPECT_GT(max_rel_diff(tc.prefill, exact.prefill), 0.0) << "the f16 path did not run";
    }
}

// A real checkpoint with its own tokenizer: greedy tokens (below tolerance 1e-2) and logits of the GPU
// model against the CPU's.
void expect_checkpoint_greedy_equal(const std::string& path, const std::string& text, int n, const std::string& what,
                                    const CudaModelOptions& options = small_options(), double tol = 1e-3) {
    auto ck = loader::load_checkpoint(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    auto tok = loader::find_tokenizer(*ck, "");
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const std::vector<int32_t> prompt = (*tok)->encode(text);
    const GreedyRun cpu = run_cpu(*ck, prompt, n);
    const GreedyRun gpu = run_gpu(*ck, prompt, n, options);
    expect_same_run(gpu, cpu, tol, /*same_tokens=*/tol < 1e-2, what);
}

TEST(CudaLlama, Stories260KGreedyEqualsCpu) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) GTEST_SKIP() << "no test data";
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    CudaModelOptions o = small_options();
    o.num_kv_blocks = 0;  // sized from device memory, as the tools do
    o.gpu_memory_utilization = 0.5;
    expect_checkpoint_greedy_equal(path, "Once upon a time, there was a little", 100, "stories260K", o, 1e-4);
}

// stories260K through `kiln quantize`'s formats (quant_tools/quantize.h), loaded back: the blocks stay in
// their format on the GPU (INT8 rows repacked as Q8_0 with fp16 row scales) and the exact f32 path
// for long steps keeps the CPU's --f32-activations numerics: the same greedy tokens and logits
// within 1e-4, INT8 within its fp16 scale rounding (1e-2). FFN rows of 172 (not whole 32-element
// groups) are decoded to f32 instead.
TEST(CudaLlama, QuantizedCheckpointsMatchCpu) {
    const std::string path = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(path)) GTEST_SKIP() << "no test data";
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    auto src = loader::load_checkpoint(path);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto tok = loader::find_tokenizer(*src, "");
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const std::vector<int32_t> prompt = (*tok)->encode("Once upon a time, there was a little");
    for (const char* format : {"w4-g32", "w4-g32-zp", "fp8", "mxfp8", "mxfp4", "nvfp4", "int8"}) {
        const std::string dir = test::temp_dir(std::string("cuda_quantized_") + format);
        quant_tools::QuantizeOptions qo;
        const bool zp = std::string(format) == "w4-g32-zp";  // INT4 with zero points: Q4_1 on load
        auto scheme = loader::parse_quant_scheme(zp ? "w4-g32" : format);
        ASSERT_TRUE(scheme.is_ok()) << format;
        qo.scheme = *scheme;
        qo.scheme.zero_point = zp;
        core::ThreadPool pool(2);
        ASSERT_TRUE(quant_tools::quantize_checkpoint(*src, dir, qo, &pool).is_ok()) << format;
        auto ck = loader::load_checkpoint(dir);
        ASSERT_TRUE(ck.is_ok()) << format << ": " << ck.status().to_string();
        const GreedyRun cpu = run_cpu(*ck, prompt, 30);
        const GreedyRun gpu = run_gpu(*ck, prompt, 30, small_options());
        const bool int8 = std::string(format) == "int8";
        expect_same_run(gpu, cpu, int8 ? 1e-2 : 1e-4, /*same_tokens=*/!int8, std::string("stories260K ") + format);
    }
}

// SmolLM2's first two layers (`kiln convert --layers 2`, made by scripts/device-deps because the
// whole model cannot travel to the device machine): real Q4_1 weights, head_dim 64, 3 KV heads for
// 9 query heads, on the GPU's block GEMV path.
TEST(CudaLlama, SmolLM2TwoLayersGreedyEqualsCpu) {
    const std::string path = test::testdata("models/smollm2-2layers.gguf");
    if (!test::file_exists(path)) GTEST_SKIP() << "no " << path << " (scripts/device-deps makes it)";
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    expect_checkpoint_greedy_equal(path, "The capital of France is", 40, "SmolLM2, 2 layers");
    CudaModelOptions o = small_options();  // the prompt's GEMMs on tensor cores: logits close
    o.quantized_gemm = true;
    expect_checkpoint_greedy_equal(path, "The capital of France is, as everyone knows,", 8,
                                   "SmolLM2, 2 layers, tensor-core block GEMM", o, 2e-2);
}

TEST(CudaLlama, SmolLM2GreedyEqualsCpu) {
    const std::string path = test::smollm2_path();
    if (!test::file_exists(path)) GTEST_SKIP() << "no SmolLM2 (scripts/setup)";
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    expect_checkpoint_greedy_equal(path, "The capital of France is", 40, "SmolLM2");
}

}  // namespace
}  // namespace kiln::model
