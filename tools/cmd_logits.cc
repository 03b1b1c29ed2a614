// `kiln logits -m MODEL -p PROMPT [--top K] [--tokenizer FILE] [-t N]`: teacher-forced top-K logits
// at every prompt position (BOS included when the tokenizer adds it), one batched prefill pass.
// Output format (the stories260K golden files'): a '#' comment line, then per position
// "POS INPUT_ID ID:LOGIT ..." with logits to 6 decimals, best first.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine/parallel.h"
#include "engine_options.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

constexpr const char* kLogitsUsage =
    "usage: kiln logits [-m MODEL] -p PROMPT [--top K] [--tokenizer FILE] [-t N] [--isa ISA] [--f32-activations]\n"
    "                   [--kv-cache-dtype T]\n"
    "       mpirun -np T*P kiln logits ... --tp T --pp P   (CPU ranks, docs/parallel.md)\n"
    "\n"
    "Runs PROMPT (BOS added when the tokenizer asks for it) through the model in one pass and prints,\n"
    "for every position, the top-K next-token logits: \"POS INPUT_ID ID:LOGIT ...\".\n"
    "\n"
    "  -p, --prompt PROMPT    the text\n"
    "  --top K                logits per position (default 5; the vocabulary size or more: all)\n"
    "(for llama2.c .bin files, tok512.bin or tokenizer.bin beside the model is the default tokenizer)\n";

void print_usage(std::FILE* f) {
    std::fputs(kLogitsUsage, f);
    std::fputs(kSessionHelp, f);
    std::fputs(kParallelHelp, f);
}

}  // namespace

int cmd_logits(int argc, char** argv) {
    Args args(merged({"--help", "-h"}, kSessionFlags),
              merged(merged({"-p", "--prompt", "--top"}, kSessionOptions), parallel_options()));
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln logits: %s\n", args.error().c_str());
        print_usage(stderr);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        print_usage(stdout);
        return 0;
    }
    auto prompt = args.get_either("--prompt", "-p");
    if (!prompt || !args.positional().empty()) {
        print_usage(stderr);
        return 2;
    }
    int top = 5;
    if (auto k = args.get("--top")) {
        // A positive integer; more than the vocabulary prints every logit.
        const bool digits = !k->empty() && k->size() <= 9 && k->find_first_not_of("0123456789") == std::string::npos;
        top = digits ? std::atoi(k->c_str()) : 0;
        if (top <= 0) {
            std::fprintf(stderr, "kiln logits: --top needs a positive integer, got '%s'\n", k->c_str());
            return 2;
        }
    }
    SessionOptions session_options;
    if (!parse_session_options(args, "logits", session_options)) return 2;
    EngineOptions parallel;  // under mpirun: the other ranks follow rank 0's pass
    if (!parallel_session_options(args, "logits", session_options, parallel)) return 2;
    if (const int rc = run_if_worker(parallel, "logits"); rc >= 0) return rc;
    auto session = open_model_session(session_options, parallel);
    if (!session) {
        std::fprintf(stderr, "kiln logits: %s\n", session.status().to_string().c_str());
        return 1;
    }
    ModelSession& s = **session;
    const kernels::KvDtype kv_dtype = session_options.kv_dtype.value_or(kernels::KvDtype::kF32);
    std::vector<int32_t> ids = s.tokenizer->encode(*prompt);
    if (ids.empty()) {
        std::fprintf(stderr, "kiln logits: the prompt encodes to no tokens\n");
        return 1;
    }
    const loader::ModelConfig& c = s.model->config();
    core::Result<std::vector<float>> logits = std::vector<float>();
    if (s.par.world) {  // every rank runs the pass
        auto ranks = engine::SequenceRunner::create(*s.model, int64_t(ids.size()), kv_dtype);
        core::Status st = ranks ? (*ranks)->forward(ids, 0, /*all_logits=*/true, *logits) : ranks.status();
        if (!st.is_ok()) logits = st;
    } else {
        model::KvCache cache(c, int64_t(ids.size()), kv_dtype);
        logits = s.model->forward(ids, cache, /*all_logits=*/true);
    }
    if (!logits) {
        std::fprintf(stderr, "kiln logits: %s\n", logits.status().to_string().c_str());
        return 1;
    }
    const int64_t V = c.vocab_size;
    const int64_t k = std::min<int64_t>(top, V);
    std::string line = "# " + (c.name.empty() ? c.arch : c.name) + " teacher-forced logits; input ids = [";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", line.c_str());
    std::vector<int32_t> order(static_cast<size_t>(V));
    for (size_t t = 0; t < ids.size(); ++t) {
        const float* row = logits->data() + t * size_t(V);  // [V]
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
        std::printf("%zu %d", t, ids[t]);
        for (int64_t r = 0; r < k; ++r) std::printf(" %d:%.6f", order[size_t(r)], double(row[order[size_t(r)]]));
        std::printf("\n");
    }
    return 0;
}

}  // namespace kiln::tools
