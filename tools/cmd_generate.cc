// `kiln generate -m MODEL -p PROMPT [-n N] [-t N] [--tokenizer FILE]`: greedy decoding (argmax) for
// now; the sampling library (src/sampling) plugs in later. The prompt runs as one batched prefill,
// then one token per step until N tokens or EOS. Text streams to stdout; load time and tokens/s go to
// stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

constexpr const char* kGenerateUsage =
    "usage: kiln generate -m MODEL [-p PROMPT] [-n N] [-t N] [--tokenizer FILE]\n"
    "\n"
    "Greedy decoding: continues PROMPT (default: empty, BOS only) by up to N tokens (default 256),\n"
    "stopping at EOS. Text goes to standard output, timings to standard error.\n"
    "\n"
    "  -m, --model MODEL      GGUF file, safetensors file or HF folder, or llama2.c .bin\n"
    "  -p, --prompt PROMPT    the text to continue\n"
    "  -n, --max-tokens N     tokens to generate (default 256)\n"
    "  --tokenizer FILE       tokenizer to use instead of the checkpoint's\n"
    "  -t, --threads N        worker threads (default: logical CPUs, std::thread::hardware_concurrency)\n";

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::optional<std::string> either(const Args& a, const char* s, const char* l) {
    auto v = a.get(l);
    return v ? v : a.get(s);
}

}  // namespace

int cmd_generate(int argc, char** argv) {
    Args args({"--help", "-h"},
              {"-m", "--model", "-p", "--prompt", "-n", "--max-tokens", "--tokenizer", "-t", "--threads"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln generate: %s\n%s", args.error().c_str(), kGenerateUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kGenerateUsage, stdout);
        return 0;
    }
    auto model_path = either(args, "-m", "--model");
    if (!model_path || !args.positional().empty()) {
        std::fputs(kGenerateUsage, stderr);
        return 2;
    }
    int max_tokens = 256;
    if (auto n = either(args, "-n", "--max-tokens")) {
        auto v = parse_threads(*n);
        if (!v) {
            std::fprintf(stderr, "kiln generate: -n needs a positive integer, got '%s'\n", n->c_str());
            return 2;
        }
        max_tokens = *v;
    }
    std::optional<int> threads;
    if (auto t = either(args, "-t", "--threads")) {
        threads = parse_threads(*t);
        if (!threads) {
            std::fprintf(stderr, "kiln generate: --threads needs a positive integer, got '%s'\n", t->c_str());
            return 2;
        }
    }
    const auto t_load = Clock::now();
    auto session = open_model_session(*model_path, args.get("--tokenizer").value_or(""), threads);
    if (!session) {
        std::fprintf(stderr, "kiln generate: %s\n", session.status().to_string().c_str());
        return 1;
    }
    const double load_s = since(t_load);
    ModelSession& s = **session;
    const model::ModelConfig& c = s.model->config();
    std::vector<int32_t> ids = s.tokenizer->encode(either(args, "-p", "--prompt").value_or(""));
    if (ids.empty() && s.tokenizer->bos_id() >= 0) ids.push_back(s.tokenizer->bos_id());
    if (ids.empty()) {
        std::fprintf(stderr, "kiln generate: empty prompt and the tokenizer has no BOS token\n");
        return 1;
    }
    const int64_t max_len = c.max_seq_len > 0 ? c.max_seq_len : int64_t(ids.size()) + max_tokens;
    model::KvCache cache(c, max_len);
    tokenizer::StreamDecoder stream(*s.tokenizer);
    std::vector<int32_t> next = ids;
    int generated = 0;
    double prefill_s = 0;
    const auto t_gen = Clock::now();
    for (; generated < max_tokens && cache.size() + int64_t(next.size()) <= max_len; ++generated) {
        const auto t_step = Clock::now();
        auto logits = s.model->forward(next, cache, false);
        if (!logits) {
            std::fprintf(stderr, "kiln generate: %s\n", logits.status().to_string().c_str());
            return 1;
        }
        if (generated == 0) prefill_s = since(t_step);
        const int32_t best = int32_t(std::max_element(logits->begin(), logits->end()) - logits->begin());
        if (best == s.tokenizer->eos_id()) break;
        std::string piece = stream.push(best);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        next = {best};
    }
    std::string tail = stream.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    const double gen_s = since(t_gen);
    const double decode_s = gen_s - prefill_s;
    std::fprintf(stderr, "load %.3f s; prompt %zu tokens in %.3f s; %d tokens generated in %.3f s (%.1f tokens/s)\n",
                 load_s, ids.size(), prefill_s, generated, gen_s,
                 generated > 1 && decode_s > 0 ? double(generated - 1) / decode_s : 0.0);
    return 0;
}

}  // namespace kiln::tools
