// Roofline probes (see roofline.h): buffer setup, timing, run-time ISA choice and the portable
// scalar loops. Timing is the wall time of one ThreadPool::parallel_for with one chunk per thread,
// so thread wake-up (microseconds) is inside it; each timed run lasts tens of milliseconds (the
// compute probes calibrate their iteration count to ~50 ms), which keeps that overhead under 0.1%.
#include "kernels/roofline/roofline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "core/cpu_info.h"
#include "core/huge_pages.h"
#include "kernels/roofline/roofline_kernels.h"

#if defined(__x86_64__)
#define KILN_ROOFLINE_X86 1
#else
#define KILN_ROOFLINE_X86 0
#endif

namespace kiln::kernels::roofline {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTargetSeconds = 0.05;  // per timed run of a compute probe

// Keeps results observable so no probe loop is optimized away.
std::atomic<uint64_t> g_sink{0};

bool has_avx2_fma() {
#if KILN_ROOFLINE_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

// Runs fn(thread_idx) once on each thread of the pool, `reps` times; returns the shortest wall time
// in seconds.
template <typename Fn>
double best_time(core::ThreadPool& pool, int reps, const Fn& fn) {
    const int n = pool.num_threads();
    double best = 1e300;
    for (int r = 0; r < std::max(1, reps); ++r) {
        const auto t0 = Clock::now();
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) fn(int(t));
        });
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
}

// Iterations of loop(iters) that make one all-thread run last about kTargetSeconds: timed from a
// short run, so optimized builds get a long enough run and debug builds do not take minutes.
template <typename Loop>
int64_t calibrate(core::ThreadPool& pool, const Loop& loop) {
    int64_t iters = int64_t(1) << 14;
    for (;;) {
        const double t =
            best_time(pool, 1, [&](int) { g_sink.fetch_add(uint64_t(loop(iters)), std::memory_order_relaxed); });
        if (t >= 0.005 || iters >= (int64_t(1) << 30))
            return std::clamp<int64_t>(int64_t(double(iters) * kTargetSeconds / std::max(t, 1e-9)), 1 << 10,
                                       int64_t(1) << 32);
        iters *= 8;
    }
}

// Best-of-reps throughput in units of 1e9 / s of loop(iters), which does `per_iter` units per
// iteration on each thread.
template <typename Loop>
double peak(core::ThreadPool& pool, int reps, double per_iter, const Loop& loop) {
    const int64_t iters = calibrate(pool, loop);
    const double sec =
        best_time(pool, reps, [&](int) { g_sink.fetch_add(uint64_t(loop(iters)), std::memory_order_relaxed); });
    return per_iter * double(iters) * pool.num_threads() / sec / 1e9;
}

}  // namespace

namespace detail {

uint64_t read_scalar(const uint8_t* p, size_t bytes, int streams) {
    uint64_t acc[8] = {};
    const size_t per_stream = bytes / size_t(streams);
    for (size_t off = 0; off < per_stream; off += 64) {
        for (int k = 0; k < streams; ++k) {
            const uint8_t* q = p + size_t(k) * per_stream + off;
            for (int j = 0; j < 8; ++j) {
                uint64_t v;
                std::memcpy(&v, q + 8 * j, 8);
                acc[j] += v;
            }
        }
    }
    uint64_t s = 0;
    for (uint64_t a : acc) s += a;
    return s;
}

float fma_scalar(int64_t iters) {
    float c[kFmaChains];
    for (int k = 0; k < kFmaChains; ++k) c[k] = 0.1f * float(k + 1);
    const float a = 0.999999f, b = 1e-3f;
    for (int64_t i = 0; i < iters; ++i)
        for (int k = 0; k < kFmaChains; ++k) c[k] = c[k] * a + b;
    float s = 0;
    for (float x : c) s += x;
    return s;
}

int32_t int8_scalar(int64_t iters) {
    alignas(64) int8_t block[kOperandBytes];
    for (int j = 0; j < kOperandBytes; ++j) block[j] = int8_t(j % 7 - 3);
    int32_t acc[kInt8Chains] = {};
    for (int64_t i = 0; i < iters; ++i) {
        KILN_ROOFLINE_OPAQUE(block);
        for (int k = 0; k < kInt8Chains; ++k)
            for (int j = 0; j < 4; ++j) acc[k] += int32_t(block[4 * k + j]) * int32_t(block[64 + j]);
    }
    int32_t s = 0;
    for (int32_t a : acc) s += a;
    return s;
}

}  // namespace detail

std::string probe_isa() {
    return has_avx2_fma() ? "avx2+fma" : "scalar";
}

bool cpu_has_avx512_vnni() {
#if KILN_ROOFLINE_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

bool cpu_has_avx_vnni() {  // core's CPUID reading: older clangs' __builtin_cpu_supports has no "avxvnni"
    return core::cpu_features().avxvnni;
}

bool cpu_has_avx512_bf16() {
#if KILN_ROOFLINE_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

core::Result<ReadProbe> ReadProbe::create(core::ThreadPool& pool, uint64_t buffer_bytes, int streams) {
    if (buffer_bytes < (uint64_t(64) << 20))
        return core::error(core::StatusCode::kInvalidArgument)
               << "read bandwidth probe: buffer of " << buffer_bytes << " bytes is too small (want >= 64 MiB, "
               << "well past the last-level cache)";
    if (streams < 1 || streams > 16 || 16 % streams != 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "read bandwidth probe: " << streams << " streams per thread (want 1, 2, 4, 8 or 16)";
    const int n = pool.num_threads();
    // Each thread reads `per_thread` bytes split into 1, 2, 4, 8 or 16 ranges of whole 64-byte lines.
    const uint64_t unit = uint64_t(16) * 64;
    const uint64_t per_thread = buffer_bytes / uint64_t(n) / unit * unit;
    if (per_thread == 0)
        return core::error(core::StatusCode::kInvalidArgument) << "read bandwidth probe: too many threads";
    const size_t total = size_t(per_thread * uint64_t(n));
    // 2 MiB aligned with huge pages advised, as the packed weights that decode streams
    auto mapped = core::map_huge_pages(total);
    if (!mapped.is_ok())
        return core::error(core::StatusCode::kOutOfMemory)
               << "read bandwidth probe: " << mapped.status().message();
    ReadProbe probe;
    probe.buf_ = std::move(mapped).value();
    probe.threads_ = n;
    probe.streams_ = streams;
    probe.per_thread_ = per_thread;
    // First touch by the thread that will read the range (NUMA-local pages), with non-zero bytes
    // so no zero-page sharing can shortcut the reads. Untimed.
    uint8_t* base = probe.buf_.get();
    best_time(pool, 1, [&](int t) { std::memset(base + uint64_t(t) * per_thread, 0x5a, size_t(per_thread)); });
    return probe;
}

double ReadProbe::pass_seconds(core::ThreadPool& pool, int streams) const {
    KILN_CHECK(streams >= 1 && streams <= 16 && 16 % streams == 0)
        << "read bandwidth probe: " << streams << " streams per thread";
    const bool simd = has_avx2_fma();
    const uint8_t* base = buf_.get();
    std::atomic<uint64_t> sum{0};
    const double sec = best_time(pool, 1, [&](int t) {
        const uint8_t* p = base + uint64_t(t) * per_thread_;
#if KILN_ROOFLINE_X86
        uint64_t s = simd ? detail::read_avx2(p, size_t(per_thread_), streams)
                          : detail::read_scalar(p, size_t(per_thread_), streams);
#else
        (void)simd;
        uint64_t s = detail::read_scalar(p, size_t(per_thread_), streams);
#endif
        sum.fetch_add(s, std::memory_order_relaxed);
    });
    g_sink.fetch_add(sum.load(), std::memory_order_relaxed);
    return sec;
}

core::Result<double> read_bandwidth_gbps(core::ThreadPool& pool, uint64_t buffer_bytes, int streams, int reps) {
    if (reps < 1) return core::error(core::StatusCode::kInvalidArgument) << "read bandwidth probe: reps must be >= 1";
    KILN_ASSIGN_OR_RETURN(const ReadProbe probe, ReadProbe::create(pool, buffer_bytes, streams));
    double sec = 1e300;
    for (int r = 0; r < reps; ++r) sec = std::min(sec, probe.pass_seconds(pool));
    return double(probe.bytes()) / sec / 1e9;
}

double fma_f32_peak_gflops(core::ThreadPool& pool, int reps) {
#if KILN_ROOFLINE_X86
    if (has_avx2_fma()) return peak(pool, reps, detail::kFmaAvx2FlopsPerIter, detail::fma_avx2);
#endif
    return peak(pool, reps, detail::kFmaScalarFlopsPerIter, detail::fma_scalar);
}

double int8_dot_peak_gops(core::ThreadPool& pool, int reps) {
#if KILN_ROOFLINE_X86
    if (has_avx2_fma()) return peak(pool, reps, detail::kInt8Avx2OpsPerIter, detail::int8_avx2);
#endif
    return peak(pool, reps, detail::kInt8ScalarOpsPerIter, detail::int8_scalar);
}

std::optional<double> vnni_int8_peak_gops(core::ThreadPool& pool, int reps) {
#if KILN_ROOFLINE_X86
    if (cpu_has_avx512_vnni()) return peak(pool, reps, detail::kVnniOpsPerIter, detail::vnni_avx512);
#endif
    (void)pool, (void)reps;
    return std::nullopt;
}

std::optional<double> avx_vnni_int8_peak_gops(core::ThreadPool& pool, int reps) {
#if KILN_ROOFLINE_X86
    if (cpu_has_avx_vnni()) return peak(pool, reps, detail::kVnni256OpsPerIter, detail::vnni_avx256);
#endif
    (void)pool, (void)reps;
    return std::nullopt;
}

std::optional<double> bf16_dot_peak_gflops(core::ThreadPool& pool, int reps) {
#if KILN_ROOFLINE_X86
    if (cpu_has_avx512_bf16()) return peak(pool, reps, detail::kBf16FlopsPerIter, detail::bf16_avx512);
#endif
    (void)pool, (void)reps;
    return std::nullopt;
}

core::Result<Roofline> measure_roofline(core::ThreadPool& pool, uint64_t buffer_bytes, int reps) {
    Roofline r;
    r.threads = pool.num_threads();
    r.isa = probe_isa();
    // The better of one stream and kDefaultStreams streams per thread: which reads more depends on
    // the machine (4 on the AVX2 VMs, 1 on the AVX-512 VNNI VM, docs/performance.md).
    // One buffer for both (mapping and first-touching 1 GiB costs more than the passes).
    if (reps < 1) return core::error(core::StatusCode::kInvalidArgument) << "read bandwidth probe: reps must be >= 1";
    KILN_ASSIGN_OR_RETURN(const ReadProbe probe, ReadProbe::create(pool, buffer_bytes, 1));
    double one = 1e300, several = 1e300;
    for (int i = 0; i < reps; ++i) {
        one = std::min(one, probe.pass_seconds(pool, 1));
        several = std::min(several, probe.pass_seconds(pool, kDefaultStreams));
    }
    r.read_gbps = double(probe.bytes()) / std::min(one, several) / 1e9;
    r.fma_f32_gflops = fma_f32_peak_gflops(pool, reps);
    r.int8_gops = int8_dot_peak_gops(pool, reps);
    r.vnni_int8_gops = vnni_int8_peak_gops(pool, reps);
    r.avx_vnni_int8_gops = avx_vnni_int8_peak_gops(pool, reps);
    r.bf16_gflops = bf16_dot_peak_gflops(pool, reps);
    return r;
}

}  // namespace kiln::kernels::roofline
