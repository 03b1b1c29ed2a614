// Google Benchmark microbenchmark of the SwiGLU kernel (kernels/cpu/activation.h) at every ISA this
// CPU runs, one thread, on the tinyllama-1.1b FFN width: one token (5632 elements, L1-resident) and
// a 32-token prefill tile (180224, L2). Counter: Gelem/s (1e9 outputs per second).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/activation.h"

namespace {

namespace kc = kiln::kernels::cpu;

void bm_silu_mul(benchmark::State& st, kc::Isa isa, int64_t n) {
    std::vector<float> g(static_cast<size_t>(n)), u(g.size()), out(g.size());
    for (int64_t i = 0; i < n; ++i) {
        g[size_t(i)] = float((i * 7919) % 2001 - 1000) / 200.0f;  // [-5, 5]
        u[size_t(i)] = float((i * 104729) % 2001 - 1000) / 1000.0f;
    }
    const kc::SiluMulFn fn = kc::find_silu_mul_kernel(isa);
    for (auto _ : st) {
        fn(g.data(), u.data(), out.data(), n);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    st.counters["Gelem/s"] = benchmark::Counter(double(n) * double(st.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

int register_all() {
    for (kc::Isa isa : kc::kAllIsas) {
        if (!kc::isa_supported(isa)) continue;
        for (int64_t n : {int64_t(5632), int64_t(32 * 5632)})
            benchmark::RegisterBenchmark(("silu_mul/" + std::string(kc::isa_name(isa)) + "/n:" + std::to_string(n)).c_str(),
                                         bm_silu_mul, isa, n)
                ->Unit(benchmark::kMicrosecond);
    }
    return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace
