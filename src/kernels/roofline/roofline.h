// Roofline probes: the machine's floors that every throughput figure is reported against
// (DESIGN.md "Performance method"). Each probe measures what a tuned kernel could get:
// - read bandwidth: a buffer of >= 1 GiB, touched before timing (no page faults inside the timed
//   part), read by every thread of the pool, 256-bit loads on AVX2; measure_roofline keeps the better
//   of one stream and kDefaultStreams independent streams per thread (one stream per core left ~20%
//   of the bandwidth unused on the AVX2 VMs; on the AVX-512 VNNI VM one stream reads the most);
// - f32 FMA peak: 12 independent FMA chains per thread (enough to cover FMA latency x issue width
//   on current x86 cores), counted as 2 flops per lane;
// - int8 dot peak: AVX2's vpmaddubsw + vpmaddwd pair (the u8 x s8 dot of ggml's q8 kernels),
//   counted as 2 ops per int8 multiply-accumulate;
// - AVX-512 VNNI (vpdpbusd) and BF16 (vdpbf16ps) peaks: only on CPUs that have them, else nullopt.
// Every probe runs on all threads of the pool and reports the best of `reps` runs. The instruction
// set is chosen at run time (__builtin_cpu_supports), never at compile time; without AVX2 the probes
// fall back to portable scalar loops (and say so in isa()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"

namespace kiln::kernels::roofline {

inline constexpr uint64_t kDefaultReadBytes = uint64_t(1) << 30;  // 1 GiB: far past any L3
inline constexpr int kDefaultStreams = 4;                         // independent read streams per thread
inline constexpr int kDefaultReps = 5;

struct Roofline {
    int threads = 0;
    std::string isa;                       // the probes' instruction set: "avx2+fma" or "scalar"
    double read_gbps = 0;                  // 1e9 bytes / s
    double fma_f32_gflops = 0;             // 1e9 flops / s, 2 per FMA lane
    double int8_gops = 0;                  // 1e9 ops / s, 2 per int8 MAC
    std::optional<double> vnni_int8_gops;  // AVX-512 VNNI vpdpbusd; nullopt when unsupported
    std::optional<double> avx_vnni_int8_gops;  // AVX-VNNI 256-bit vpdpbusd; nullopt when unsupported
    std::optional<double> bf16_gflops;     // AVX-512 BF16 vdpbf16ps; nullopt when unsupported
};

// The ISA the probes use on this CPU: "avx2+fma" or "scalar".
std::string probe_isa();
bool cpu_has_avx512_vnni();
bool cpu_has_avx512_bf16();
bool cpu_has_avx_vnni();

// Memory read bandwidth in GB/s. kInvalidArgument for buffer_bytes < 64 MiB, streams other than 1, 2,
// 4, 8 or 16, or reps < 1; kOutOfMemory when the buffer cannot be allocated.
core::Result<double> read_bandwidth_gbps(core::ThreadPool& pool, uint64_t buffer_bytes = kDefaultReadBytes,
                                         int streams = kDefaultStreams, int reps = kDefaultReps);
// The read probe's buffer, kept for repeated passes: one pass reads every byte once, each pool
// thread its share as `streams` streams. For sampling the bandwidth between other work (kiln bench
// reads it between decode steps); the same loop as read_bandwidth_gbps, which is the best of `reps`
// passes of a fresh probe.
class ReadProbe {
public:
    // As read_bandwidth_gbps's arguments (kInvalidArgument, kOutOfMemory); the buffer is mapped and
    // written (first touch by the reading thread) here, not in pass_seconds.
    static core::Result<ReadProbe> create(core::ThreadPool& pool, uint64_t buffer_bytes, int streams = 1);
    // One timed pass over the buffer on `pool` (the pool it was created with).
    double pass_seconds(core::ThreadPool& pool) const { return pass_seconds(pool, streams_); }
    // The same with `streams` streams per thread instead of create's (1, 2, 4, 8 or 16: a thread's
    // share is a whole number of 1 KiB, so 64-byte lines for each), so one buffer serves them all.
    double pass_seconds(core::ThreadPool& pool, int streams) const;
    uint64_t bytes() const { return per_thread_ * uint64_t(threads_); }
    int threads() const { return threads_; }

private:
    std::shared_ptr<uint8_t> buf_;
    int threads_ = 0, streams_ = 1;
    uint64_t per_thread_ = 0;
};

double fma_f32_peak_gflops(core::ThreadPool& pool, int reps = kDefaultReps);
double int8_dot_peak_gops(core::ThreadPool& pool, int reps = kDefaultReps);
std::optional<double> vnni_int8_peak_gops(core::ThreadPool& pool, int reps = kDefaultReps);
// AVX-VNNI's 256-bit vpdpbusd peak (the avx-vnni kernels' arithmetic); nullopt without AVX-VNNI.
std::optional<double> avx_vnni_int8_peak_gops(core::ThreadPool& pool, int reps = kDefaultReps);
std::optional<double> bf16_dot_peak_gflops(core::ThreadPool& pool, int reps = kDefaultReps);

// All of the above.
core::Result<Roofline> measure_roofline(core::ThreadPool& pool, uint64_t buffer_bytes = kDefaultReadBytes,
                                        int reps = kDefaultReps);

}  // namespace kiln::kernels::roofline
