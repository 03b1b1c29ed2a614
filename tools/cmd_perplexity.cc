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
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

constexpr const char* kPerplexityUsage =
    "usage: kiln perplexity [-m MODEL] -f FILE [--ctx N] [-t N] [--tokenizer FILE] [--isa ISA] [--f32-activations]\n"
    "\n"
    "Perplexity of FILE, computed as llama.cpp's perplexity tool does: non-overlapping windows of N\n"
    "tokens, each starting with BOS, scoring the second half of each window. The file needs at least\n"
    "2N tokens. Progress goes to standard error; `ppl = X` and the token count to standard output.\n"
    "\n"
    "  -f, --file FILE        the text to score\n"
    "  -c, --ctx N            window length in tokens (default 512, capped to the model's max_seq_len)\n";

void print_usage(std::FILE* f) {
    std::fputs(kPerplexityUsage, f);
    std::fputs(kSessionHelp, f);
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
              merged({"-f", "--file", "-c", "--ctx"}, kSessionOptions));
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
    std::ifstream in(*text_path, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "kiln perplexity: cannot read '%s'\n", text_path->c_str());
        return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto session = open_model_session(session_options);
    if (!session) {
        std::fprintf(stderr, "kiln perplexity: %s\n", session.status().to_string().c_str());
        return 1;
    }
    ModelSession& s = **session;
    const model::ModelConfig& c = s.model->config();
    if (c.max_seq_len > 0 && n_ctx > c.max_seq_len) {
        std::fprintf(stderr, "kiln perplexity: --ctx %d capped to the model's max_seq_len %lld\n", n_ctx,
                     (long long)c.max_seq_len);
        n_ctx = int(c.max_seq_len);
    }
    const std::vector<int32_t> tokens = s.tokenizer->encode(ss.str());
    if (int64_t(tokens.size()) < 2 * int64_t(n_ctx)) {
        std::fprintf(stderr, "kiln perplexity: %s has %zu tokens; need at least 2 * ctx = %d\n", text_path->c_str(),
                     tokens.size(), 2 * n_ctx);
        return 1;
    }
    const int32_t bos = s.tokenizer->bos_id();
    const int64_t num_windows = int64_t(tokens.size()) / n_ctx;
    const int first = n_ctx / 2;
    const int64_t V = c.vocab_size;
    std::fprintf(stderr, "%zu tokens, %lld windows of %d, scoring %d tokens each\n", tokens.size(),
                 (long long)num_windows, n_ctx, n_ctx - 1 - first);
    model::KvCache cache(c, n_ctx);
    double nll = 0;
    int64_t count = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t w = 0; w < num_windows; ++w) {
        std::vector<int32_t> window(tokens.begin() + w * n_ctx, tokens.begin() + (w + 1) * n_ctx);
        if (bos >= 0) window[0] = bos;
        cache.clear();
        auto logits = s.model->forward(window, cache, /*all_logits=*/true);  // [n_ctx, vocab]
        if (!logits) {
            std::fprintf(stderr, "kiln perplexity: %s\n", logits.status().to_string().c_str());
            return 1;
        }
        for (int j = first; j < n_ctx - 1; ++j) nll += nll_of(logits->data() + size_t(j) * V, V, window[j + 1]);
        count += n_ctx - 1 - first;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "[%lld/%lld] ppl %.4f (%.2f s)\n", (long long)(w + 1), (long long)num_windows,
                     std::exp(nll / count), secs);
    }
    std::printf("tokens scored = %lld\nppl = %.4f\n", (long long)count, std::exp(nll / count));
    return 0;
}

}  // namespace kiln::tools
