// Google Benchmark microbenchmarks of the CPU matmul kernels (kernels/cpu/matmul.h), with OpenBLAS
// cblas_sgemm side by side for f32 GEMM at prefill shapes (when built with KILN_BENCH_OPENBLAS).
// See docs/performance.md "Microbenchmarks" for the commands and measured figures.
//
// Counters (rates, 1e9 units; "/s" in the console, plain numbers in --benchmark_format=json):
//   GB/s    weight bytes read per second (every weight byte is read once per call);
//   GOP/s   2 * rows * k * n per second (multiply-adds of the matmul; int8 ops for quantized
//           weights, f32 flops for F32/F16/BF16 and for sgemm).
// Benchmarks:
//   roofline/...                 the floors of the same run (kernels/roofline), 1 and 2 threads
//   decode_gemm/T/ISA/R/K        n = 1, one thread, the kernel's gemm over all rows; the activation
//                                is quantized once outside the timed loop (as ops::linear does once
//                                per token for all threads)
//   decode_linear/T/R/K/threads  n = 1 through ops::linear (quantization included) on a ThreadPool
//   prefill_gemm/T/R/K/n         one thread, the kernel's gemm (activations quantized outside)
//   prefill_linear/T/R/K/n/thr   ops::linear on a ThreadPool (quantization included)
//   prefill_sgemm/R/K/n/thr      cblas_sgemm, y [n, R] = x [n, K] @ W^T, openblas_set_num_threads(thr)
// Weights: random floats ~U(-1, 1) for F32/F16/BF16; random bytes with finite fp16 scale fields
// (0.01, and the Q4_1/Q4_K min fields) for the quantized types (I8: random bytes, row scales 0.01), in anonymous memory with
// MADV_HUGEPAGE, touched before timing.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/transformer.h"
#include "kernels/roofline/roofline.h"
#include "ops/linear.h"

#ifdef KILN_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace {

using kiln::core::DType;
namespace cpu = kiln::kernels::cpu;

// xorshift64*: fast enough to fill a 235 MB matrix in well under a second.
struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1DULL;
    }
    float uniform() { return float(next() >> 40) * (2.0f / float(1 << 24)) - 1.0f; }  // [-1, 1)
};

struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;

// Anonymous, 2 MiB aligned, huge pages advised (DESIGN.md "Performance method").
Buffer alloc_anon(size_t bytes) {
    constexpr size_t kAlign = size_t(2) << 20;
    const size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(kAlign, size));
    if (p == nullptr) std::abort();
    madvise(p, size, MADV_HUGEPAGE);
    return Buffer(p);
}

struct Weights {
    Buffer data;
    size_t bytes = 0;
    size_t row_bytes = 0;
};

Weights make_weights(DType t, int64_t rows, int64_t k) {
    const auto& info = kiln::core::dtype_info(t);
    Weights w;
    w.bytes = size_t(*kiln::core::dtype_bytes(t, uint64_t(rows * k)));
    w.row_bytes = w.bytes / size_t(rows);
    w.data = alloc_anon(w.bytes);
    uint8_t* p = w.data.get();
    Rng rng{0x9E3779B97F4A7C15ULL ^ uint64_t(rows * 31 + k)};
    const size_t n = size_t(rows * k);
    if (t == DType::kF32) {
        auto* f = reinterpret_cast<float*>(p);
        for (size_t i = 0; i < n; ++i) f[i] = rng.uniform();
    } else if (t == DType::kF16 || t == DType::kBF16) {
        for (size_t i = 0; i < n; ++i) {
            const float v = rng.uniform();
            const uint16_t h = t == DType::kF16 ? kiln::core::f32_to_fp16(v) : kiln::core::f32_to_bf16(v);
            std::memcpy(p + 2 * i, &h, 2);
        }
    } else {  // quantized blocks, or I8 (random int8 values; the row scales are ops::Linear's)
        for (size_t i = 0; i + 8 <= w.bytes; i += 8) {
            const uint64_t r = rng.next();
            std::memcpy(p + i, &r, 8);
        }
        for (size_t i = w.bytes / 8 * 8; i < w.bytes; ++i) p[i] = uint8_t(rng.next());
        // Scale fields (GGML block layouts): d first, except Q6_K (d after ql, qh, scales at 208);
        // Q4_1 (m) and Q4_K / Q5_K (dmin) have a second fp16 right after d.
        const uint16_t small = kiln::core::f32_to_fp16(0.01f);
        const size_t d_off = t == DType::kQ6_K ? 208 : 0;
        const bool has_min = t == DType::kQ4_1 || t == DType::kQ5_1 || t == DType::kQ4_K || t == DType::kQ5_K;
        for (size_t off = 0; off < w.bytes && t != DType::kI8; off += info.block_bytes) {
            std::memcpy(p + off + d_off, &small, 2);
            if (has_min) std::memcpy(p + off + 2, &small, 2);
        }
    }
    return w;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
    Rng rng{seed * 0x9E3779B97F4A7C15ULL + 1};
    std::vector<float> v(n);
    for (float& x : v) x = rng.uniform();
    return v;
}

kiln::core::ThreadPool& pool(int threads) {
    static kiln::core::ThreadPool p1(1), p2(2);
    return threads == 1 ? p1 : p2;
}

void set_counters(benchmark::State& st, double bytes, double ops) {
    const double iters = double(st.iterations());
    st.counters["GB/s"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
    st.counters["GOP/s"] = benchmark::Counter(ops * iters / 1e9, benchmark::Counter::kIsRate);
}

// The kernel's gemm on one thread, rows [0, rows), n activation rows quantized once up front.
void bm_gemm(benchmark::State& st, DType t, cpu::Isa isa, int64_t rows, int64_t k, int64_t n) {
    if (!cpu::isa_supported(isa)) return st.SkipWithError("ISA not supported by this CPU");
    const kiln::kernels::MatmulKernel* kern = cpu::find_matmul_kernel(t, isa);
    if (kern == nullptr) return st.SkipWithError("no kernel for this type and ISA");
    const Weights w = make_weights(t, rows, k);
    const std::vector<float> x = random_floats(size_t(n * k), 2);
    const size_t arb = kern->act_row_bytes(k);
    std::vector<uint8_t> act(arb * size_t(n));
    for (int64_t i = 0; i < n; ++i) kern->quantize_row(&x[size_t(i * k)], &act[size_t(i) * arb], k);
    std::vector<float> y(size_t(n * rows));
    for (auto _ : st) {
        kern->gemm(w.data.get(), w.row_bytes, act.data(), arb, n, k, y.data(), rows, 0, rows);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_counters(st, double(w.bytes), 2.0 * double(rows) * double(k) * double(n));
}

// ops::linear (activation quantization + row split over the pool) at the best ISA.
void bm_linear(benchmark::State& st, DType t, int64_t rows, int64_t k, int64_t n, int threads) {
    const Weights w = make_weights(t, rows, k);
    auto view = kiln::kernels::ref::make_weight_view(w.data.get(), t, rows, k);
    const std::vector<float> scales(size_t(rows), 0.01f);
    if (t == DType::kI8) view.row_scale = scales.data();
    auto lin = kiln::ops::make_linear(view, kiln::ops::LinearOptions{});
    if (!lin.is_ok()) return st.SkipWithError("make_linear failed");
    const std::vector<float> x = random_floats(size_t(n * k), 3);
    std::vector<float> y(size_t(n * rows));
    std::vector<uint8_t> scratch;
    auto& p = pool(threads);
    for (auto _ : st) {
        if (!kiln::ops::linear(p, x.data(), n, *lin, nullptr, y.data(), scratch).is_ok())
            return st.SkipWithError("linear failed");
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_counters(st, double(w.bytes), 2.0 * double(rows) * double(k) * double(n));
}

#ifdef KILN_BENCH_OPENBLAS
void bm_sgemm(benchmark::State& st, int64_t rows, int64_t k, int64_t n, int threads) {
    openblas_set_num_threads(threads);
    const Weights w = make_weights(DType::kF32, rows, k);
    const auto* W = reinterpret_cast<const float*>(w.data.get());
    const std::vector<float> x = random_floats(size_t(n * k), 4);
    std::vector<float> y(size_t(n * rows));
    for (auto _ : st) {
        // y [n, rows] = x [n, k] @ W^T, W [rows, k] row-major (as kiln stores it).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(rows), int(k), 1.0f, x.data(), int(k), W,
                    int(k), 0.0f, y.data(), int(rows));
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_counters(st, double(w.bytes), 2.0 * double(rows) * double(k) * double(n));
    st.SetLabel(std::string("openblas ") + openblas_get_corename());
}
#endif

void bm_roofline(benchmark::State& st, int threads) {
    namespace rl = kiln::kernels::roofline;
    auto& p = pool(threads);
    double bw = 0, fma = 0, i8 = 0;
    for (auto _ : st) {
        auto r = rl::read_bandwidth_gbps(p);
        if (!r.is_ok()) return st.SkipWithError("read_bandwidth_gbps failed");
        bw = *r;
        fma = rl::fma_f32_peak_gflops(p);
        i8 = rl::int8_dot_peak_gops(p);
    }
    st.counters["read_GB/s"] = bw;
    st.counters["fma_GFLOP/s"] = fma;
    st.counters["int8_GOP/s"] = i8;
    st.SetLabel(rl::probe_isa());
}

struct Shape {
    int64_t rows, k;
};
// tinyllama-1.1b: q/o (2048x2048), gate/up (5632x2048), down (2048x5632); llama-3-8b gate/up
// (14336x4096, 235 MB in f32: streams from DRAM for every type).
constexpr Shape kDecodeShapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {14336, 4096}};
constexpr DType kDecodeTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kI8,
                                  DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr DType kPrefillTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kI8,
                                   DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr Shape kPrefillShapes[] = {{2048, 2048}, {5632, 2048}};
constexpr int64_t kPrefillTokens[] = {64, 512};

std::string name(DType t) {
    return std::string(kiln::core::dtype_name(t));
}
std::string dims(const Shape& s) {
    return std::to_string(s.rows) + "x" + std::to_string(s.k);
}

int register_all() {
    for (int threads : {1, 2})
        benchmark::RegisterBenchmark(("roofline/threads:" + std::to_string(threads)).c_str(), bm_roofline, threads)
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
    const cpu::Isa best = cpu::best_isa();
    for (DType t : kDecodeTypes) {
        for (const Shape& s : kDecodeShapes) {
            benchmark::RegisterBenchmark(("decode_gemm/" + name(t) + "/" + cpu::isa_name(best) + "/" + dims(s)).c_str(),
                                         bm_gemm, t, best, s.rows, s.k, int64_t(1))
                ->Unit(benchmark::kMicrosecond);
            benchmark::RegisterBenchmark(("decode_linear/" + name(t) + "/" + dims(s) + "/threads:2").c_str(), bm_linear,
                                         t, s.rows, s.k, int64_t(1), 2)
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
        }
        // Every other level this CPU runs (the --isa paths), at the first shape.
        for (cpu::Isa isa : cpu::kAllIsas) {
            if (isa == best || !cpu::isa_supported(isa)) continue;
            benchmark::RegisterBenchmark(
                ("decode_gemm/" + name(t) + "/" + cpu::isa_name(isa) + "/" + dims(kDecodeShapes[0])).c_str(), bm_gemm,
                t, isa, kDecodeShapes[0].rows, kDecodeShapes[0].k, int64_t(1))
                ->Unit(benchmark::kMicrosecond);
        }
    }
    for (DType t : kPrefillTypes) {  // prefill at every level but kRef (too slow to matter), first shape
        for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvxVnni, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni}) {
            if (isa == best || !cpu::isa_supported(isa)) continue;
            benchmark::RegisterBenchmark(("prefill_gemm/" + name(t) + "/" + cpu::isa_name(isa) + "/" +
                                          dims(kPrefillShapes[0]) + "/n:" + std::to_string(kPrefillTokens[0]))
                                             .c_str(),
                                         bm_gemm, t, isa, kPrefillShapes[0].rows, kPrefillShapes[0].k,
                                         kPrefillTokens[0])
                ->Unit(benchmark::kMillisecond);
        }
    }
    for (const Shape& s : kPrefillShapes) {
        for (int64_t n : kPrefillTokens) {
            const std::string sn = dims(s) + "/n:" + std::to_string(n);
            for (DType t : kPrefillTypes) {
                benchmark::RegisterBenchmark(("prefill_gemm/" + name(t) + "/" + cpu::isa_name(best) + "/" + sn).c_str(),
                                             bm_gemm, t, best, s.rows, s.k, n)
                    ->Unit(benchmark::kMillisecond);
                for (int threads : {1, 2})
                    benchmark::RegisterBenchmark(
                        ("prefill_linear/" + name(t) + "/" + sn + "/threads:" + std::to_string(threads)).c_str(),
                        bm_linear, t, s.rows, s.k, n, threads)
                        ->Unit(benchmark::kMillisecond)
                        ->UseRealTime();
            }
#ifdef KILN_BENCH_OPENBLAS
            for (int threads : {1, 2})
                benchmark::RegisterBenchmark(("prefill_sgemm/" + sn + "/threads:" + std::to_string(threads)).c_str(),
                                             bm_sgemm, s.rows, s.k, n, threads)
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime();
#endif
        }
    }
    return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace
