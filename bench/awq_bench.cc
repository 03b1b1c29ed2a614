// Google Benchmark of the AWQ scale search (quant/awq.h) at SmolLM2-135M shapes: the three AWQ
// groups of a decoder layer (hidden 576, intermediate 1536, 9 query / 3 KV heads of 64), 512
// calibration rows whose channels 7 and 300 carry 20x outliers, the default options (grid 20, g128),
// on one thread and on a pool of the physical cores. It replaces a disabled timing test: speed is
// measured here, never asserted in a test (tests/unit/quant_awq_test.cc checks the search itself).
// Counter GMAC/s: rows x in x samples x grid multiply-adds of the candidate products per second.
//   build/bench/bin/quant_bench --benchmark_filter=awq
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "quant/awq.h"

namespace kiln::quant {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    return x;
}

struct Group {
    const char* name;
    int64_t in;
    std::vector<int64_t> rows;
};
const Group kGroups[] = {{"qkv", 576, {576, 192, 192}}, {"gate_up", 576, {1536, 1536}}, {"down", 1536, {576}}};
constexpr int64_t kSamples = 512;

void BM_AwqSearch(benchmark::State& state) {
    const Group& g = kGroups[state.range(0)];
    const bool pooled = state.range(1) != 0;
    std::vector<std::vector<float>> ws;
    std::vector<std::span<const float>> spans;
    for (int64_t r : g.rows) ws.push_back(gaussian(r * g.in, uint32_t(r), 0.02f));
    for (const auto& w : ws) spans.emplace_back(w);
    std::vector<float> x = gaussian(kSamples * g.in, 5, 1.0f);  // [kSamples, in]
    for (int64_t i = 0; i < kSamples; ++i)
        for (int64_t c : {7, 300}) x[size_t(i * g.in + c)] *= 20.0f;
    core::ThreadPool pool(core::ThreadPool::default_num_threads());
    const AwqOptions options;
    for (auto _ : state) {
        auto r = awq_search(spans, g.rows, g.in, x, kSamples, options, pooled ? &pool : nullptr);
        if (!r.is_ok()) state.SkipWithError(r.status().to_string().c_str());
        benchmark::DoNotOptimize(r);
    }
    int64_t total_rows = 0;
    for (int64_t r : g.rows) total_rows += r;
    const double macs = double(total_rows) * double(g.in) * double(kSamples) * double(options.grid);
    state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.SetLabel(std::string(g.name) + (pooled ? " pool" : " 1 thread"));
}
BENCHMARK(BM_AwqSearch)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace
}  // namespace kiln::quant
