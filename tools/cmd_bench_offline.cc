// `kiln bench offline -m MODEL --requests N --input-len I --output-len O [--shared-prefix P] [engine
// options] [--json]`: the serving engine's throughput with every request queued at once (vLLM's
// `benchmark_throughput` / `vllm bench throughput` shape). Prompts are seeded random token ids (the
// first P shared by all), decoding is greedy with EOS ignored, so every request yields exactly O
// tokens.
// Reports requests/s, output tokens/s, TTFT and TPOT (mean, p50, p99), the prefix-cache hit rate,
// peak KV blocks in use, and the share of step time spent scheduling and preparing batches.
// With --shared-prefix P > 0 it first runs a cold/warm probe: one request alone (its prefix not
// cached: cold TTFT), then another with the same prefix and a new suffix (warm TTFT); the main
// run follows, its prefix cache already warm. TTFT = from add_request to the first token; TPOT =
// (last token time - first token time) / (O - 1).
// With --prompts FILE the prompts are real text (JSON lines with a "prompt"; --chat wraps each in the
// model's chat template), requests cycling through them. With --spec the same requests also run
// without drafts (per-request opt-out, same engine), the two runs alternating --reps times: it reports
// both throughputs, the speed-up, the acceptance rate and tokens per verifying step, and whether the
// greedy outputs agree token for token.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine_options.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: kiln bench offline [-m MODEL] [--requests N] [--input-len I] [--output-len O]\n"
    "                          [--shared-prefix P] [--seed S] [--prompts FILE [--chat]] [--stop-at-eos]\n"
    "                          [--reps R] [--json] [engine options]\n"
    "\n"
    "Queues N requests of I prompt tokens (seeded random ids; the first P shared by all) at once and\n"
    "generates O tokens for each (greedy, EOS ignored). Reports requests/s, output tokens/s, TTFT and\n"
    "TPOT (mean/p50/p99), prefix-cache hit rate, peak KV blocks and the scheduling share of step time.\n"
    "With P > 0, first measures the TTFT of one request alone with a cold and then a warm prefix cache.\n"
    "\n"
    "  --requests N       requests (default 16)\n"
    "  --input-len I      prompt tokens per request (default 128)\n"
    "  --output-len O     tokens generated per request (default 128)\n"
    "  --shared-prefix P  leading prompt tokens common to every request (default 0)\n"
    "  --seed S           prompt token seed (default 0)\n"
    "  --prompts FILE     real prompts instead: JSON lines, each with a \"prompt\" string; the requests\n"
    "                     cycle through them (--input-len and --shared-prefix do not apply)\n"
    "  --chat             wrap each prompt as a user message in the model's chat template\n"
    "  --stop-at-eos      end a request at EOS (default: EOS ignored, exactly O tokens each)\n"
    "  --reps R           timed runs, the median reported (default 1); with --spec each rep runs the\n"
    "                     requests without drafts and then with them (same engine, same requests)\n"
    "  --json             one JSON object on stdout\n";

struct Timing {
    Clock::time_point added, first, last;
    int64_t tokens = 0;
    std::vector<int32_t> ids;
    bool done = false;
    std::string error;
};

struct BatchOptions {
    int32_t output_len = 0;
    bool stop_at_eos = false;
    bool speculate = true;
};

// Prompts of a JSON-lines file ({"prompt": "..."} per line), tokenized (in the chat template with
// `chat`). Empty after printing the error.
std::vector<std::vector<int32_t>> read_prompts(const std::string& path, bool chat, const Engine& engine) {
    std::ifstream in(path);
    if (!in) {
        std::fprintf(stderr, "kiln bench offline: cannot read --prompts '%s'\n", path.c_str());
        return {};
    }
    std::vector<std::vector<int32_t>> out;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
            std::fprintf(stderr, "kiln bench offline: %s line %d: expected {\"prompt\": \"...\"}\n", path.c_str(), n);
            return {};
        }
        std::string text = j["prompt"].get<std::string>();
        if (chat) {
            std::string wrapped;
            Status st = engine.apply_chat_template({{"user", text}}, true, "", &wrapped);
            if (!st.ok()) {
                std::fprintf(stderr, "kiln bench offline: --chat: %s\n", st.message.c_str());
                return {};
            }
            out.push_back(engine.tokenize(wrapped, /*add_special=*/false, /*parse_special=*/true));
        } else {
            out.push_back(engine.tokenize(text));
        }
        if (out.back().empty()) out.pop_back();
    }
    if (out.empty()) std::fprintf(stderr, "kiln bench offline: no prompts in '%s'\n", path.c_str());
    return out;
}

struct Stats {
    double mean = 0, p50 = 0, p99 = 0;
};

Stats summarize(std::vector<double> v) {
    Stats s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    s.mean = sum / double(v.size());
    auto pct = [&](double p) {
        return v[size_t(std::min<double>(double(v.size() - 1), p * double(v.size() - 1) + 0.5))];
    };
    s.p50 = pct(0.50);
    s.p99 = pct(0.99);
    return s;
}

// Runs `prompts` through the engine, all queued at once; fills one Timing per prompt. False after
// printing the error.
bool run_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const BatchOptions& bo,
               std::vector<Timing>& timings) {
    std::mutex mu;
    std::condition_variable cv;
    size_t remaining = prompts.size();
    timings.assign(prompts.size(), Timing{});
    std::vector<Request> reqs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        Request& r = reqs[i];
        r.prompt_ids = prompts[i];
        r.sampling.temperature = 0;
        r.sampling.max_tokens = bo.output_len;
        r.sampling.ignore_eos = !bo.stop_at_eos;
        r.speculate = bo.speculate;
        Timing* t = &timings[i];
        r.on_output = [&, t](const RequestOutput& o) {
            const Clock::time_point now = Clock::now();
            std::lock_guard<std::mutex> lock(mu);
            if (!o.token_ids.empty()) {
                if (t->tokens == 0) t->first = now;
                t->last = now;
                t->tokens += int64_t(o.token_ids.size());
                t->ids.insert(t->ids.end(), o.token_ids.begin(), o.token_ids.end());
            }
            if (o.finished) {
                if (o.finish_reason == FinishReason::kError) t->error = o.error;
                t->done = true;
                if (--remaining == 0) cv.notify_all();
            }
        };
    }
    {
        std::lock_guard<std::mutex> lock(mu);
        const Clock::time_point now = Clock::now();
        for (Timing& t : timings) t.added = now;
    }
    // All at once: the requests enter the engine in one step, not one per step.
    Status st = engine.add_requests(std::move(reqs), nullptr);
    if (!st.ok()) {
        std::fprintf(stderr, "kiln bench offline: %s\n", st.message.c_str());
        return false;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
    for (const Timing& t : timings) {
        if (!t.error.empty()) {
            std::fprintf(stderr, "kiln bench offline: %s\n", t.error.c_str());
            return false;
        }
    }
    return true;
}

double ms(Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
}

// One timed run of the requests: wall time, tokens, latencies and the engine's counters over it.
struct Measured {
    double wall = 0;
    int64_t out_tokens = 0;
    Stats ttft, tpot;
    EngineStats before, after;
    std::vector<std::vector<int32_t>> outputs;
    double tokens_per_s() const { return wall > 0 ? double(out_tokens) / wall : 0.0; }
};

std::optional<Measured> measure(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                const BatchOptions& bo) {
    Measured m;
    std::vector<Timing> timings;
    m.before = engine.stats();
    const Clock::time_point t0 = Clock::now();
    if (!run_batch(engine, prompts, bo, timings)) return std::nullopt;
    m.wall = std::chrono::duration<double>(Clock::now() - t0).count();
    m.after = engine.stats();
    std::vector<double> ttft, tpot;
    for (Timing& t : timings) {
        m.out_tokens += t.tokens;
        ttft.push_back(ms(t.first - t.added));
        if (t.tokens > 1) tpot.push_back(ms(t.last - t.first) / double(t.tokens - 1));
        m.outputs.push_back(std::move(t.ids));
    }
    m.ttft = summarize(ttft);
    m.tpot = summarize(tpot);
    return m;
}

// The run with the median throughput.
const Measured& median_run(std::vector<Measured>& runs) {
    std::sort(runs.begin(), runs.end(),
              [](const Measured& a, const Measured& b) { return a.tokens_per_s() < b.tokens_per_s(); });
    return runs[runs.size() / 2];
}

}  // namespace

int cmd_bench_offline(int argc, char** argv) {
    Args args(merged({"--help", "-h", "--json", "--chat", "--stop-at-eos"}, engine_flags()),
              merged({"--requests", "--input-len", "--output-len", "--shared-prefix", "--seed", "--prompts", "--reps"},
                     engine_options()));
    if (!args.parse(argc, argv, 3)) {
        std::fprintf(stderr, "kiln bench offline: %s\n%s%s", args.error().c_str(), kUsage, kEngineHelp);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kUsage, stdout);
        std::fputs(kSessionHelp, stdout);
        std::fputs(kEngineHelp, stdout);
        return 0;
    }
    if (!args.positional().empty()) {
        std::fprintf(stderr, "kiln bench offline: unexpected argument '%s'\n", args.positional()[0].c_str());
        return 2;
    }
    const auto n_req = int_option(args, "bench offline", "--requests", 16, 1, 100000);
    const auto in_len = int_option(args, "bench offline", "--input-len", 128, 1, 1 << 20);
    const auto out_len = int_option(args, "bench offline", "--output-len", 128, 1, 1 << 20);
    const auto prefix = int_option(args, "bench offline", "--shared-prefix", 0, 0, 1 << 20);
    const auto seed = int_option(args, "bench offline", "--seed", 0, 0, INT32_MAX);
    const auto reps = int_option(args, "bench offline", "--reps", 1, 1, 1000);
    if (!n_req || !in_len || !out_len || !prefix || !seed || !reps) return 2;
    if (args.has("--chat") && !args.get("--prompts")) {
        std::fprintf(stderr, "kiln bench offline: --chat needs --prompts\n");
        return 2;
    }
    if (*prefix >= *in_len) {
        std::fprintf(stderr, "kiln bench offline: --shared-prefix must be smaller than --input-len\n");
        return 2;
    }
    EngineOptions options;
    if (!parse_engine_options(args, "bench offline", options)) return 2;
    if (const int rc = run_if_worker(options, "bench offline"); rc >= 0) return rc;
    if (!args.get("--max-model-len")) options.max_model_len = 0;
    Status st;
    std::unique_ptr<Engine> engine = Engine::create(options, &st);
    if (!engine) {
        std::fprintf(stderr, "kiln bench offline: %s\n", st.message.c_str());
        return 1;
    }
    const ModelInfo& info = engine->model_info();
    std::vector<std::vector<int32_t>> file_prompts;
    if (auto f = args.get("--prompts")) {
        file_prompts = read_prompts(*f, args.has("--chat"), *engine);
        if (file_prompts.empty()) return 2;
    } else if (*in_len + *out_len > info.max_model_len) {
        std::fprintf(stderr, "kiln bench offline: input + output length %lld exceeds the context of %lld\n",
                     (long long)(*in_len + *out_len), (long long)info.max_model_len);
        return 2;
    }
    // Prompts: ids drawn away from the first few (often special) tokens.
    std::mt19937_64 rng{uint64_t(*seed)};
    const int32_t lo = std::min<int32_t>(16, int32_t(info.vocab_size) - 1);
    std::uniform_int_distribution<int32_t> pick(lo, int32_t(info.vocab_size) - 1);
    std::vector<int32_t> shared(static_cast<size_t>(*prefix));
    for (int32_t& t : shared) t = pick(rng);
    auto make_prompt = [&] {
        std::vector<int32_t> p = shared;
        while (int64_t(p.size()) < *in_len) p.push_back(pick(rng));
        return p;
    };
    nlohmann::ordered_json j;
    j["model"] = info.path;
    j["threads"] = info.threads;
    j["requests"] = *n_req;
    j["input_len"] = *in_len;
    j["output_len"] = *out_len;
    j["shared_prefix"] = *prefix;
    std::vector<Timing> timings;
    if (*prefix > 0 && file_prompts.empty()) {  // cold / warm TTFT probe
        BatchOptions one;
        one.output_len = 1;
        if (!run_batch(*engine, {make_prompt()}, one, timings)) return 1;
        const double cold = ms(timings[0].first - timings[0].added);
        if (!run_batch(*engine, {make_prompt()}, one, timings)) return 1;
        const double warm = ms(timings[0].first - timings[0].added);
        j["ttft_cold_ms"] = cold;
        j["ttft_warm_ms"] = warm;
        j["ttft_warm_over_cold"] = cold > 0 ? warm / cold : 0.0;
    }
    std::vector<std::vector<int32_t>> prompts;
    if (file_prompts.empty()) {
        for (int64_t i = 0; i < *n_req; ++i) prompts.push_back(make_prompt());
    } else {
        for (int64_t i = 0; i < *n_req; ++i) prompts.push_back(file_prompts[size_t(i) % file_prompts.size()]);
        int64_t in_tokens = 0;
        for (const auto& p : prompts) {
            in_tokens += int64_t(p.size());
            if (int64_t(p.size()) + *out_len > info.max_model_len) {
                std::fprintf(stderr, "kiln bench offline: a prompt of %zu tokens + %lld exceeds the context of %lld\n",
                             p.size(), (long long)*out_len, (long long)info.max_model_len);
                return 2;
            }
        }
        j["input_len"] = double(in_tokens) / double(prompts.size());  // mean
    }
    BatchOptions bo;
    bo.output_len = int32_t(*out_len);
    bo.stop_at_eos = args.has("--stop-at-eos");
    const bool spec = !options.speculative.empty();
    std::vector<Measured> runs, base_runs;
    for (int64_t r = 0; r < *reps; ++r) {
        if (spec) {  // the same requests without drafts first, in the same engine
            BatchOptions off = bo;
            off.speculate = false;
            auto m = measure(*engine, prompts, off);
            if (!m) return 1;
            base_runs.push_back(std::move(*m));
        }
        auto m = measure(*engine, prompts, bo);
        if (!m) return 1;
        runs.push_back(std::move(*m));
    }
    const Measured& run = median_run(runs);
    const EngineStats& before = run.before;
    const EngineStats& after = run.after;
    const double wall = run.wall;
    const int64_t out_tokens = run.out_tokens;
    const Stats a = run.ttft, b = run.tpot;
    const int64_t queried = after.prefix_query_tokens - before.prefix_query_tokens;
    const int64_t hits = after.prefix_hit_tokens - before.prefix_hit_tokens;
    const double sched_s = after.schedule_seconds - before.schedule_seconds;
    const double step_s =
        sched_s + (after.forward_seconds - before.forward_seconds) + (after.sample_seconds - before.sample_seconds);
    int64_t in_total = 0;
    for (const auto& p : prompts) in_total += int64_t(p.size());
    j["max_seqs"] = options.max_seqs;
    j["max_batch_tokens"] = options.max_batch_tokens;
    j["reps"] = *reps;
    j["seconds"] = wall;
    j["requests_per_s"] = double(*n_req) / wall;
    j["output_tokens_per_s"] = double(out_tokens) / wall;
    j["total_tokens_per_s"] = double(out_tokens + in_total) / wall;
    j["ttft_ms_mean"] = a.mean;
    j["ttft_ms_p50"] = a.p50;
    j["ttft_ms_p99"] = a.p99;
    j["tpot_ms_mean"] = b.mean;
    j["tpot_ms_p50"] = b.p50;
    j["tpot_ms_p99"] = b.p99;
    j["prefix_hit_rate"] = queried > 0 ? double(hits) / double(queried) : 0.0;
    j["peak_kv_blocks_in_use"] = after.peak_kv_blocks_in_use;
    j["kv_blocks_total"] = after.kv_blocks_total;
    j["kv_block_size"] = after.block_size;
    j["steps"] = after.num_steps - before.num_steps;
    j["preemptions"] = after.num_preemptions - before.num_preemptions;
    j["schedule_pct_of_step"] = step_s > 0 ? 100.0 * sched_s / step_s : 0.0;
    if (after.tensor_parallel > 1 || after.pipeline_parallel > 1) {  // docs/parallel.md: bytes per token, formula
        const double coll_s = after.collective_seconds - before.collective_seconds;
        // Tokens through the model: the prompt tokens the prefix cache did not serve and every output
        // token but each request's last (sampled, never run); preemption's recomputed tokens come on top.
        const int64_t tokens = in_total - hits + out_tokens - *n_req;
        j["tensor_parallel"] = after.tensor_parallel;
        j["pipeline_parallel"] = after.pipeline_parallel;
        j["collective_calls"] = after.collective_calls - before.collective_calls;
        j["collective_bytes_per_token"] =
            tokens > 0 ? double(after.collective_bytes - before.collective_bytes) / double(tokens) : 0.0;
        // docs/parallel.md, rank 0's part: two all-reduces per layer of its stage of a token's hidden
        // state in f32 and one of its embedding (tensor parallel); one pipeline stage: each sampled row's share of the logits
        // (ceil(V / T) floats) all-gathered; several: the token's hidden state sent to stage 1 and
        // each sampled row's logits (V floats) received from the last stage.
        const int64_t n = after.tensor_parallel, pp = after.pipeline_parallel, H = info.hidden_size;
        const int64_t layers = (info.num_layers + pp - 1) / pp, V = info.vocab_size;
        double formula = n > 1 ? double(tokens * (2 * layers + 1) * H * 4) : 0.0;  // + the embeddings' all-reduce
        formula += pp > 1 ? double(tokens * H * 4 + out_tokens * V * 4) : double(out_tokens * ((V + n - 1) / n) * 4);
        // A mixture of experts moves its experts' outputs instead of ffn_down's all-reduce (padded
        // all-to-all blocks: data-dependent), so the formula is for dense models only.
        if (info.num_experts == 0) j["collective_bytes_per_token_formula"] = tokens > 0 ? formula / double(tokens) : 0.0;
        j["collective_pct_of_step"] = step_s > 0 ? 100.0 * coll_s / step_s : 0.0;
    }
    if (spec) {
        const Measured& base = median_run(base_runs);
        const int64_t drafted = after.spec_draft_tokens - before.spec_draft_tokens;
        const int64_t accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
        const int64_t verifies = after.spec_verify_steps - before.spec_verify_steps;
        bool same = true;  // greedy: drafts change nothing (every rep, every request)
        for (const Measured& with : runs)
            for (const Measured& without : base_runs) same = same && with.outputs == without.outputs;
        j["spec"] = options.speculative;
        j["num_draft"] = options.num_draft;
        j["without_spec_output_tokens_per_s"] = base.tokens_per_s();
        j["without_spec_tpot_ms_mean"] = base.tpot.mean;
        j["spec_speedup"] = base.tokens_per_s() > 0 ? run.tokens_per_s() / base.tokens_per_s() : 0.0;
        j["spec_decode_speedup"] = run.tpot.mean > 0 ? base.tpot.mean / run.tpot.mean : 0.0;  // TPOT ratio
        j["spec_draft_tokens"] = drafted;
        j["spec_accepted_tokens"] = accepted;
        j["spec_acceptance_rate"] = drafted > 0 ? double(accepted) / double(drafted) : 0.0;
        j["spec_tokens_per_verify_step"] = verifies > 0 ? 1.0 + double(accepted) / double(verifies) : 0.0;
        j["spec_outputs_identical"] = same;
    }
    if (args.has("--json")) {
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("%s: %lld requests x (%.0f in + %s%lld out) tokens, %d threads, max-seqs %d\n", info.path.c_str(),
                (long long)*n_req, j["input_len"].get<double>(), bo.stop_at_eos ? "up to " : "", (long long)*out_len,
                info.threads, options.max_seqs);
    if (j.contains("ttft_cold_ms"))
        std::printf("prefix probe (%lld shared tokens): TTFT cold %.1f ms, warm %.1f ms (%.1f%%)\n", (long long)*prefix,
                    j["ttft_cold_ms"].get<double>(), j["ttft_warm_ms"].get<double>(),
                    100.0 * j["ttft_warm_over_cold"].get<double>());
    std::printf("%.2f requests/s, %.1f output tokens/s (%.3f s%s)\n", j["requests_per_s"].get<double>(),
                j["output_tokens_per_s"].get<double>(), wall, *reps > 1 ? ", median run" : "");
    if (spec)
        std::printf(
            "speculative (%s, up to %d drafts): %.2fx the %.1f output tokens/s without drafts (decode: TPOT %.2f ms "
            "vs %.2f, %.2fx); %lld drafts, %.1f%% accepted, %.2f tokens per verifying step; outputs %s\n",
            options.speculative.c_str(), options.num_draft, j["spec_speedup"].get<double>(),
            j["without_spec_output_tokens_per_s"].get<double>(), b.mean, j["without_spec_tpot_ms_mean"].get<double>(),
            j["spec_decode_speedup"].get<double>(), (long long)j["spec_draft_tokens"].get<int64_t>(),
            100.0 * j["spec_acceptance_rate"].get<double>(), j["spec_tokens_per_verify_step"].get<double>(),
            j["spec_outputs_identical"].get<bool>() ? "identical" : "DIFFER");
    std::printf("TTFT ms mean %.1f p50 %.1f p99 %.1f; TPOT ms mean %.2f p50 %.2f p99 %.2f\n", a.mean, a.p50, a.p99,
                b.mean, b.p50, b.p99);
    std::printf(
        "prefix hit rate %.1f%%; peak KV blocks %d of %d; %lld steps, %lld preemptions; scheduling %.2f%% of "
        "step time\n",
        100.0 * j["prefix_hit_rate"].get<double>(), after.peak_kv_blocks_in_use, after.kv_blocks_total,
        (long long)j["steps"].get<int64_t>(), (long long)j["preemptions"].get<int64_t>(),
        j["schedule_pct_of_step"].get<double>());
    if (j.contains("tensor_parallel")) {
        char formula[160] = "no formula for experts' all-to-all";
        if (j.contains("collective_bytes_per_token_formula"))
            std::snprintf(formula, sizeof(formula),
                          "formula %.0f: the all-reduces, hidden states and logits, without the step plans",
                          j["collective_bytes_per_token_formula"].get<double>());
        std::printf("tensor parallel %d x pipeline parallel %d: collectives %.1f%% of step time (rank 0, waiting "
                    "included); %.0f bytes per token through them (%lld calls; %s; docs/parallel.md)\n",
                    j["tensor_parallel"].get<int>(), j["pipeline_parallel"].get<int>(),
                    j["collective_pct_of_step"].get<double>(), j["collective_bytes_per_token"].get<double>(),
                    (long long)j["collective_calls"].get<int64_t>(), formula);
    }
    return 0;
}

}  // namespace kiln::tools
