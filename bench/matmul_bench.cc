// Single-thread timing of the CPU matmul kernels (kernels/cpu/matmul.h): decode (n = 1) reported
// as GB/s of weight bytes streamed, prefill (n = 64) as GOP/s (2 k rows n per second), best of 5.
// Weights live in anonymous memory. Not a test and not wired into CMake yet; build by hand against
// a release build, e.g.
//   g++ -O2 -std=c++20 -Isrc bench/matmul_bench.cc build/cpu-release/src/kernels/libkiln_kernels.a \
//       build/cpu-release/src/core/libkiln_core.a -lpthread -o /tmp/matmul_bench && /tmp/matmul_bench
// Output: one JSON object per line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/numeric.h"
#include "kernels/cpu/matmul.h"

namespace {
int reps_ = 5;

using kiln::core::DType;
namespace cpu = kiln::kernels::cpu;

std::vector<uint8_t> weights(DType t, int64_t rows, int64_t k) {
    const auto& info = kiln::core::dtype_info(t);
    std::vector<uint8_t> buf(size_t(*kiln::core::dtype_bytes(t, uint64_t(rows * k))));
    std::mt19937 rng(1);
    for (uint8_t& b : buf) b = uint8_t(rng());
    const uint16_t small = kiln::core::f32_to_fp16(0.01f);
    if (t == DType::kF16) {
        for (size_t i = 0; i < buf.size(); i += 2) std::memcpy(&buf[i], &small, 2);
    } else if (info.is_quantized) {
        const size_t d_off = t == DType::kQ6_K ? 208 : 0;
        for (size_t off = 0; off < buf.size(); off += info.block_bytes) {
            std::memcpy(&buf[off + d_off], &small, 2);
            if (t == DType::kQ4_1 || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ5_1)
                std::memcpy(&buf[off + 2], &small, 2);
        }
    }
    return buf;
}

double seconds_best_of(int reps, const std::function<void()>& fn) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s < best) best = s;
    }
    return best;
}

void run(DType t, cpu::Isa isa, int64_t rows, int64_t k, int64_t n, int threads = 1) {
    const cpu::MatmulKernel* kern = cpu::find_matmul_kernel(t, isa);
    if (kern == nullptr || !cpu::isa_supported(isa)) return;
    const std::vector<uint8_t> w = weights(t, rows, k);
    const size_t wrb = w.size() / size_t(rows);
    std::vector<float> x(size_t(n * k));
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> act(kern->act_row_bytes(k) * size_t(n));
    std::vector<float> y(size_t(n * rows));
    const double s = seconds_best_of(reps_, [&] {
        for (int64_t i = 0; i < n; ++i)
            kern->quantize_row(&x[size_t(i * k)], &act[size_t(i) * kern->act_row_bytes(k)], k);
        if (threads == 1) {
            kern->gemm(w.data(), wrb, act.data(), kern->act_row_bytes(k), n, k, y.data(), rows, 0, rows);
            return;
        }
        std::vector<std::thread> pool;
        for (int i = 0; i < threads; ++i) {
            const int64_t r0 = rows * i / threads, r1 = rows * (i + 1) / threads;
            pool.emplace_back([&, r0, r1] {
                kern->gemm(w.data(), wrb, act.data(), kern->act_row_bytes(k), n, k, y.data(), rows, r0, r1);
            });
        }
        for (auto& th : pool) th.join();
    });
    std::printf(
        "{\"type\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"rows\":%ld,\"k\":%ld,\"n\":%ld,\"ms\":%.3f,\"weight_GBps\":%."
        "2f,"
        "\"GOPs\":%.2f}\n",
        std::string(kiln::core::dtype_name(t)).c_str(), cpu::isa_name(isa), threads, long(rows), long(k), long(n),
        s * 1e3, double(w.size()) / s / 1e9, 2.0 * double(rows) * double(k) * double(n) / s / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1) reps_ = std::atoi(argv[1]);
    const std::string mode =
        argc > 2
            ? argv[2]
            : "";  // "q": cache-resident decode, "d": DRAM decode, "d2": DRAM decode 1 and 2 threads, "p": prefill only
    const DType types[] = {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kF16, DType::kBF16,
                           DType::kF32,  DType::kQ6_K, DType::kQ4_K, DType::kQ5_K};
    for (DType t : types) {
        if (mode != "d" && mode != "p") run(t, cpu::Isa::kAvx2, 2048, 2048, 1);   // cache-resident
        if (mode != "q" && mode != "p") run(t, cpu::Isa::kAvx2, 14336, 4096, 1);  // streams from DRAM
        if (mode == "d2") run(t, cpu::Isa::kAvx2, 14336, 4096, 1, 2);
        if (mode == "p") {
            run(t, cpu::Isa::kAvx2, 2048, 2048, 64);
            continue;
        }
        if (!mode.empty()) continue;
        run(t, cpu::Isa::kAvx2, 14336, 4096, 1, 2);
        run(t, cpu::Isa::kAvx2, 2048, 2048, 64);  // prefill
    }
    run(DType::kQ4_1, cpu::Isa::kRef, 2048, 2048, 1);
    return 0;
}
