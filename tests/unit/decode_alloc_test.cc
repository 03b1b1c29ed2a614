// The decode loop allocates nothing: once a model's buffers, the KV cache and the logits vector have
// grown to a step's size, single-token CpuModel::forward steps (the tools' decode loop: kiln run,
// kiln bench) make no heap allocation, for float and block-quantized weights at every ISA level this
// CPU runs, with a two-thread pool (its jobs are ThreadPool::parallel_for / parallel_tasks calls).
// The same for forward_batch over a paged f16 K/V pool (the serving engine's model step; the
// engine's own scheduling around it is not covered). This executable replaces global operator new to count allocations,
// so it lives apart from the other model tests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "kernels/cpu/matmul.h"
#include "model/cpu_model.h"
#include "support/random_model.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};

void* counted_alloc(std::size_t n, std::size_t align) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
    n = n ? n : 1;
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n)
                                                 : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) {
    return counted_alloc(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
    return counted_alloc(n, std::size_t(a));
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

namespace kiln::model {
namespace {

using core::DType;
using kernels::cpu::Isa;

// Allocations during `steps` decode steps after a 4-token prompt and warm-up steps up to position
// 33 (the KV cache grows by doubling: to 64 rows, its whole context, at position 33).
int64_t decode_allocations(DType weights, Isa isa, int threads, int64_t steps) {
    test::RandomCheckpoint b;
    b.build(test::tiny_config("llama"), weights);
    core::ThreadPool pool(threads);
    ops::LinearOptions lo;
    lo.isa = isa;
    auto model = CpuModel::create(b.ck, &pool, lo);
    EXPECT_TRUE(model.is_ok()) << model.status().to_string();
    if (!model.is_ok()) return -1;
    KvCache cache(b.ck.config, 64);
    std::vector<float> logits;
    const std::vector<int32_t> prompt = {1, 5, 17, 96};
    EXPECT_TRUE((*model)->forward(std::span<const int32_t>(prompt), cache, false, logits).is_ok());
    int32_t token = 7;
    auto step = [&] {
        const core::Status s = (*model)->forward(std::span<const int32_t>(&token, 1), cache, false, logits);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        token = int32_t((token * 31 + 11) % b.ck.config.vocab_size);
    };
    while (cache.size() < 33) step();
    g_allocs.store(0);
    g_counting.store(true);
    for (int64_t i = 0; i < steps; ++i) step();
    g_counting.store(false);
    EXPECT_EQ(cache.size(), 33 + steps);
    EXPECT_EQ(logits.size(), size_t(b.ck.config.vocab_size));
    return g_allocs.load();
}

// The serving engine's shape: forward_batch over two sequences decoding together from a paged f16
// K/V pool (16-token blocks), each with its own block table; allocations over `steps` steps after
// both have passed position 33.
int64_t batch_decode_allocations(DType weights, int threads, int64_t steps) {
    test::RandomCheckpoint b;
    b.build(test::tiny_config("llama"), weights);
    const ModelConfig& c = b.ck.config;
    core::ThreadPool pool(threads);
    auto model = CpuModel::create(b.ck, &pool);
    EXPECT_TRUE(model.is_ok()) << model.status().to_string();
    if (!model.is_ok()) return -1;
    constexpr int64_t kBlock = 16, kBlocks = 8;
    KvLayers kv;
    kv.block_size = kBlock;
    kv.num_slots = kBlocks * kBlock;
    kv.dtype = kernels::KvDtype::kF16;
    std::vector<std::vector<uint16_t>> k(size_t(c.num_layers)), v(size_t(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        k[size_t(l)].assign(size_t(kv.num_slots * c.kv_dim()), 0);
        v[size_t(l)].assign(size_t(kv.num_slots * c.kv_dim()), 0);
        kv.k.push_back(k[size_t(l)].data());
        kv.v.push_back(v[size_t(l)].data());
    }
    const std::vector<int32_t> table_a = {6, 0, 3, 5}, table_b = {1, 7, 2, 4};  // 64 tokens each
    BatchSeq seqs[2] = {{0, 1, table_a, 1}, {0, 1, table_b, 1}};
    int32_t tokens[2] = {3, 9};
    std::vector<float> logits;
    auto step = [&] {
        const core::Status s = (*model)->forward_batch(tokens, seqs, kv, logits);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        for (int i = 0; i < 2; ++i) {
            ++seqs[i].start;
            tokens[i] = int32_t((tokens[i] * 31 + 11) % c.vocab_size);
        }
    };
    while (seqs[0].start < 33) step();
    g_allocs.store(0);
    g_counting.store(true);
    for (int64_t i = 0; i < steps; ++i) step();
    g_counting.store(false);
    EXPECT_EQ(logits.size(), size_t(2 * c.vocab_size));
    return g_allocs.load();
}

TEST(DecodeAlloc, CounterSeesAllocations) {  // the hook counts what the tests below assert is absent
    g_allocs.store(0);
    g_counting.store(true);
    auto* v = new std::vector<float>(100);
    g_counting.store(false);
    delete v;
    EXPECT_GE(g_allocs.load(), 2);
}

TEST(DecodeAlloc, SteadyStateDecodeAllocatesNothing) {
    for (Isa isa : kernels::cpu::kAllIsas) {
        if (!kernels::cpu::isa_supported(isa)) continue;
        for (DType w : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
            for (int threads : {1, 2}) {
                EXPECT_EQ(decode_allocations(w, isa, threads, 30), 0)
                    << core::dtype_info(w).name << " weights, isa " << kernels::cpu::isa_name(isa) << ", " << threads
                    << " threads";
            }
        }
    }
}

TEST(DecodeAlloc, PagedBatchDecodeAllocatesNothing) {
    for (DType w : {DType::kF32, DType::kQ4_0}) {
        for (int threads : {1, 2}) {
            EXPECT_EQ(batch_decode_allocations(w, threads, 30), 0)
                << core::dtype_info(w).name << " weights, " << threads << " threads";
        }
    }
}

}  // namespace
}  // namespace kiln::model
