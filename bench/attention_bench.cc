// Google Benchmark microbenchmarks of CPU attention (ops::attention: the kernels/cpu tiled
// online-softmax kernel at the best ISA) over a KV cache of each row format (f32; decode also f16,
// int8, fp8: attention_decode/MODEL/kv:N/DTYPE), at three model shapes: smollm2 (SmolLM2-135M: 9
// heads, 3 KV heads, head_dim 64), tinyllama (32, 4, 64) and llama3-8b (32, 8, 128). prefill: 512 new
// tokens, causal, kv_len 512. decode: 1 new token at kv_len 2048, 4096 and 16384. One layer's K and V
// (0.1-17 MB at 2048) may stay in L3 across iterations, unlike a whole model's cache at long context,
// which decode streams from DRAM.
// Counters (rates, 1e9 units): GB/s = K and V bytes of the cache read once per call
// (2 * kv_len * row bytes: kv_heads * head_dim * 4 for f32, * 2 for f16, + 4 * kv_heads for int8 /
// fp8); GFLOP/s = 4 * head_dim * (query head, key) pairs attended
// (q.k and p.v, 2 flops per multiply-add each; softmax not counted).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/ref/transformer.h"
#include "ops/transformer_ops.h"

namespace {

struct Model {
    const char* name;
    int64_t heads, kv_heads, head_dim;
};
constexpr Model kModels[] = {{"smollm2", 9, 3, 64}, {"tinyllama", 32, 4, 64}, {"llama3-8b", 32, 8, 128}};

std::vector<float> random_floats(size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    std::vector<float> v(n);
    for (float& x : v) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        x = float((s * 0x2545F4914F6CDD1DULL) >> 40) * (2.0f / float(1 << 24)) - 1.0f;  // [-1, 1)
    }
    return v;
}

void bm_attention(benchmark::State& st, Model m, int64_t num_tokens, int64_t kv_len, int threads,
                  kiln::kernels::KvDtype dt, int layers) {
    kiln::core::ThreadPool pool(threads);
    kiln::kernels::ref::AttentionShape s;
    s.num_tokens = num_tokens;
    s.num_heads = m.heads;
    s.num_kv_heads = m.kv_heads;
    s.head_dim = m.head_dim;
    const int64_t row = m.kv_heads * m.head_dim, row_bytes = kiln::kernels::kv_row_bytes(dt, m.kv_heads, m.head_dim);
    const size_t bytes = size_t(kv_len * row_bytes);
    // K and V on 2 MiB-aligned huge pages, as the engine's KvStorage maps them, stored as the model
    // stores them (kernels/ref kv_store_row).
    // layers > 1: that many caches, attended to in turn as a model's layers are (more than the last
    // level cache holds at long context: decode then streams them from DRAM).
    std::vector<std::shared_ptr<uint8_t>> bufs;
    const std::vector<float> k_init = random_floats(size_t(kv_len * row), 1), v_init = random_floats(size_t(kv_len * row), 2);
    std::vector<kiln::kernels::ref::KvSpan> kvs;
    for (int l = 0; l < layers; ++l) {
        auto hk = kiln::core::map_huge_pages(bytes);
        auto hv = kiln::core::map_huge_pages(bytes);
        if (!hk.is_ok() || !hv.is_ok()) return st.SkipWithError("cannot map the K/V buffers");
        for (int64_t r = 0; r < kv_len; ++r) {
            kiln::kernels::ref::kv_store_row(dt, k_init.data() + r * row, m.kv_heads, m.head_dim, hk->get() + r * row_bytes);
            kiln::kernels::ref::kv_store_row(dt, v_init.data() + r * row, m.kv_heads, m.head_dim, hv->get() + r * row_bytes);
        }
        kiln::kernels::ref::KvSpan kv{hk->get(), hv->get(), kv_len};
        kv.dtype = dt;
        kvs.push_back(kv);
        bufs.push_back(std::move(*hk));
        bufs.push_back(std::move(*hv));
    }
    const std::vector<float> q = random_floats(size_t(num_tokens * m.heads * m.head_dim), 3);
    std::vector<float> out(q.size());
    for (auto _ : st) {
        for (const auto& kv : kvs)
            if (!kiln::ops::attention(pool, q.data(), kv, s, out.data()).is_ok())
                return st.SkipWithError("attention failed");
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    // Token t (position kv_len - num_tokens + t) attends to keys 0 .. its position.
    double pairs = 0;
    for (int64_t t = 0; t < num_tokens; ++t) pairs += double(kv_len - num_tokens + t + 1);
    const double iters = double(st.iterations()) * layers;
    st.counters["GB/s"] = benchmark::Counter(2.0 * double(bytes) * iters / 1e9, benchmark::Counter::kIsRate);
    st.counters["GFLOP/s"] = benchmark::Counter(4.0 * double(m.head_dim) * double(m.heads) * pairs * iters / 1e9,
                                                benchmark::Counter::kIsRate);
}

int register_all() {
    using kiln::kernels::KvDtype;
    for (const Model& m : kModels)
        for (int threads : {1, 2}) {
            const std::string th = "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(("attention_prefill/" + std::string(m.name) + "/tokens:512" + th).c_str(),
                                         bm_attention, m, int64_t(512), int64_t(512), threads, KvDtype::kF32, 1)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
            // Decode: kv 2048 (L3-resident for the small shapes), and 4096 / 16384 (a long context
            // streamed from DRAM), per cache format.
            for (int64_t kv_len : {2048, 4096, 16384})
                for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kI8, KvDtype::kFp8})
                    benchmark::RegisterBenchmark(("attention_decode/" + std::string(m.name) + "/kv:" +
                                                  std::to_string(kv_len) + "/" + kiln::kernels::ref::kv_dtype_name(dt) + th)
                                                     .c_str(),
                                                 bm_attention, m, int64_t(1), kv_len, threads, dt, 1)
                        ->Unit(benchmark::kMicrosecond)
                        ->UseRealTime();
        }
    // Long-context decode as a model meets it: 4 layers of a Llama-3.2-1B-shaped cache (32 heads, 8
    // KV heads, head_dim 64), 0.5 GiB in all at 32768 keys.
    for (int64_t kv_len : {8192, 32768})
        for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kI8, KvDtype::kFp8})
            benchmark::RegisterBenchmark(("attention_decode_layers/llama3.2-1b/kv:" + std::to_string(kv_len) + "/" +
                                          kiln::kernels::ref::kv_dtype_name(dt) + "/layers:4/threads:2")
                                             .c_str(),
                                         bm_attention, Model{"llama3.2-1b", 32, 8, 64}, int64_t(1), kv_len, 2, dt, 4)
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
    return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace
