// `kiln bench serve --url URL [--requests N | --duration S] [--rate R] [--concurrency C] ...`: a load
// generator for an OpenAI-compatible server (`kiln serve`), shaped like `vllm bench serve`.
// Every request streams (SSE, stream_options.include_usage) and is timed on the client:
//   TTFT = send -> first event with non-empty text; ITL = gaps between successive content events
//   (pooled over all requests); E2EL = send -> end of the stream; TPOT = (E2EL - TTFT) / (output
//   tokens - 1), per request with > 1 output token; output/prompt tokens come from the usage chunk.
// Load: --concurrency C (default 8) is a closed loop of C clients, each sending its next request when
// the previous one ends; --rate R sends Poisson arrivals (seeded exponential gaps; `inf` = all at
// once), with at most C in flight when --concurrency is also given (vllm's --max-concurrency), else
// at most min(N, 256). Prompts of exactly I tokens are seeded random words tokenized by the server's
// /tokenize (kiln's and vLLM's form) or here (--tokenizer, for any server), cut to I ids and sent as
// token ids (a different text per request, so the prefix cache cannot serve them); with --endpoint
// chat the text goes as a user message (length approximate).
// Greedy decoding with ignore_eos and max_tokens O makes every request produce O tokens.
// Exit: 0 all requests succeeded, 1 any failed (or none completed, or the server is unreachable),
// 2 bad flags.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "bench_serve_client.h"
#include "bench_serve_stats.h"
#include "commands.h"
#include "loader/checkpoint_tokenizer.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: kiln bench serve [--url URL] [--requests N | --duration S] [--rate R] [--concurrency C]\n"
    "                        [--input-len I] [--output-len O] [--endpoint completions|chat]\n"
    "                        [--model NAME] [--tokenizer T] [--api-key KEY] [--seed S] [--json]\n"
    "\n"
    "Load generator for an OpenAI-compatible server such as `kiln serve` (like `vllm bench serve`).\n"
    "Every request streams; reports request and token throughput and the mean, median and p99 of\n"
    "TTFT, TPOT, ITL and end-to-end latency (definitions: docs/server.md). Exits 1 if any request\n"
    "failed, 2 on bad flags.\n"
    "\n"
    "  --url URL           server address http://HOST[:PORT] (default http://127.0.0.1:8000)\n"
    "  --requests N        requests to send (default 100)\n"
    "  --duration S        instead of N requests: keep sending for S seconds, then wait for the\n"
    "                      requests in flight\n"
    "  --concurrency C     closed loop: C clients, each sends its next request when its previous one\n"
    "                      ends (default 8 when --rate is not given); with --rate: at most C in flight\n"
    "  --rate R            open loop: Poisson arrivals at R requests/s; `inf` sends all at once\n"
    "                      (at most C in flight with --concurrency, else at most min(N, 256))\n"
    "  --input-len I       prompt tokens per request (default 128): seeded random words tokenized by\n"
    "                      the server's /tokenize (kiln's or vLLM's), cut to I ids and sent as token ids\n"
    "  --tokenizer T       tokenize here with T instead (the served GGUF file or HF folder, a\n"
    "                      tokenizer.json, a llama2.c tokenizer .bin): for servers without that\n"
    "                      /tokenize (llama-server, SGLang); the context length is then not checked\n"
    "  --output-len O      tokens per request (default 64): max_tokens O with ignore_eos, greedy\n"
    "  --endpoint E        completions (default: /v1/completions) or chat (/v1/chat/completions; the\n"
    "                      prompt goes as a user message of about I tokens, plus the chat template)\n"
    "  --model NAME        the request's `model` field (default: none, the server's one model)\n"
    "  --api-key KEY       sent as `Authorization: Bearer KEY`\n"
    "  --seed S            seed of the prompts and of the arrival times (default 0)\n"
    "  --json              one JSON object on stdout instead of the table\n";

constexpr int kMaxOpenLoopClients = 256;
constexpr size_t kMaxErrorsKept = 5;
constexpr double kHealthWaitSeconds = 5;

struct Config {
    ServerTarget target;
    std::string url = "http://127.0.0.1:8000";
    int64_t requests = 100;
    double duration_s = 0;  // > 0: time-bounded run
    double rate = 0;        // 0: closed loop; inf: all at once
    int clients = 8;
    bool concurrency_given = false;
    int64_t input_len = 128, output_len = 64;
    uint64_t seed = 0;
    bool json = false;
    std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // --tokenizer: prompts tokenized here
};

// A positive number (or `inf` when allowed).
std::optional<double> positive_flag(const Args& args, const char* flag, bool allow_inf) {
    const std::string v = *args.get(flag);
    if (allow_inf && (v == "inf" || v == "Inf" || v == "INF")) return std::numeric_limits<double>::infinity();
    try {
        size_t used = 0;
        double x = std::stod(v, &used);
        if (used == v.size() && std::isfinite(x) && x > 0) return x;
    } catch (...) {
    }
    std::fprintf(stderr, "kiln bench serve: %s needs a positive number%s, got '%s'\n", flag, allow_inf ? " or inf" : "",
                 v.c_str());
    return std::nullopt;
}

// Fills `c` from the flags; false after printing why.
bool parse_config(const Args& args, Config& c) {
    if (auto v = args.get("--url")) c.url = *v;
    std::string err;
    if (!parse_server_url(c.url, &c.target, &err)) {
        std::fprintf(stderr, "kiln bench serve: %s\n", err.c_str());
        return false;
    }
    const auto requests = int_option(args, "bench serve", "--requests", 100, 1, 10000000);
    const auto conc = int_option(args, "bench serve", "--concurrency", 8, 1, 4096);
    const auto in_len = int_option(args, "bench serve", "--input-len", 128, 1, 1 << 24);
    const auto out_len = int_option(args, "bench serve", "--output-len", 64, 1, 1 << 24);
    const auto seed = int_option(args, "bench serve", "--seed", 0, 0, std::numeric_limits<int64_t>::max());
    if (!requests || !conc || !in_len || !out_len || !seed) return false;
    c.requests = *requests;
    c.clients = int(*conc);
    c.concurrency_given = args.get("--concurrency").has_value();
    c.input_len = *in_len;
    c.output_len = *out_len;
    c.seed = uint64_t(*seed);
    if (args.get("--duration")) {
        if (args.get("--requests")) {
            std::fprintf(stderr, "kiln bench serve: give --requests or --duration, not both\n");
            return false;
        }
        const auto d = positive_flag(args, "--duration", false);
        if (!d) return false;
        c.duration_s = *d;
    }
    if (args.get("--rate")) {
        const auto r = positive_flag(args, "--rate", true);
        if (!r) return false;
        c.rate = *r;
        if (!c.concurrency_given)
            c.clients =
                c.duration_s > 0 ? kMaxOpenLoopClients : int(std::min<int64_t>(c.requests, kMaxOpenLoopClients));
    }
    if (c.duration_s == 0) c.clients = int(std::min<int64_t>(c.clients, c.requests));
    const std::string ep = args.get("--endpoint").value_or("completions");
    if (ep != "completions" && ep != "chat") {
        std::fprintf(stderr, "kiln bench serve: --endpoint must be completions or chat, got '%s'\n", ep.c_str());
        return false;
    }
    c.target.chat = ep == "chat";
    c.target.model = args.get("--model").value_or("");
    c.target.api_key = args.get("--api-key").value_or("");
    c.json = args.has("--json");
    if (auto path = args.get("--tokenizer")) {
        auto tok = loader::load_tokenizer(*path);
        if (!tok.is_ok()) {
            std::fprintf(stderr, "kiln bench serve: --tokenizer: %s\n", tok.status().to_string().c_str());
            return false;
        }
        c.tokenizer = std::move(*tok);
    }
    return true;
}

// The prompt of request `idx`: seeded random words, tokenized by the server (or c.tokenizer).
// Completions: exactly `input_len` ids (BOS included when the tokenizer adds one). Chat: the text of
// the first words that reach `input_len` tokens (without special tokens).
bool make_prompt(httplib::Client& client, const Config& c, uint64_t idx, BenchPrompt* p, int64_t* max_model_len,
                 std::string* err) {
    static const char* const kWords[] = {
        "the",    "little", "girl",  "boy",  "dog",   "cat",    "sun",   "tree",  "ball",   "happy", "big",
        "red",    "blue",   "park",  "mom",  "dad",   "play",   "run",   "jump",  "saw",    "went",  "said",
        "friend", "bird",   "house", "day",  "water", "flower", "toy",   "car",   "smile",  "sky",   "garden",
        "fish",   "cake",   "snow",  "rain", "night", "moon",   "star",  "box",   "book",   "hat",   "shoe",
        "funny",  "small",  "green", "soft", "warm",  "looked", "found", "loved", "wanted", "named", "once"};
    constexpr size_t kNumWords = sizeof kWords / sizeof kWords[0];
    std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ULL + idx + 1);
    std::uniform_int_distribution<size_t> pick(0, kNumWords - 1);
    std::string text;
    int64_t words = 0;
    for (int attempt = 0; attempt < 16; ++attempt) {
        const int64_t have = int64_t(p->ids.size());
        for (int64_t w = 0, more = std::max<int64_t>(c.input_len - have, 1) + 2; w < more; ++w, ++words) {
            if (!text.empty()) text += words % 12 == 11 ? ". " : " ";
            text += kWords[pick(rng)];
        }
        if (c.tokenizer) {
            p->ids = c.tokenizer->encode(text, !c.target.chat, false);
        } else if (!tokenize_text(client, c.target, text, !c.target.chat, &p->ids, max_model_len, err)) {
            return false;
        }
        if (int64_t(p->ids.size()) >= c.input_len) {
            p->ids.resize(size_t(c.input_len));
            p->text = text;
            return true;
        }
    }
    *err = "could not build a prompt of " + std::to_string(c.input_len) + " tokens";
    return false;
}

// Hands out request indices and their arrival times (seconds after the start) to the clients.
class Dispatcher {
public:
    explicit Dispatcher(const Config& c) : c_(c), rng_(c.seed ^ 0xA5A5A5A5ULL) {}

    // The next request's index and arrival time; false when the run is over.
    bool next(double now_s, uint64_t* idx, double* arrival_s) {
        std::lock_guard<std::mutex> lock(mu_);
        if (c_.duration_s > 0 ? now_s >= c_.duration_s : next_idx_ >= uint64_t(c_.requests)) return false;
        if (c_.rate > 0 && std::isfinite(c_.rate)) {
            if (next_idx_ > 0) arrival_ += std::exponential_distribution<double>(c_.rate)(rng_);
            if (c_.duration_s > 0 && arrival_ >= c_.duration_s) return false;
        }
        *idx = next_idx_++;
        *arrival_s = arrival_;
        return true;
    }

private:
    const Config& c_;
    std::mutex mu_;
    std::mt19937_64 rng_;
    uint64_t next_idx_ = 0;
    double arrival_ = 0;
};

struct RunResults {
    std::mutex mu;
    std::vector<RequestResult> done;
    std::vector<std::string> errors;  // the first kMaxErrorsKept, with their request index
    int64_t failed = 0;
};

void client_loop(const Config& c, const std::vector<BenchPrompt>& prompts, Dispatcher& d, Clock::time_point t0,
                 RunResults& out) {
    auto client = make_client(c.target);
    for (;;) {
        uint64_t idx = 0;
        double arrival = 0;
        const double now_s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (!d.next(now_s, &idx, &arrival)) return;
        // Duration mode builds each prompt here, before its arrival time (so outside the timing).
        BenchPrompt own;
        RequestResult r;
        int64_t max_len = 0;
        const bool prebuilt = idx < prompts.size();
        if (prebuilt || make_prompt(*client, c, idx, &own, &max_len, &r.error)) {
            std::this_thread::sleep_until(
                t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival)));
            r = run_stream_request(*client, c.target, prebuilt ? prompts[idx] : own, c.output_len);
        }
        std::lock_guard<std::mutex> lock(out.mu);
        if (r.ok) {
            out.done.push_back(std::move(r));
        } else {
            ++out.failed;
            if (out.errors.size() < kMaxErrorsKept)
                out.errors.push_back("request " + std::to_string(idx) + ": " + r.error);
        }
    }
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
    Args args({"--help", "-h", "--json"},
              {"--url", "--requests", "--rate", "--concurrency", "--duration", "--input-len", "--output-len", "--model",
               "--api-key", "--seed", "--endpoint", "--tokenizer"});
    if (!args.parse(argc, argv, 3)) {
        std::fprintf(stderr, "kiln bench serve: %s\n%s", args.error().c_str(), kUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (!args.positional().empty()) {
        std::fprintf(stderr, "kiln bench serve: unexpected argument '%s'\n%s", args.positional()[0].c_str(), kUsage);
        return 2;
    }
    Config c;
    if (!parse_config(args, c)) return 2;

    std::string err;
    if (!wait_for_health(c.target, kHealthWaitSeconds, &err)) {
        std::fprintf(stderr, "kiln bench serve: the server at %s is not reachable: %s (is `kiln serve` running?)\n",
                     c.url.c_str(), err.c_str());
        return 1;
    }
    auto client = make_client(c.target);
    const std::string model = c.target.model.empty() ? served_model_name(*client, c.target) : c.target.model;
    // Count mode: every prompt is built before the clock starts. Duration mode: each client builds
    // its next prompt before waiting for its arrival time; prompt 0 here checks the lengths.
    std::vector<BenchPrompt> prompts(c.duration_s > 0 ? 1 : size_t(c.requests));
    int64_t max_model_len = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (!make_prompt(*client, c, i, &prompts[i], &max_model_len, &err)) {
            std::fprintf(stderr, "kiln bench serve: building prompts: %s\n", err.c_str());
            return 1;
        }
    }
    if (!c.target.chat && max_model_len > 0 && c.input_len + c.output_len > max_model_len) {
        std::fprintf(stderr,
                     "kiln bench serve: --input-len + --output-len = %lld exceeds the server's context of %lld\n",
                     (long long)(c.input_len + c.output_len), (long long)max_model_len);
        return 2;
    }
    if (c.duration_s > 0) prompts.clear();

    Dispatcher dispatcher(c);
    RunResults results;
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < c.clients; ++i)
        threads.emplace_back(client_loop, std::cref(c), std::cref(prompts), std::ref(dispatcher), t0,
                             std::ref(results));
    for (std::thread& t : threads) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();

    const int64_t completed = int64_t(results.done.size());
    char load[96];
    if (c.rate > 0 && std::isfinite(c.rate))
        std::snprintf(load, sizeof load, "Poisson, rate %g req/s, at most %d in flight", c.rate, c.clients);
    else if (c.rate > 0)
        std::snprintf(load, sizeof load, "all at once (rate inf), at most %d in flight", c.clients);
    else
        std::snprintf(load, sizeof load, "closed loop, concurrency %d", c.clients);
    nlohmann::ordered_json j;
    j["url"] = c.url;
    j["endpoint"] = c.target.chat ? "/v1/chat/completions" : "/v1/completions";
    j["model"] = model;
    j["load"] = load;
    j["concurrency"] = c.clients;
    j["request_rate"] = c.rate > 0 ? (std::isfinite(c.rate) ? nlohmann::ordered_json(c.rate) : "inf") : nullptr;
    j["input_len"] = c.input_len;
    j["output_len"] = c.output_len;
    j["seed"] = c.seed;
    add_serving_metrics(results.done, results.failed, wall, j);
    j["errors"] = results.errors;
    if (c.json)
        std::printf("%s\n", j.dump(2).c_str());
    else
        print_serving_table(j);
    for (const std::string& e : results.errors) std::fprintf(stderr, "kiln bench serve: failed: %s\n", e.c_str());
    if (results.failed > 0 || completed == 0) {
        std::fprintf(stderr, "kiln bench serve: %lld of %lld requests failed\n", (long long)results.failed,
                     (long long)(completed + results.failed));
        return 1;
    }
    return 0;
}

}  // namespace kiln::tools
