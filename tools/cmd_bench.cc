// `kiln bench -m MODEL [-p 512] [-n 128] [-d 0] [-t N] [-r 5] [--json]`: llama-bench style throughput
// on the CPU (with --device cuda[:N]: tools/cmd_bench_cuda.cc, the model on a GPU)
// (pp: one forward over p prompt tokens; tg: n decode steps of one token each; both after d tokens
// already in the cache, which an untimed forward puts there: an empty cache by default)
// reported next to the machine's floors measured in the same run (kernels/roofline: memory read
// bandwidth, f32 FMA peak, int8 dot peak), as DESIGN.md "Performance method" asks.
// Each test runs once as a warm-up (tg: min(n, 8) steps), then REPS times; tokens/s is the median.
// The probes run before and after the tests and each floor keeps the better figure: a floor is a
// property of the machine, and other load on a shared VM can only lower a measurement of it.
// Weights are copied into anonymous memory (MADV_HUGEPAGE) unless --mmap, so background reclaim of
// file-backed pages cannot swing the figures; matrices repacked at load are packed from the file and
// not copied (model::create_model). The model line gives the resident set after load.
// Formulas (docs/performance.md):
//   weight_bytes  = every tensor of the layers + output_norm + the output matrix (token_embd when
//                   tied: counted once) ; the embedding lookup reads one row per token
//   tg: bytes_per_token = weight_bytes + embd_row_bytes + kv_position_bytes * (d + (n + 1) / 2),
//       kv_position_bytes = 2 * layers * row_bytes (K and V of one position; row_bytes = kv_dim * 4
//       for the f32 cache, * 2 for f16, kv_dim + 4 * kv_heads for int8 / fp8): the
//       cache every step attends to, its mean length over the run
//   pp: bytes_per_token = weight_bytes / p + embd_row_bytes   (weights streamed once per forward)
//   Mixture of experts: weight_bytes leaves the experts out; a forward over t tokens (1 for tg, p
//   for pp) adds expert_bytes * (1 - (1 - k / E)^t), the expected share of experts its tokens choose
//   under uniform routing (k / E for one token: decode reads only the chosen experts), and the
//   experts' matmul weights count k / E of theirs in ops_per_token.
//   ops_per_token = 2 * (matmul weights used per token): 2 * layer matrices + 2 * vocab * hidden for
//                   tg; for pp the logits are computed for the last token only, so 2 * V * H / p.
//                   Attention score/value flops (4 * layers * q_dim * context) are not counted.
//   achieved_gbps = bytes_per_token * tokens_per_s / 1e9 ; pct_of_bw_limit = 100 * achieved / bw_limit
//   achieved_gops = ops_per_token * tokens_per_s / 1e9   ; pct_of_peak = 100 * achieved / peak_gops
//   tg only: ambient_bw_gbps = median over runs of (read-pass bytes / read-pass seconds) of the
//   passes between that run's decode steps; pct_of_ambient_bw = median over runs of 100 * the
//   run's achieved GB/s / its ambient GB/s (decode time excludes the passes)
//   peak_gops = the peak of the arithmetic the matmuls use: when the matmul kernel quantizes
//               activations to 8 bits (quantized weights on kernels/cpu), the VNNI peak for the
//               avx512-vnni kernels, the AVX-VNNI (256-bit) peak for the avx-vnni kernels and the
//               AVX2 int8 dot peak otherwise; the BF16 dot peak for
//               BF16 weights on the avx512-vnni kernels (vdpbf16ps; the amx level is held to these
//               two as well: no AMX probe, its tiles may pass them); else the f32 FMA peak (float
//               weights on other ISAs, or the f32 reference path). JSON peak_kind names it.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "model_session.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/ref/kv_quant.h"
#include "kernels/roofline/roofline.h"
#include "loader/layer_tensors.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "ops/linear.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

constexpr const char* kBenchUsage =
    "usage: kiln bench -m MODEL [-p N] [-n N] [-d N] [-t N] [-r N] [--isa ISA] [--f32-activations] [--no-pack]\n"
    "                  [--kv-cache-dtype T] [--json] [--mmap] [--probe-mib N]\n"
    "       kiln bench offline --help   (the serving engine's throughput over many requests)\n"
    "       kiln bench serve --help     (load generator for a running `kiln serve`)\n"
    "\n"
    "Measures prefill (ppN) and decode (tgN) tokens/s, the median of REPS runs after a warm-up, and\n"
    "in the same run the machine's memory read bandwidth, f32 FMA peak and int8 dot peak; reports\n"
    "each throughput as a share of those limits (formulas: docs/performance.md). tgN also reads a\n"
    "64 MiB buffer between its decode steps (every 16 tokens, timed apart) and reports decode's share\n"
    "of what those reads got at the same moments: on a shared machine the bandwidth moves. A tg\n"
    "token's bytes are the weights plus the K/V cache it attends to (its mean length over the run).\n"
    "\n"
    "  -m, --model MODEL   GGUF file, safetensors file or HF folder, or llama2.c .bin\n"
    "  -p, --n-prompt N    prompt tokens of the pp test (default 512; 0 skips it)\n"
    "  -n, --n-gen N       decode steps of the tg test (default 128; 0 skips it)\n"
    "  -d, --depth N       tokens already in the KV cache when each test starts, put there by an\n"
    "                      untimed forward (default 0; llama-bench's -d); tests are named pp512@dN\n"
    "  -t, --threads N     worker threads (default: the physical cores this process may use)\n"
    "  --isa ISA           matmul kernels: ref, avx2, avx-vnni, avx512, avx512-vnni, amx (default: the best\n"
    "                      this CPU runs)\n"
    "  --f32-activations   quantized weights times f32 activations (the slow reference path)\n"
    "  --no-pack           run the weights in the file's layout, not repacked at load (8-row groups for\n"
    "                      the 8-bit, 5-bit and 4-bit block formats, 16-row panels for F32/F16/BF16 at\n"
    "                      the AVX-512 levels; `kiln inspect` shows which)\n"
    "  --kv-cache-dtype T  K/V cache rows: f32 (default), f16, int8 or fp8 (docs/quantization.md)\n"
    "  -r, --reps N        timed runs per test (default 5)\n"
    "  --json              print a JSON array, one object per test\n"
    "  --mmap              run from the file mapping instead of a copy in anonymous memory\n"
    "  --probe-mib N       bandwidth probe buffer in MiB (default 1024, at least 64)\n"
    "  --device D          cpu (default), or cuda / cuda:N: the model on a GPU, a benchmark of its own\n"
    "                      (kiln bench --device cuda --help; a build with the CUDA backend)\n";

std::optional<int64_t> parse_count(const std::string& s, int64_t lo, int64_t hi) {
    if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const int64_t v = std::stoll(s);
    if (v < lo || v > hi) return std::nullopt;
    return v;
}

struct Traffic {
    uint64_t weight_bytes = 0;      // read once per forward (experts aside)
    uint64_t expert_bytes = 0;      // every expert of every layer: a forward reads those its tokens chose
    uint64_t expert_mm_params = 0;  // matmul weights of all experts
    double expert_share = 0;        // experts per token / experts (MoE; 0 for dense)
    uint64_t embd_row_bytes = 0;    // read once per token
    uint64_t layer_mm_params = 0;   // matmul weights of the layers, per token
    uint64_t output_mm_params = 0;  // vocab * hidden, once per forward (last token's logits)
    uint64_t kv_position_bytes = 0;  // K and V of one cache position, all layers
    kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
    uint64_t params = 0;
    std::string dtype;
};

Traffic count_traffic(const loader::Checkpoint& ck, kernels::KvDtype kv_dtype) {
    const loader::ModelConfig& c = ck.config;
    Traffic tr;
    tr.params = ck.num_params();
    tr.kv_dtype = kv_dtype;
    tr.kv_position_bytes = uint64_t(2 * c.num_layers * kernels::kv_row_bytes(kv_dtype, c.num_kv_heads, c.head_dim));
    if (c.moe()) tr.expert_share = double(c.num_experts_used) / double(c.num_experts);
    for (const loader::TensorRef& t : ck.tensors) {
        const bool layer = t.name.rfind("blk.", 0) == 0;
        const uint64_t bytes = t.num_bytes + (t.row_scale ? 4 * t.shape[0] : 0);  // I8: + row scales
        if (layer && loader::parse_expert_tensor_name(t.name)) {  // one expert's matrix or bias
            tr.expert_bytes += bytes;
            tr.expert_mm_params += t.num_elements();
            continue;
        }
        if (layer) tr.weight_bytes += bytes;
        if (layer && t.shape.size() == 2) tr.layer_mm_params += t.num_elements();
        if (t.name == "output_norm.weight") tr.weight_bytes += t.num_bytes;
        if (t.name == "token_embd.weight") tr.embd_row_bytes = t.num_bytes / std::max<uint64_t>(1, t.shape[0]);
        if (t.name == (c.tie_word_embeddings ? "token_embd.weight" : "output.weight")) {
            tr.weight_bytes += t.num_bytes;
            tr.output_mm_params = t.num_elements();
        }
        if (t.name == "blk.0.attn_q.weight") tr.dtype = std::string(core::dtype_name(t.dtype));
    }
    return tr;
}

// The matmul path CpuModel::create picks with these ops::LinearOptions, probed on one layer
// weight (every matrix of a synth or converted file shares its dtype).
struct ComputePath {
    std::string matmul;  // e.g. "avx2, int8 activations (kernels/cpu)"
    bool int8 = false;   // activations quantized to 8 bits: int8 dot products
    bool vnni = false;   // ... done with vpdpbusd (the avx512-vnni kernels): held to the VNNI peak
    bool avx_vnni = false;  // ... with the 256-bit VEX vpdpbusd (the avx-vnni kernels): that peak
    bool bf16 = false;   // bf16 activations times BF16 weights by vdpbf16ps (avx512-vnni): the BF16 peak
};

ComputePath compute_path(const loader::Checkpoint& ck, const ops::LinearOptions& options) {
    const loader::TensorRef* t = ck.find("blk.0.attn_q.weight");
    if (!t || t->shape.size() != 2) return {"unknown", false};
    if (!core::dtype_bytes(t->dtype, t->shape[1])) return {"unknown", false};
    auto lin = ops::plan_linear(loader::weight_view_of(*t), options);  // reads no weight bytes
    if (!lin || !lin->kernel) return {"f32 reference (kernels/ref)", false, false, false, false};
    using kernels::ActFormat;
    const ActFormat act = lin->kernel->act;
    const bool int8 = act == ActFormat::kQ8 || act == ActFormat::kQ8K || act == ActFormat::kI8Row;
    // The amx level runs avx512-vnni's kernels but for I8 and BF16 (AMX tiles, no probe of their own):
    // held to the VNNI and BF16 dot peaks, which the tiles may pass.
    const bool vnni_isa = lin->isa == kernels::cpu::Isa::kAvx512Vnni || lin->isa == kernels::cpu::Isa::kAmx;
    const bool avx_vnni_isa = lin->isa == kernels::cpu::Isa::kAvxVnni;
    const char* what = act == ActFormat::kI8Row ? ", per-token int8 activations"
                       : int8                   ? ", int8 activations"
                                                : act == ActFormat::kBF16 ? ", bf16 activations" : ", f32 activations";
    return {std::string(kernels::cpu::isa_name(lin->isa)) + what + (lin->packed_kernel ? ", repacked at load" : "") +
                " (kernels/cpu)",
            int8, int8 && vnni_isa, int8 && avx_vnni_isa, act == ActFormat::kBF16 && vnni_isa};
}

struct TestResult {
    std::string name;
    int64_t depth = 0;            // tokens in the cache before the test (-d)
    std::vector<double> samples;  // tokens/s of each timed run
    double tokens_per_s = 0, bytes_per_token = 0, ops_per_token = 0;
    // tg only: GB/s of the read passes between decode steps in each run, and the median over runs
    // of (the run's decode GB/s / its passes' GB/s), in percent; empty / 0 for pp.
    std::vector<double> ambient_gbps;
    double pct_of_ambient = 0;
};

// Between decode steps: a read pass over kAmbientBytes (1 stream per thread) before the first step
// and after every kAmbientEvery steps, timed apart from the steps, so each tg run is compared with
// what plain reads got at the same moments (docs/performance.md, "Bandwidth at the same moments").
constexpr uint64_t kAmbientBytes = uint64_t(64) << 20;
constexpr int64_t kAmbientEvery = 16;

struct RunTimes {
    double seconds = 0;                          // the forward passes only
    double probe_seconds = 0, probe_bytes = 0;  // the read passes between them (tg with a probe)
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<int32_t> bench_tokens(int64_t n, int64_t vocab) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    const int64_t span = std::max<int64_t>(1, vocab - 3);
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(3 + (i * 7919 + 17) % span);
    return ids;
}

// Seconds for one pp run (one forward of p tokens) or one tg run (`steps` single-token forwards),
// after an untimed forward of `depth` tokens into the same cache.
core::Result<RunTimes> run_once(model::CpuModel& m, bool prefill, int64_t count, int64_t depth, kernels::KvDtype kv_dtype,
                                const kernels::roofline::ReadProbe* probe = nullptr, core::ThreadPool* pool = nullptr) {
    const loader::ModelConfig& c = m.config();
    model::KvCache cache(c, std::max<int64_t>(depth + count, 1), kv_dtype);
    if (depth > 0) {
        KILN_ASSIGN_OR_RETURN(auto context, m.forward(bench_tokens(depth, c.vocab_size), cache, false));
        (void)context;
    }
    const std::vector<int32_t> ids = bench_tokens(count, c.vocab_size);
    RunTimes rt;
    if (prefill) {
        const auto t0 = Clock::now();
        KILN_ASSIGN_OR_RETURN(auto logits, m.forward(ids, cache, false));
        (void)logits;
        rt.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        return rt;
    }
    std::vector<float> logits;  // reused: the decode steps allocate nothing (tests/unit/decode_alloc_test.cc)
    for (int64_t i = 0; i < count; ++i) {
        if (probe && i % kAmbientEvery == 0) {
            rt.probe_seconds += probe->pass_seconds(*pool);
            rt.probe_bytes += double(probe->bytes());
        }
        const auto t0 = Clock::now();
        KILN_RETURN_IF_ERROR(m.forward(std::span<const int32_t>(&ids[size_t(i)], 1), cache, false, logits));
        rt.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return rt;
}

// probe: sampled between decode steps (tg only; may be null).
core::Result<TestResult> run_test(model::CpuModel& m, bool prefill, int64_t count, int64_t depth, int reps,
                                  const Traffic& tr,
                                  const kernels::roofline::ReadProbe* probe, core::ThreadPool& pool) {
    TestResult r;
    r.name = (prefill ? "pp" : "tg") + std::to_string(count) + (depth > 0 ? "@d" + std::to_string(depth) : "");
    r.depth = depth;
    const double per_forward = prefill ? double(count) : 1.0;  // tokens sharing one pass over the weights
    // The experts a forward reads: those its tokens chose, in expectation under uniform routing
    // 1 - (1 - k / E)^tokens of them (k / E for one decode token).
    const double experts_read = 1.0 - std::pow(1.0 - tr.expert_share, per_forward);
    r.bytes_per_token = (double(tr.weight_bytes) + double(tr.expert_bytes) * experts_read) / per_forward +
                        double(tr.embd_row_bytes);
    if (!prefill) r.bytes_per_token += double(tr.kv_position_bytes) * (double(depth) + double(count + 1) / 2.0);
    r.ops_per_token = 2.0 * (double(tr.layer_mm_params) + double(tr.expert_mm_params) * tr.expert_share) +
                      2.0 * double(tr.output_mm_params) / per_forward;
    KILN_ASSIGN_OR_RETURN(RunTimes warm, run_once(m, prefill, prefill ? count : std::min<int64_t>(count, 8), depth, tr.kv_dtype));
    (void)warm;
    std::vector<double> pct;
    for (int i = 0; i < reps; ++i) {
        KILN_ASSIGN_OR_RETURN(RunTimes t, run_once(m, prefill, count, depth, tr.kv_dtype, prefill ? nullptr : probe, &pool));
        r.samples.push_back(double(count) / t.seconds);
        if (t.probe_seconds > 0) {
            r.ambient_gbps.push_back(t.probe_bytes / t.probe_seconds / 1e9);
            pct.push_back(100.0 * r.bytes_per_token * r.samples.back() / 1e9 / r.ambient_gbps.back());
        }
    }
    r.tokens_per_s = median(r.samples);
    if (!pct.empty()) r.pct_of_ambient = median(pct);
    return r;
}

// Field-wise best of two probe runs.
kernels::roofline::Roofline best_of(kernels::roofline::Roofline a, const kernels::roofline::Roofline& b) {
    auto best = [](std::optional<double>& x, const std::optional<double>& y) {
        if (y && (!x || *y > *x)) x = y;
    };
    a.read_gbps = std::max(a.read_gbps, b.read_gbps);
    a.fma_f32_gflops = std::max(a.fma_f32_gflops, b.fma_f32_gflops);
    a.int8_gops = std::max(a.int8_gops, b.int8_gops);
    best(a.vnni_int8_gops, b.vnni_int8_gops);
    best(a.avx_vnni_int8_gops, b.avx_vnni_int8_gops);
    best(a.bf16_gflops, b.bf16_gflops);
    return a;
}

ordered_json opt_json(const std::optional<double>& v) {
    return v ? ordered_json(*v) : ordered_json(nullptr);
}

// The peak of the arithmetic the matmul kernels run: VNNI (512-bit vpdpbusd kernels), AVX-VNNI
// (256-bit), the AVX2 int8 dot (vpmaddubsw + vpmaddwd), BF16 dots or f32 FMA.
const char* peak_kind(const kernels::roofline::Roofline& roof, const ComputePath& path) {
    if (path.vnni && roof.vnni_int8_gops) return "vnni_int8";
    if (path.avx_vnni && roof.avx_vnni_int8_gops) return "avx_vnni_int8";
    if (path.bf16 && roof.bf16_gflops) return "bf16_dot";
    return path.int8 ? "int8_dot" : "f32_fma";
}
double peak_of(const kernels::roofline::Roofline& roof, const ComputePath& path) {
    if (path.vnni && roof.vnni_int8_gops) return *roof.vnni_int8_gops;
    if (path.avx_vnni && roof.avx_vnni_int8_gops) return *roof.avx_vnni_int8_gops;
    if (path.bf16 && roof.bf16_gflops) return *roof.bf16_gflops;
    return path.int8 ? roof.int8_gops : roof.fma_f32_gflops;
}

ordered_json result_json(const TestResult& r, const loader::Checkpoint& ck, const Traffic& tr,
                         const kernels::roofline::Roofline& roof, const ComputePath& path, int reps, bool mmapped) {
    const loader::ModelConfig& c = ck.config;
    const double gbps = r.bytes_per_token * r.tokens_per_s / 1e9;
    const double gops = r.ops_per_token * r.tokens_per_s / 1e9;
    const double peak = peak_of(roof, path);
    ordered_json j;
    j["test"] = r.name;
    j["model"] = ck.path;
    j["model_name"] = c.name;
    j["arch"] = c.arch;
    j["weights_dtype"] = tr.dtype;
    j["params"] = tr.params;
    j["threads"] = roof.threads;
    j["isa"] = roof.isa;
    j["matmul"] = path.matmul;
    j["weights_memory"] = mmapped ? "mmap" : "anonymous";
    j["kv_cache_dtype"] = kernels::ref::kv_dtype_name(tr.kv_dtype);
    j["reps"] = reps;
    j["depth"] = r.depth;
    j["tokens_per_s"] = r.tokens_per_s;
    j["samples_tokens_per_s"] = r.samples;
    j["bytes_per_token"] = r.bytes_per_token;
    j["achieved_gbps"] = gbps;
    j["bw_limit_gbps"] = roof.read_gbps;
    j["pct_of_bw_limit"] = 100.0 * gbps / roof.read_gbps;
    j["bw_floor_tokens_per_s"] = roof.read_gbps * 1e9 / r.bytes_per_token;
    j["ambient_bw_gbps"] = r.ambient_gbps.empty() ? ordered_json(nullptr) : ordered_json(median(r.ambient_gbps));
    j["samples_ambient_bw_gbps"] = r.ambient_gbps;
    j["pct_of_ambient_bw"] = r.ambient_gbps.empty() ? ordered_json(nullptr) : ordered_json(r.pct_of_ambient);
    j["ops_per_token"] = r.ops_per_token;
    j["achieved_gops"] = gops;
    j["peak_kind"] = peak_kind(roof, path);
    j["peak_gops"] = peak;
    j["pct_of_peak"] = 100.0 * gops / peak;
    j["f32_fma_peak_gflops"] = roof.fma_f32_gflops;
    j["int8_peak_gops"] = roof.int8_gops;
    j["vnni_int8_peak_gops"] = opt_json(roof.vnni_int8_gops);
    j["avx_vnni_int8_peak_gops"] = opt_json(roof.avx_vnni_int8_gops);
    j["bf16_peak_gflops"] = opt_json(roof.bf16_gflops);
    return j;
}

// This process's resident set in MiB (/proc/self/statm), or -1 where that cannot be read.
double resident_mib() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return -1;
    unsigned long long size = 0, resident = 0;
    const bool ok = std::fscanf(f, "%llu %llu", &size, &resident) == 2;
    std::fclose(f);
    return ok ? double(resident) * double(sysconf(_SC_PAGESIZE)) / double(1 << 20) : -1;
}

void print_table(const std::vector<TestResult>& results, const loader::Checkpoint& ck, const Traffic& tr,
                 const kernels::roofline::Roofline& roof, const ComputePath& path, bool mmapped, double loaded_mib) {
    const loader::ModelConfig& c = ck.config;
    auto opt = [](const std::optional<double>& v) {
        return v ? std::to_string(int64_t(*v)) : std::string("unsupported");
    };
    std::printf("model: %s (%s, %s, %.1fM params, %s weights, %s; %.0f MiB resident after load)\n", ck.path.c_str(),
                c.name.c_str(), c.arch.c_str(), double(tr.params) / 1e6, tr.dtype.c_str(),
                mmapped ? "mmap" : "anonymous memory", loaded_mib);
    std::printf(
        "machine (%d threads, probes %s): read %.1f GB/s | f32 FMA %.1f GFLOP/s | int8 %.1f GOP/s | "
        "VNNI %s | AVX-VNNI %s | BF16 %s\n",
        roof.threads, roof.isa.c_str(), roof.read_gbps, roof.fma_f32_gflops, roof.int8_gops,
        opt(roof.vnni_int8_gops).c_str(), opt(roof.avx_vnni_int8_gops).c_str(), opt(roof.bf16_gflops).c_str());
    std::printf("matmul: %s; %% peak is of the %s peak; KV cache %s\n\n", path.matmul.c_str(), peak_kind(roof, path),
                kernels::ref::kv_dtype_name(tr.kv_dtype));
    std::printf("| %-11s | %10s | %10s | %9s | %7s | %10s | %9s | %7s |\n", "test", "tokens/s", "MB/token", "GB/s",
                "% bw", "floor t/s", "GOP/s", "% peak");
    std::printf("|-------------|------------|------------|-----------|---------|------------|-----------|---------|\n");
    for (const TestResult& r : results) {
        const double gbps = r.bytes_per_token * r.tokens_per_s / 1e9, gops = r.ops_per_token * r.tokens_per_s / 1e9;
        std::printf("| %-11s | %10.2f | %10.2f | %9.2f | %6.1f%% | %10.1f | %9.2f | %6.1f%% |\n", r.name.c_str(),
                    r.tokens_per_s, r.bytes_per_token / 1e6, gbps, 100.0 * gbps / roof.read_gbps,
                    roof.read_gbps * 1e9 / r.bytes_per_token, gops, 100.0 * gops / peak_of(roof, path));
    }
    for (const TestResult& r : results) {
        if (r.ambient_gbps.empty()) continue;
        std::printf("\n%s: read passes between its decode steps (%llu MiB every %lld tokens) got %.1f GB/s "
                    "(median of runs); decode read %.1f%% of that (median of the runs' ratios)\n",
                    r.name.c_str(), (unsigned long long)(kAmbientBytes >> 20), (long long)kAmbientEvery,
                    median(r.ambient_gbps), r.pct_of_ambient);
    }
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    if (argc > 2 && std::strcmp(argv[2], "offline") == 0) return cmd_bench_offline(argc, argv);
    if (argc > 2 && std::strcmp(argv[2], "serve") == 0) return cmd_bench_serve(argc, argv);
    for (int i = 2; i + 1 < argc; ++i)  // the model on a GPU: tools/cmd_bench_cuda.cc
        if (std::strcmp(argv[i], "--device") == 0 && std::strcmp(argv[i + 1], "cpu") != 0)
            return cmd_bench_cuda(argc, argv);
    Args args({"--help", "-h", "--json", "--mmap", "--f32-activations", "--no-pack"},
              {"-m", "--model", "-p", "--n-prompt", "-n", "--n-gen", "-d", "--depth", "-t", "--threads", "-r", "--reps",
               "--probe-mib", "--isa", "--device", "--kv-cache-dtype"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln bench: %s\n%s", args.error().c_str(), kBenchUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kBenchUsage, stdout);
        return 0;
    }
    auto model_path = args.get_either("--model", "-m");
    if (!model_path || !args.positional().empty()) {
        std::fprintf(stderr, "kiln bench: %s\n%s",
                     model_path ? "unexpected positional argument" : "no model given (-m MODEL)", kBenchUsage);
        return 2;
    }
    struct Opt {
        const char *s, *l;
        int64_t lo, hi, *dst;
    };
    int64_t n_prompt = 512, n_gen = 128, n_depth = 0, threads = core::ThreadPool::default_num_threads(), reps = 5,
            probe_mib = 1024;
    for (const Opt& o : {Opt{"-p", "--n-prompt", 0, 1 << 20, &n_prompt}, Opt{"-n", "--n-gen", 0, 1 << 20, &n_gen},
                         Opt{"-d", "--depth", 0, 1 << 20, &n_depth},
                         Opt{"-t", "--threads", 1, 1024, &threads}, Opt{"-r", "--reps", 1, 1000, &reps},
                         Opt{"--probe-mib", "--probe-mib", 64, 1 << 20, &probe_mib}}) {
        auto v = args.get_either(o.l, o.s);
        if (!v) continue;
        auto x = parse_count(*v, o.lo, o.hi);
        if (!x) {
            std::fprintf(stderr, "kiln bench: %s needs an integer in [%lld, %lld], got '%s'\n", o.l, (long long)o.lo,
                         (long long)o.hi, v->c_str());
            return 2;
        }
        *o.dst = *x;
    }
    SessionOptions session;  // only its kernel choice (--isa, --f32-activations) and --kv-cache-dtype are used here
    if (!parse_session_options(args, "bench", session)) return 2;
    session.linear.pack = !args.has("--no-pack");
    if (n_prompt == 0 && n_gen == 0) {
        std::fprintf(stderr, "kiln bench: -p 0 and -n 0 leave nothing to measure\n");
        return 2;
    }
    auto ck = loader::load_checkpoint(*model_path);
    if (!ck) {
        std::fprintf(stderr, "kiln bench: %s\n", ck.status().to_string().c_str());
        return 1;
    }
    const int64_t max_len = ck->config.max_seq_len;
    if (max_len > 0 && n_depth + std::max(n_prompt, n_gen) > max_len) {
        std::fprintf(stderr, "kiln bench: -d %lld plus %lld tokens exceeds the model's context length %lld\n",
                     (long long)n_depth, (long long)std::max(n_prompt, n_gen), (long long)max_len);
        return 2;
    }
    const bool mmapped = args.has("--mmap");
    core::ThreadPool pool(static_cast<int>(threads));
    auto model = model::create_model(*ck, &pool, session.linear,
                                     mmapped ? model::WeightMemory::kFileMapping : model::WeightMemory::kAnonymous);
    if (!model) {
        std::fprintf(stderr, "kiln bench: %s\n", model.status().to_string().c_str());
        return 1;
    }
    core::wait_huge_page_collapse();  // measure the weights on the huge pages a server gets once loaded
    const double loaded_mib = resident_mib();  // before the bandwidth probe maps its buffer
    auto roof = kernels::roofline::measure_roofline(pool, uint64_t(probe_mib) << 20);
    if (!roof) {
        std::fprintf(stderr, "kiln bench: %s\n", roof.status().to_string().c_str());
        return 1;
    }
    const Traffic tr = count_traffic(*ck, session.kv_dtype.value_or(kernels::KvDtype::kF32));
    const ComputePath path = compute_path(*ck, session.linear);
    auto probe = kernels::roofline::ReadProbe::create(pool, kAmbientBytes, 1);
    if (!probe) {
        std::fprintf(stderr, "kiln bench: %s\n", probe.status().to_string().c_str());
        return 1;
    }
    std::vector<TestResult> results;
    for (bool prefill : {true, false}) {
        const int64_t count = prefill ? n_prompt : n_gen;
        if (count == 0) continue;
        auto r = run_test(**model, prefill, count, n_depth, int(reps), tr, &*probe, pool);
        if (!r) {
            std::fprintf(stderr, "kiln bench: %s\n", r.status().to_string().c_str());
            return 1;
        }
        results.push_back(std::move(*r));
    }
    auto roof_after = kernels::roofline::measure_roofline(pool, uint64_t(probe_mib) << 20);
    if (!roof_after) {
        std::fprintf(stderr, "kiln bench: %s\n", roof_after.status().to_string().c_str());
        return 1;
    }
    *roof = best_of(*roof, *roof_after);
    if (args.has("--json")) {
        ordered_json out = ordered_json::array();
        for (const TestResult& r : results) out.push_back(result_json(r, *ck, tr, *roof, path, int(reps), mmapped));
        std::printf("%s\n", out.dump(2, ' ', false, ordered_json::error_handler_t::replace).c_str());
    } else {
        print_table(results, *ck, tr, *roof, path, mmapped, loaded_mib);
    }
    return 0;
}

}  // namespace kiln::tools
