// `kiln bench -m MODEL --device cuda[:N] [-p 2048] [-n 128] [-b 64] [-r 3] [--json]`: the model on a
// GPU (model::CudaModel), end to end, next to the device's read bandwidth measured in the same
// run (kernels/cuda read_bandwidth_gbps, before the model takes the memory), as issue "CUDA backend"
// asks of the device check:
//   pp<p>:  one forward of p prompt tokens into an empty sequence; tokens/s, and TFLOP/s counting
//           2 * (layer matrices' params) per token plus the causal attention (4 * layers * q_dim *
//           (p + 1) / 2 per token) and one row of logits;
//   tg<n>:  n single-token steps of one sequence (greedy: only the id comes back), after p tokens;
//           tokens/s and GB/s with bytes/token = every weight a step reads (CudaModel::
//           step_weight_bytes: the layers' matrices, the output matrix, one embedding row) + the K/V
//           read at the mean context; % of the measured bandwidth;
//   b<b>:   b sequences of 128 prompt tokens decoding together, n steps; output tokens/s; then the
//           same sampled on the device (b<b>x<n>-sampled: top-p 0.9, a repetition penalty).
// Each test runs once as a warm-up, then REPS times; the median is reported. Only in a build with the
// CUDA backend; elsewhere --device cuda says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine_options.h"
#include "gpu_session.h"
#include "loader/checkpoint.h"

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/device.h"
#include "kernels/cuda/timing.h"
#include "model/cuda/cuda_model.h"
#endif

namespace kiln::tools {

#ifdef KILN_HAVE_CUDA
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<int32_t> bench_ids(int64_t n, int64_t vocab, int64_t salt) {
    std::vector<int32_t> ids = std::vector<int32_t>(size_t(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7919 + salt * 104729 + 13) % vocab);
    return ids;
}

struct Result {
    std::string test;
    double tokens_per_s = 0;
    double gbps = 0, pct_of_bw = 0;  // tg
    double tflops = 0;               // pp
    std::vector<double> samples;
};

}  // namespace

int cmd_bench_cuda(int argc, char** argv) {
    constexpr const char* kUsage =
        "usage: kiln bench -m MODEL --device cuda[:N] [-p 2048] [-n 128] [-b 64] [-r 3]\n"
        "                  [--gpu-memory-utilization U] [--json]\n"
        "The model on a GPU, end to end: pp (one forward of -p prompt tokens), tg (-n decode steps of one\n"
        "sequence after them) and b (-b sequences of 128 prompt tokens decoding -n steps together), next to\n"
        "the device's read bandwidth measured first. Median of -r runs after a warm-up.\n";
    Args args({"--help", "-h", "--json"}, {"-m", "--model", "-p", "--n-prompt", "-n", "--n-gen", "-b", "--batch", "-r",
                                           "--reps", "--device", "--gpu-memory-utilization"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln bench: %s\n%s", args.error().c_str(), kUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    auto model_path = args.get_either("--model", "-m");
    if (!model_path) {
        std::fprintf(stderr, "kiln bench: no model given (-m MODEL)\n%s", kUsage);
        return 2;
    }
    auto count = [&](const char* s, const char* l, int64_t def) {
        return int_option(args, "bench", args.get(s) ? s : l, def, 1, 1 << 20);
    };
    const auto p_opt = count("-p", "--n-prompt", 2048), n_opt = count("-n", "--n-gen", 128),
               b_opt = count("-b", "--batch", 64), r_opt = count("-r", "--reps", 3);
    if (!p_opt || !n_opt || !b_opt || !r_opt) return 2;
    const int64_t p = *p_opt, n = *n_opt, b = *b_opt, reps = *r_opt;
    model::CudaModelOptions o;
    const std::string device = args.get("--device").value_or("cuda");
    const std::optional<int> index = parse_device(device);
    if (!index || *index < 0) {
        std::fprintf(stderr, "kiln bench: --device must be cuda or cuda:N here, got '%s'\n", device.c_str());
        return 2;
    }
    o.device = *index;
    if (auto u = args.get("--gpu-memory-utilization")) {
        o.gpu_memory_utilization = std::atof(u->c_str());
        if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1)) {
            std::fprintf(stderr, "kiln bench: --gpu-memory-utilization needs a number in (0, 1], got '%s'\n",
                         u->c_str());
            return 2;
        }
    }
    if (o.device >= kernels::cuda::device_count()) {
        std::fprintf(stderr, "kiln bench: no CUDA device %d (%d visible)\n", o.device, kernels::cuda::device_count());
        return 1;
    }
    // The floor first, while the memory is free.
    if (cudaSetDevice(o.device) != cudaSuccess) {
        std::fprintf(stderr, "kiln bench: cannot use CUDA device %d\n", o.device);
        return 1;
    }
    auto bw = kernels::cuda::read_bandwidth_gbps();
    if (!bw) {
        std::fprintf(stderr, "kiln bench: %s\n", bw.status().to_string().c_str());
        return 1;
    }
    auto ck = loader::load_checkpoint(*model_path);
    if (!ck) {
        std::fprintf(stderr, "kiln bench: %s\n", ck.status().to_string().c_str());
        return 1;
    }
    const loader::ModelConfig& c = ck->config;
    constexpr int64_t kBatchPrompt = 128;
    o.max_batch_tokens = std::max(p, kBatchPrompt);
    o.max_seqs = std::max<int64_t>(b, 1);
    o.max_logits = o.max_seqs;
    o.max_seq_len = std::max(p + n, kBatchPrompt + n);
    if (c.max_seq_len > 0 && o.max_seq_len > c.max_seq_len) {
        std::fprintf(stderr, "kiln bench: %lld tokens exceed the model's context of %lld\n", (long long)o.max_seq_len,
                     (long long)c.max_seq_len);
        return 2;
    }
    o.progress = print_upload_progress;
    auto m = model::CudaModel::create(*ck, o);
    if (!m) {
        std::fprintf(stderr, "kiln bench: %s\n", m.status().to_string().c_str());
        return 1;
    }
    model::CudaModel& g = **m;
    std::fprintf(stderr, "%s\n", g.describe().c_str());
    const int64_t bs = g.options().block_size, blocks_per_seq = (o.max_seq_len + bs - 1) / bs;
    if (b * blocks_per_seq > g.options().num_kv_blocks) {
        std::fprintf(stderr, "kiln bench: %lld sequences of %lld tokens need %lld KV blocks, the pool has %lld\n",
                     (long long)b, (long long)o.max_seq_len, (long long)(b * blocks_per_seq),
                     (long long)g.options().num_kv_blocks);
        return 1;
    }
    std::vector<int32_t> table(size_t(b * blocks_per_seq));
    for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
    auto seq_table = [&](int64_t s) {
        return std::span<const int32_t>(table).subspan(size_t(s * blocks_per_seq), size_t(blocks_per_seq));
    };
    const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size, V = c.vocab_size;
    const double layer_params = double(c.num_layers) * double(H * (Q + 2 * KV) + Q * H + 3 * H * F);
    const double kv_pos_bytes =
        2.0 * double(c.num_layers * kernels::kv_row_bytes(g.options().kv_dtype, c.num_kv_heads, c.head_dim));
    std::vector<Result> results;
    std::vector<float> logits;
    std::vector<int32_t> ids;
    core::Status st;
    auto fail = [&](const core::Status& s) {
        std::fprintf(stderr, "kiln bench: %s\n", s.to_string().c_str());
        return 1;
    };
    {  // pp
        Result r;
        r.test = "pp" + std::to_string(p);
        const std::vector<int32_t> prompt = bench_ids(p, V, 0);
        const model::BatchSeq seq{0, p, seq_table(0), 1};
        for (int64_t i = 0; i <= reps; ++i) {
            const auto t0 = Clock::now();
            if (!(st = g.forward_batch_greedy(prompt, std::span(&seq, 1), ids)).is_ok()) return fail(st);
            if (i > 0) r.samples.push_back(double(p) / seconds_since(t0));
        }
        r.tokens_per_s = median(r.samples);
        const double flops_per_token =
            2.0 * layer_params + 4.0 * double(c.num_layers * Q) * double(p + 1) / 2.0 + 2.0 * double(V * H) / double(p);
        r.tflops = flops_per_token * r.tokens_per_s / 1e12;
        results.push_back(r);
    }
    {  // tg: one sequence, after the p prompt tokens of the pp test (still in blocks of sequence 0)
        Result r;
        r.test = "tg" + std::to_string(n);
        for (int64_t i = 0; i <= reps; ++i) {
            const auto t0 = Clock::now();
            for (int64_t s = 0; s < n; ++s) {
                const int32_t tok = int32_t((s * 31 + 7) % V);
                const model::BatchSeq seq{p + s, 1, seq_table(0), 1};
                if (!(st = g.forward_batch_greedy(std::span(&tok, 1), std::span(&seq, 1), ids)).is_ok())
                    return fail(st);
            }
            if (i > 0) r.samples.push_back(double(n) / seconds_since(t0));
        }
        r.tokens_per_s = median(r.samples);
        const double bytes_per_token = double(g.step_weight_bytes()) + kv_pos_bytes * (double(p) + double(n + 1) / 2.0);
        r.gbps = bytes_per_token * r.tokens_per_s / 1e9;
        r.pct_of_bw = 100.0 * r.gbps / *bw;
        results.push_back(r);
    }
    // b sequences decoding together after 128-token prompts: greedy (argmax ids back), then sampled
    // on the device (temperature 0.8, top-p 0.9, a repetition penalty over 16 history tokens).
    auto batch_run = [&](bool sampled) -> core::Status {
        Result r;
        r.test = std::string("b").append(std::to_string(b)).append("x").append(std::to_string(n));
        if (sampled) r.test.append("-sampled");
        for (int64_t s = 0; s < b; ++s) {
            const std::vector<int32_t> prompt = bench_ids(kBatchPrompt, V, s + 1);
            const model::BatchSeq seq{0, kBatchPrompt, seq_table(s), 1};
            KILN_RETURN_IF_ERROR(g.forward_batch_greedy(prompt, std::span(&seq, 1), ids));
        }
        std::vector<model::BatchSeq> seqs = std::vector<model::BatchSeq>(size_t(b));
        std::vector<int32_t> toks = std::vector<int32_t>(size_t(b));
        std::vector<kernels::ref::SampleRow> rows = std::vector<kernels::ref::SampleRow>(size_t(b));
        std::vector<kernels::ref::LogitAdjustment> adjust;
        for (int64_t s = 0; s < b; ++s) {
            kernels::ref::SampleRow& row = rows[size_t(s)];
            row.temperature = 0.8f;
            row.top_p = 0.9f;
            row.repetition_penalty = 1.1f;
            row.adjust_begin = int32_t(adjust.size());
            row.adjust_count = 16;
            for (int32_t j = 0; j < 16; ++j) adjust.push_back({int32_t((s * 16 + j) % V), 0.0f, 1, 0});
            row.u = double(s) / double(b);
        }
        for (int64_t i = 0; i <= reps; ++i) {
            const auto t0 = Clock::now();
            for (int64_t step = 0; step < n; ++step) {
                for (int64_t s = 0; s < b; ++s) {
                    seqs[size_t(s)] = {kBatchPrompt + step, 1, seq_table(s), 1};
                    toks[size_t(s)] = int32_t((s * 131 + step * 17 + 3) % V);
                }
                KILN_RETURN_IF_ERROR(sampled ? g.forward_batch_sample(toks, seqs, rows, adjust, ids)
                                             : g.forward_batch_greedy(toks, seqs, ids));
            }
            if (i > 0) r.samples.push_back(double(b * n) / seconds_since(t0));
        }
        r.tokens_per_s = median(r.samples);
        results.push_back(r);
        return core::Status::ok();
    };
    if (b > 1) {
        for (bool sampled : {false, true})
            if (!(st = batch_run(sampled)).is_ok()) return fail(st);
    }
    if (args.has("--json")) {
        ordered_json out = ordered_json::array();
        for (const Result& r : results) {
            ordered_json j;
            j["test"] = r.test;
            j["model"] = ck->path;
            j["device"] = g.describe();
            j["tokens_per_s"] = r.tokens_per_s;
            j["samples_tokens_per_s"] = r.samples;
            j["read_bw_gbps"] = *bw;
            if (r.gbps > 0) {
                j["achieved_gbps"] = r.gbps;
                j["pct_of_read_bw"] = r.pct_of_bw;
            }
            if (r.tflops > 0) j["tflops"] = r.tflops;
            out.push_back(j);
        }
        std::printf("%s\n", out.dump(2).c_str());
    }
    {  // the table: on stdout, or on stderr beside --json's output
        std::FILE* f = args.has("--json") ? stderr : stdout;
        std::fprintf(f, "model: %s on %s\nmeasured read bandwidth: %.0f GB/s\n\n", ck->path.c_str(),
                     g.describe().c_str(), *bw);
        std::fprintf(f, "| %-16s | %12s | %9s | %8s | %8s |\n", "test", "tokens/s", "GB/s", "% bw", "TFLOP/s");
        std::fprintf(f, "|------------------|--------------|-----------|----------|----------|\n");
        for (const Result& r : results)
            std::fprintf(f, "| %-16s | %12.1f | %9.1f | %7.1f%% | %8.1f |\n", r.test.c_str(), r.tokens_per_s, r.gbps,
                         r.pct_of_bw, r.tflops);
    }
    return 0;
}

#else

int cmd_bench_cuda(int, char**) {
    std::fprintf(stderr,
                 "kiln bench: this kiln was built without the CUDA backend: build it with the cuda-release preset "
                 "(-DKILN_CUDA=ON) to run --device cuda\n");
    return 1;
}

#endif

}  // namespace kiln::tools
