// Engine options of the kiln commands (see engine_options.h).
#include "engine_options.h"

#include <cmath>
#include <csignal>
#include <sys/prctl.h>
#include <cstdio>
#include <optional>

#include "kernels/ref/kv_quant.h"
#include "model_session.h"

namespace kiln::tools {

std::set<std::string> engine_flags() {
    return merged({"--no-prefix-cache", "--mmap", "--kv-prefault"}, kSessionFlags);
}
std::set<std::string> engine_options() {
    return merged({"--kv-cache-gb", "--block-size", "--max-batch-tokens", "--max-seqs",
                   "--max-model-len", "--device", "--gpu-memory-utilization", "--spec", "--draft-model", "--num-draft",
                   "--spec-ngram-min", "--spec-ngram-max", "--spec-max-batch", "--tp", "--pp", "--pp-batches", "--ep",
                   "--collective-timeout"},
                  kSessionOptions);
}

#define KILN_PARALLEL_HELP \
    "parallelism (docs/parallel.md):\n" \
    "  --tp N                 tensor parallelism over N processes: mpirun -np N kiln CMD ... --tp N\n" \
    "                         (CPU ranks; each holds its share of the heads and MLP units; rank 0\n" \
    "                         prints, serves and samples, the others follow its steps)\n" \
    "  --pp P                 pipeline parallelism over P stages, each a run of the layers: mpirun -np\n" \
    "                         T*P kiln CMD ... --tp T --pp P (T ranks per stage; rank 0 is stage 0)\n" \
    "  --pp-batches B         batches in flight over the stages, each with its share of the sequences\n" \
    "                         and KV blocks (default: one per stage; 1: each step waits for the last\n" \
    "                         stage)\n" \
    "  --ep E                 expert parallelism for a mixture-of-experts model: its experts spread\n" \
    "                         over E ranks, its attention split over them (the same as --tp E, which\n" \
    "                         spreads the experts too): mpirun -np E kiln CMD ... --ep E\n" \
    "  --collective-timeout S seconds a collective waits for the other ranks before the job is ended\n" \
    "                         (default 120)\n" \
    "\n"

const char* const kEngineHelp =
    "\n"
    "engine (continuous batching over a paged KV cache, see docs/kv.md):\n"
    "  --device D             cpu (default), or cuda / cuda:N: the model on that GPU (a build with the\n"
    "                         CUDA backend, preset cuda-release; docs/cuda.md)\n"
    "  --gpu-memory-utilization U  share of the GPU's memory for weights, activations and KV cache\n"
    "                         (default 0.9); the KV cache gets what the rest leaves\n"
    "  --kv-cache-gb G        KV cache budget in GiB on the CPU (default: a quarter of available memory,\n"
    "                         at most what --max-seqs full contexts need)\n"
    "  --kv-prefault          commit the whole KV cache at start, on huge pages (slower start; no page\n"
    "                         faults when requests first use its memory, which are slow on some VMs;\n"
    "                         CPU only)\n"
    "  --block-size N         tokens per KV block (default 16)\n"
    "  --max-batch-tokens N   tokens per step, decode tokens and prompt chunks together (default 512)\n"
    "  --max-seqs N           sequences per step (default 64)\n"
    "  --max-model-len N      context length: prompt + output (default: the model's)\n"
    "  --no-prefix-cache      do not reuse the KV of earlier prompts' common prefixes\n"
    "  --mmap                 run from the file mapping (faster start) instead of a copy of the weights\n"
    "                         in anonymous memory\n"
    "\n"
    KILN_PARALLEL_HELP
    "speculative decoding (docs/speculative.md; greedy output is unchanged, sampled output keeps its\n"
    "distribution):\n"
    "  --spec METHOD          off by default; drafts verified by the model in one step:\n"
    "                         ngram     prompt lookup: what followed the last n tokens earlier in the\n"
    "                                   sequence (no extra model)\n"
    "                         draft     a smaller model with the same tokenizer (--draft-model)\n"
    "                         layers:N  the model's own first N layers and its output head (CPU only)\n"
    "  --draft-model M        the draft model of --spec draft (implies it); its KV cache is its own\n"
    "  --num-draft K          most draft tokens per sequence and step (default 5; adapted per sequence\n"
    "                         to what it gets accepted)\n"
    "  --spec-ngram-min N     shortest n-gram looked up (default 2)\n"
    "  --spec-ngram-max N     longest n-gram looked up, tried first (default 4)\n"
    "  --spec-max-batch N     speculate only in steps where at most N sequences decode (default 8,\n"
    "                         measured on 2 cores; 0 = always)\n";

const char* const kParallelHelp = "\n" KILN_PARALLEL_HELP;

std::string spec_summary(const EngineStats& s) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "speculative: %lld draft tokens, %lld accepted (%.1f%%), %.2f tokens per verifying step (%lld steps)",
                  (long long)s.spec_draft_tokens, (long long)s.spec_accepted_tokens,
                  s.spec_draft_tokens ? 100.0 * double(s.spec_accepted_tokens) / double(s.spec_draft_tokens) : 0.0,
                  s.spec_verify_steps ? 1.0 + double(s.spec_accepted_tokens) / double(s.spec_verify_steps) : 0.0,
                  (long long)s.spec_verify_steps);
    return buf;
}

void print_upload_progress(uint64_t done, uint64_t total) {
    // every tenth of the way (and the end), on one line
    static thread_local int last_tenth = -1;
    const int tenth = total ? int(10 * done / total) : 10;
    if (done < total && tenth == last_tenth) return;
    last_tenth = done >= total ? -1 : tenth;
    std::fprintf(stderr, "\ruploading weights: %3d%% of %.2f GiB", total ? int(100 * done / total) : 100,
                 double(total) / double(1 << 30));
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
}

namespace {

std::optional<int64_t> parse_positive(const std::string& s, int64_t max) {
    try {
        size_t used = 0;
        long long v = std::stoll(s, &used);
        if (used != s.size() || v < 1 || v > max) return std::nullopt;
        return int64_t(v);
    } catch (...) {
        return std::nullopt;
    }
}

// A finite number in (0, max]; nullopt on anything else.
std::optional<double> parse_positive_number(const std::string& s, double max) {
    try {
        size_t used = 0;
        const double v = std::stod(s, &used);
        if (used != s.size() || !(v > 0) || !std::isfinite(v) || v > max) return std::nullopt;
        return v;
    } catch (...) {
        return std::nullopt;
    }
}

}  // namespace

// The session options' share of EngineOptions: the model (resolved: the default model when -m is
// absent), tokenizer, threads and kernels.
static bool session_engine_options(const Args& args, const char* cmd, const SessionOptions& s, EngineOptions& out) {
    auto path = resolve_model_path(s.model);
    if (!path) {
        std::fprintf(stderr, "kiln %s: %s\n", cmd, path.status().to_string().c_str());
        return false;
    }
    out.model = *path;
    out.tokenizer = s.tokenizer;
    out.threads = s.threads.value_or(0);
    if (args.get("--isa")) out.isa = kernels::cpu::isa_name(s.linear.isa);
    out.f32_activations = s.linear.f32_activations;
    return true;
}

bool parse_parallel_options(const Args& args, const char* cmd, EngineOptions& out) {
    for (auto [flag, dst] : {std::pair{"--tp", &out.tensor_parallel}, std::pair{"--pp", &out.pipeline_parallel},
                             std::pair{"--pp-batches", &out.pipeline_batches},
                             std::pair{"--ep", &out.expert_parallel}})
        if (auto v = args.get(flag)) {
            auto x = parse_positive(*v, 4096);
            if (!x) {
                std::fprintf(stderr, "kiln %s: %s needs an integer in [1, 4096], got '%s'\n", cmd, flag, v->c_str());
                return false;
            }
            *dst = int(*x);
        }
    if (auto v = args.get("--collective-timeout")) {
        const auto t = parse_positive_number(*v, 1e9);
        if (!t) {
            std::fprintf(stderr, "kiln %s: --collective-timeout needs a positive number of seconds, got '%s'\n", cmd,
                         v->c_str());
            return false;
        }
        out.collective_timeout = *t;
    }
    return true;
}

std::set<std::string> parallel_options() {
    return {"--tp", "--pp", "--pp-batches", "--ep", "--collective-timeout"};
}

bool parallel_session_options(const Args& args, const char* cmd, const SessionOptions& s, EngineOptions& out) {
    if (!parse_parallel_options(args, cmd, out)) return false;
    if (out.tensor_parallel == 1 && out.pipeline_parallel == 1 && out.expert_parallel == 1) return true;
    out.mmap_weights = true;  // as open_model_session runs rank 0's
    return session_engine_options(args, cmd, s, out);
}

bool parse_engine_options(const Args& args, const char* cmd, EngineOptions& out) {
    SessionOptions s;
    if (!parse_session_options(args, cmd, s) || !session_engine_options(args, cmd, s, out)) return false;
    if (auto v = args.get("--kv-cache-gb")) {
        const auto gb = parse_positive_number(*v, 1 << 20);
        if (!gb) {
            std::fprintf(stderr, "kiln %s: --kv-cache-gb needs a positive number, got '%s'\n", cmd, v->c_str());
            return false;
        }
        out.kv_cache_bytes = int64_t(*gb * double(1 << 30));
    }
    if (s.kv_dtype) out.kv_cache_dtype = kernels::ref::kv_dtype_name(*s.kv_dtype);
    if (auto v = args.get("--device")) out.device = *v;  // checked by Engine::create
    if (out.device != "cpu") out.on_load_progress = print_upload_progress;
    if (auto v = args.get("--gpu-memory-utilization")) {
        const auto u = parse_positive_number(*v, 1);
        if (!u) {
            std::fprintf(stderr, "kiln %s: --gpu-memory-utilization needs a number in (0, 1], got '%s'\n", cmd,
                         v->c_str());
            return false;
        }
        out.gpu_memory_utilization = *u;
    }
    const struct {
        const char* flag;
        int64_t max;
        int64_t value;
    } ints[] = {{"--block-size", 4096, out.block_size},
                {"--max-batch-tokens", 1 << 20, out.max_batch_tokens},
                {"--max-seqs", 1 << 16, out.max_seqs},
                {"--max-model-len", 1 << 24, out.max_model_len}};
    int64_t got[4];
    for (int i = 0; i < 4; ++i) {
        got[i] = ints[i].value;
        auto v = args.get(ints[i].flag);
        if (!v) continue;
        auto x = parse_positive(*v, ints[i].max);
        if (!x) {
            std::fprintf(stderr, "kiln %s: %s needs an integer in [1, %lld], got '%s'\n", cmd, ints[i].flag,
                         (long long)ints[i].max, v->c_str());
            return false;
        }
        got[i] = *x;
    }
    if (!parse_parallel_options(args, cmd, out)) return false;
    out.block_size = int32_t(got[0]);
    out.max_batch_tokens = got[1];
    out.max_seqs = int32_t(got[2]);
    out.max_model_len = got[3];
    if (auto v = args.get("--spec")) {
        if (*v != "ngram" && *v != "draft" && v->rfind("layers:", 0) != 0) {
            std::fprintf(stderr, "kiln %s: --spec must be ngram, draft or layers:N, got '%s'\n", cmd, v->c_str());
            return false;
        }
        out.speculative = *v;  // layers:N checked by Engine::create
    }
    if (auto v = args.get("--draft-model")) {
        if (out.speculative.empty()) out.speculative = "draft";
        if (out.speculative != "draft") {
            std::fprintf(stderr, "kiln %s: --draft-model goes with --spec draft, not --spec %s\n", cmd,
                         out.speculative.c_str());
            return false;
        }
        auto path = resolve_model_path(*v);
        if (!path) {
            std::fprintf(stderr, "kiln %s: --draft-model: %s\n", cmd, path.status().to_string().c_str());
            return false;
        }
        out.draft_model = *path;
    }
    if (out.speculative == "draft" && out.draft_model.empty()) {
        std::fprintf(stderr, "kiln %s: --spec draft needs --draft-model M\n", cmd);
        return false;
    }
    const struct {
        const char* flag;
        int64_t lo, hi;
        int32_t* value;
    } spec_ints[] = {{"--num-draft", 1, 64, &out.num_draft},
                     {"--spec-ngram-min", 1, 64, &out.spec_ngram_min},
                     {"--spec-ngram-max", 1, 64, &out.spec_ngram_max},
                     {"--spec-max-batch", 0, 1 << 16, &out.spec_max_batch}};
    for (const auto& f : spec_ints) {
        auto v = args.get(f.flag);
        if (!v) continue;
        if (out.speculative.empty()) {
            std::fprintf(stderr, "kiln %s: %s needs --spec\n", cmd, f.flag);
            return false;
        }
        auto x = f.lo == 0 ? (*v == "0" ? std::optional<int64_t>(0) : parse_positive(*v, f.hi)) : parse_positive(*v, f.hi);
        if (!x) {
            std::fprintf(stderr, "kiln %s: %s needs an integer in [%lld, %lld], got '%s'\n", cmd, f.flag,
                         (long long)f.lo, (long long)f.hi, v->c_str());
            return false;
        }
        *f.value = int32_t(*x);
    }
    if (out.spec_ngram_min > out.spec_ngram_max) {
        std::fprintf(stderr, "kiln %s: --spec-ngram-min %d exceeds --spec-ngram-max %d\n", cmd, out.spec_ngram_min,
                     out.spec_ngram_max);
        return false;
    }
    out.prefix_cache = !args.has("--no-prefix-cache");
    out.mmap_weights = args.has("--mmap");
    out.kv_prefault = args.has("--kv-prefault");
    return true;
}

int run_if_worker(const EngineOptions& options, const char* cmd) {
    if (Engine::parallel_rank(options) == 0) return -1;
    // mpirun passes SIGINT / SIGTERM to every rank; rank 0 drains and then tells the others to stop,
    // so they must outlive the signal (a rank 0 that dies takes them down through mpirun).
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    // ...and must not outlive mpirun (their parent) should it go away without rank 0's stop.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const Status st = Engine::run_worker(options);
    if (st.ok()) return 0;
    std::fprintf(stderr, "kiln %s: rank %d: %s\n", cmd, Engine::parallel_rank(options), st.message.c_str());
    return 1;
}

}  // namespace kiln::tools
