// `kiln perplexity -m MODEL -f FILE [--ctx N] [-t N] [--tokenizer FILE]`: perplexity of a text file by
// llama.cpp's method (examples/perplexity/perplexity.cpp, perplexity()): the whole file is tokenized
// once (with BOS when the tokenizer has one), cut into non-overlapping windows of N tokens (the tail
// that does not fill a window is dropped; at least 2N tokens are required, as llama.cpp does), each
// window's first token is replaced by BOS, the window runs as one batched forward pass with a fresh
// KV cache, and only its second half is scored: positions first = N/2 .. N-2 predict the next token,
// so N - 1 - N/2 tokens per window. ppl = exp(mean NLL), log-softmax accumulated in double.
// Progress per window goes to stderr; the result to stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine/parallel.h"
#include "engine_options.h"
#include "gpu_session.h"
#include "loader/checkpoint_tokenizer.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

constexpr const char* kPerplexityUsage =
    "usage: kiln perplexity [-m MODEL] -f FILE [--ctx N] [-t N] [--tokenizer FILE] [--isa ISA] [--f32-activations]\n"
    "       mpirun -np T*P kiln perplexity ... --tp T --pp P   (CPU ranks, docs/parallel.md)\n"
    "\n"
    "Perplexity of FILE, computed as llama.cpp's perplexity tool does: non-overlapping windows of N\n"
    "tokens, each starting with BOS, scoring the second half of each window. The file needs at least\n"
    "2N tokens. Progress goes to standard error; `ppl = X` and the token count to standard output.\n"
    "\n"
    "  -f, --file FILE        the text to score\n"
    "  -c, --ctx N            window length in tokens (default 512, capped to the model's max_seq_len)\n"
    "  --device D             cpu (default), or cuda / cuda:N: the model on that GPU, f32 K/V (a build\n"
    "                         with the CUDA backend)\n"
    "  --gpu-memory-utilization U  share of the GPU's memory the model may take (default 0.9)\n";

void print_usage(std::FILE* f) {
    std::fputs(kPerplexityUsage, f);
    std::fputs(kSessionHelp, f);
    std::fputs(kParallelHelp, f);
}

// -log softmax(row)[target], in double.
double nll_of(const float* row, int64_t vocab, int32_t target) {
    float max_logit = row[0];
    for (int64_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, row[i]);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max_logit);
    return std::log(sum) - (double(row[target]) - max_logit);
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
    Args args(merged({"--help", "-h"}, kSessionFlags),
              merged(merged({"-f", "--file", "-c", "--ctx", "--device", "--gpu-memory-utilization"}, kSessionOptions),
                     parallel_options()));
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln perplexity: %s\n", args.error().c_str());
        print_usage(stderr);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        print_usage(stdout);
        return 0;
    }
    auto text_path = args.get_either("--file", "-f");
    if (!text_path || !args.positional().empty()) {
        print_usage(stderr);
        return 2;
    }
    int n_ctx = 512;
    if (auto n = args.get_either("--ctx", "-c")) {
        auto v = parse_threads(*n);
        if (!v || *v < 4) {
            std::fprintf(stderr, "kiln perplexity: --ctx needs an integer >= 4, got '%s'\n", n->c_str());
            return 2;
        }
        n_ctx = *v;
    }
    SessionOptions session_options;
    if (!parse_session_options(args, "perplexity", session_options)) return 2;
    EngineOptions parallel;  // under mpirun: the other ranks follow rank 0's passes
    if (!parallel_session_options(args, "perplexity", session_options, parallel)) return 2;
    if (const int rc = run_if_worker(parallel, "perplexity"); rc >= 0) return rc;
    std::ifstream in(*text_path, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "kiln perplexity: cannot read '%s'\n", text_path->c_str());
        return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string device_arg = args.get("--device").value_or("cpu");
    const std::optional<int> device = parse_device(device_arg);
    if (!device) {
        std::fprintf(stderr, "kiln perplexity: --device must be cpu, cuda or cuda:N, got '%s'\n", device_arg.c_str());
        return 2;
    }
    GpuSequenceOptions gpu_options;
    if (auto u = args.get("--gpu-memory-utilization")) {
        gpu_options.gpu_memory_utilization = std::atof(u->c_str());
        if (!(gpu_options.gpu_memory_utilization > 0 && gpu_options.gpu_memory_utilization <= 1)) {
            std::fprintf(stderr, "kiln perplexity: --gpu-memory-utilization needs a number in (0, 1], got '%s'\n",
                         u->c_str());
            return 2;
        }
    }
    // The CPU model (a ModelSession), or on a GPU the checkpoint, its tokenizer and a GpuSequence.
    std::unique_ptr<ModelSession> session;
    loader::Checkpoint checkpoint;
    std::unique_ptr<tokenizer::Tokenizer> gpu_tokenizer;
    std::unique_ptr<GpuSequence> gpu;
    if (*device >= 0 && Engine::parallel_rank(parallel) == 0 &&
        (parallel.tensor_parallel > 1 || parallel.pipeline_parallel > 1 || parallel.expert_parallel > 1)) {
        std::fprintf(stderr, "kiln perplexity: --tp / --pp / --ep run on CPU ranks only\n");
        return 2;
    }
    if (*device < 0) {
        auto opened = open_model_session(session_options, parallel);
        if (!opened) {
            std::fprintf(stderr, "kiln perplexity: %s\n", opened.status().to_string().c_str());
            return 1;
        }
        session = std::move(*opened);
    } else {
        auto path = resolve_model_path(session_options.model);
        auto ck = path ? loader::load_checkpoint(*path) : core::Result<loader::Checkpoint>(path.status());
        if (!ck) {
            std::fprintf(stderr, "kiln perplexity: %s\n", ck.status().to_string().c_str());
            return 1;
        }
        checkpoint = std::move(*ck);
        auto tok = loader::find_tokenizer(checkpoint, session_options.tokenizer);
        if (!tok) {
            std::fprintf(stderr, "kiln perplexity: %s\n", tok.status().to_string().c_str());
            return 1;
        }
        gpu_tokenizer = std::move(*tok);
    }
    const loader::ModelConfig& c = session ? session->model->config() : checkpoint.config;
    const tokenizer::Tokenizer& tok = session ? *session->tokenizer : *gpu_tokenizer;
    if (c.max_seq_len > 0 && n_ctx > c.max_seq_len) {
        std::fprintf(stderr, "kiln perplexity: --ctx %d capped to the model's max_seq_len %lld\n", n_ctx,
                     (long long)c.max_seq_len);
        n_ctx = int(c.max_seq_len);
    }
    const kernels::KvDtype kv_dtype = session_options.kv_dtype.value_or(kernels::KvDtype::kF32);
    if (!session) {
        gpu_options.kv_dtype = kv_dtype;
        gpu_options.device = *device;
        gpu_options.max_seq_len = n_ctx;
        gpu_options.max_tokens = n_ctx;
        auto g = open_gpu_sequence(checkpoint, gpu_options);
        if (!g) {
            std::fprintf(stderr, "kiln perplexity: %s\n", g.status().to_string().c_str());
            return 1;
        }
        gpu = std::move(*g);
        std::fprintf(stderr, "%s\n", gpu->describe().c_str());
    }
    const std::vector<int32_t> tokens = tok.encode(ss.str());
    if (int64_t(tokens.size()) < 2 * int64_t(n_ctx)) {
        std::fprintf(stderr, "kiln perplexity: %s has %zu tokens; need at least 2 * ctx = %d\n", text_path->c_str(),
                     tokens.size(), 2 * n_ctx);
        return 1;
    }
    const int32_t bos = tok.bos_id();
    const int64_t num_windows = int64_t(tokens.size()) / n_ctx;
    const int first = n_ctx / 2;
    const int64_t V = c.vocab_size;
    std::fprintf(stderr, "%zu tokens, %lld windows of %d, scoring %d tokens each\n", tokens.size(),
                 (long long)num_windows, n_ctx, n_ctx - 1 - first);
    std::optional<model::KvCache> cache;
    std::unique_ptr<engine::SequenceRunner> ranks;  // under mpirun: every rank runs each window
    if (session && session->par.world) {
        auto r = engine::SequenceRunner::create(*session->model, n_ctx, kv_dtype);
        if (!r) {
            std::fprintf(stderr, "kiln perplexity: %s\n", r.status().to_string().c_str());
            return 1;
        }
        ranks = std::move(*r);
    } else if (session) {
        cache.emplace(c, n_ctx, kv_dtype);
    }
    std::vector<float> logits;  // [n_ctx, vocab]
    double nll = 0;
    int64_t count = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t w = 0; w < num_windows; ++w) {
        std::vector<int32_t> window(tokens.begin() + w * n_ctx, tokens.begin() + (w + 1) * n_ctx);
        if (bos >= 0) window[0] = bos;
        core::Status st;
        if (ranks) {
            st = ranks->forward(window, 0, /*all_logits=*/true, logits);
        } else if (session) {
            cache->clear();
            st = session->model->forward(window, *cache, /*all_logits=*/true, logits);
        } else {
            st = gpu->forward(window, 0, /*all_logits=*/true, logits);  // a fresh sequence: position 0 on
        }
        if (!st.is_ok()) {
            std::fprintf(stderr, "kiln perplexity: %s\n", st.to_string().c_str());
            return 1;
        }
        for (int j = first; j < n_ctx - 1; ++j) nll += nll_of(logits.data() + size_t(j) * V, V, window[j + 1]);
        count += n_ctx - 1 - first;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "[%lld/%lld] ppl %.4f (%.2f s)\n", (long long)(w + 1), (long long)num_windows,
                     std::exp(nll / count), secs);
    }
    std::printf("tokens scored = %lld\nppl = %.4f\n", (long long)count, std::exp(nll / count));
    return 0;
}

}  // namespace kiln::tools
