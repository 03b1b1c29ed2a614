// `kiln generate -m MODEL -p PROMPT [-n N] [-t N] [--chat] [--tokenizer FILE] [sampling flags] [engine
// options]`: one request through the public kiln::Engine (include/kiln/engine.h), like any client: the
// prompt (with --chat: the conversation rendered by the model's chat template, tokenized like HF's
// apply_chat_template, i.e. without adding BOS/EOS) is prefilled in chunks of --max-batch-tokens, then
// one token per step until N tokens, EOS, a stop string or the context's end. Without --temp decoding
// is greedy (temperature 0), unlike llama.cpp's 0.8 default, so that runs are reproducible and match
// the greedy goldens. The engine streams text that is never half a UTF-8 character nor any part of a
// stop string; stdout gets only that text, load time and tokens/s go to stderr.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine_options.h"
#include "kiln/engine.h"
#include "model_session.h"
#include "structured_flags.h"

namespace kiln::tools {
namespace {

constexpr const char* kGenerateUsage =
    "usage: kiln generate [-m MODEL] [-p PROMPT] [-n N] [--chat [--system TEXT]] [sampling options]\n"
    "                     [-t N] [--tokenizer FILE] [--isa ISA] [--f32-activations] [--device cuda]\n"
    "\n"
    "Continues PROMPT (default: empty, BOS only) by up to N tokens (default 256), stopping at EOS or\n"
    "a stop string; with --chat, answers PROMPT as the user's message in the model's chat format.\n"
    "Greedy unless --temp is given. Text goes to standard output, timings to standard error.\n"
    "\n"
    "  -p, --prompt PROMPT    the text to continue\n"
    "  -n, --max-tokens N     tokens to generate (default 256)\n"
    "  --chat                 wrap PROMPT as a user message in the model's chat template\n"
    "  --system TEXT          with --chat: a system message first (else the template's default)\n"
    "  --chat-template FILE   with --chat: a Jinja chat template to use instead of the model's\n"
    "\n"
    "sampling (vLLM / OpenAI semantics, see src/sampling/sampler.h):\n"
    "  --temp T               temperature (default 0 = greedy argmax)\n"
    "  --top-k K              keep the K most likely tokens (0 = off)\n"
    "  --top-p P              nucleus sampling, (0, 1] (1 = off)\n"
    "  --min-p P              drop tokens below P * max prob, [0, 1] (0 = off)\n"
    "  --repeat-penalty R     repetition penalty over prompt + output (1 = off)\n"
    "  --frequency-penalty F  [-2, 2], over generated tokens\n"
    "  --presence-penalty F   [-2, 2], over generated tokens\n"
    "  --seed S               RNG seed (default: random)\n"
    "  --stop STR             stop before this string (repeatable)\n"
    "  --ignore-eos           keep generating past EOS\n";

void print_usage(std::FILE* f) {
    std::fputs(kGenerateUsage, f);
    std::fputs("\n", f);
    std::fputs(kStructuredHelp, f);
    std::fputs(kSessionHelp, f);
    std::fputs(kEngineHelp, f);
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Whole-string numbers only; nullopt on trailing junk or overflow.
std::optional<float> parse_float(const std::string& s) {
    try {
        size_t used = 0;
        float v = std::stof(s, &used);
        if (used != s.size()) return std::nullopt;
        return v;
    } catch (...) {
        return std::nullopt;
    }
}

std::optional<int64_t> parse_int(const std::string& s) {
    try {
        size_t used = 0;
        long long v = std::stoll(s, &used);
        if (used != s.size()) return std::nullopt;
        return int64_t(v);
    } catch (...) {
        return std::nullopt;
    }
}

// Fills the sampling fields of `p` from the flags; false (message printed) on a malformed number.
// Range checks are kiln::validate_sampling_params's.
bool parse_sampling(const Args& args, SamplingParams& p) {
    p.temperature = 0.0f;  // greedy unless --temp
    const struct {
        const char* flag;
        float* dst;
    } floats[] = {{"--temp", &p.temperature},
                  {"--top-p", &p.top_p},
                  {"--min-p", &p.min_p},
                  {"--repeat-penalty", &p.repetition_penalty},
                  {"--frequency-penalty", &p.frequency_penalty},
                  {"--presence-penalty", &p.presence_penalty}};
    for (const auto& f : floats) {
        auto v = args.get(f.flag);
        if (!v) continue;
        auto x = parse_float(*v);
        if (!x) {
            std::fprintf(stderr, "kiln generate: %s needs a number, got '%s'\n", f.flag, v->c_str());
            return false;
        }
        *f.dst = *x;
    }
    if (auto v = args.get("--top-k")) {
        auto x = parse_int(*v);
        if (!x || *x < INT32_MIN || *x > INT32_MAX) {
            std::fprintf(stderr, "kiln generate: --top-k needs an integer, got '%s'\n", v->c_str());
            return false;
        }
        p.top_k = int32_t(*x);
    }
    if (auto v = args.get("--seed")) {
        try {
            size_t used = 0;
            unsigned long long x = std::stoull(*v, &used);
            if (used != v->size() || v->find('-') != std::string::npos) throw 0;
            p.seed = x;
            p.has_seed = true;
        } catch (...) {
            std::fprintf(stderr, "kiln generate: --seed needs a non-negative integer, got '%s'\n", v->c_str());
            return false;
        }
    }
    for (const std::string& v : args.get_all("--stop")) p.stop.push_back(v);
    p.ignore_eos = args.has("--ignore-eos");
    return true;
}

// The prompt's ids: plain text encoded with the tokenizer's BOS/EOS rules, or with --chat the
// conversation rendered by the chat template and encoded without adding BOS/EOS (the template
// writes them), as HF apply_chat_template does.
bool prompt_tokens(const Args& args, const Engine& engine, std::vector<int32_t>& ids) {
    const std::string prompt = args.get_either("--prompt", "-p").value_or("");
    if (!args.has("--chat")) {
        ids = engine.tokenize(prompt);
        return true;
    }
    std::string tmpl;
    if (auto f = args.get("--chat-template")) {
        std::ifstream in(*f, std::ios::binary);
        if (!in) {
            std::fprintf(stderr, "kiln generate: cannot read chat template '%s'\n", f->c_str());
            return false;
        }
        std::stringstream ss;
        ss << in.rdbuf();
        tmpl = ss.str();
    }
    std::vector<ChatMessage> messages;
    if (auto sys = args.get("--system")) messages.push_back({"system", *sys});
    messages.push_back({"user", prompt});
    std::string text;
    Status st = engine.apply_chat_template(messages, true, tmpl, &text);
    if (!st.ok()) {
        std::fprintf(stderr, "kiln generate: --chat: %s\n", st.message.c_str());
        return false;
    }
    ids = engine.tokenize(text, /*add_special=*/false, /*parse_special=*/true);
    return true;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
    std::set<std::string> flags = merged({"--help", "-h", "--ignore-eos", "--chat"}, engine_flags());
    std::set<std::string> opts =
        merged({"-p", "--prompt", "-n", "--max-tokens", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                "--frequency-penalty", "--presence-penalty", "--seed", "--stop", "--system", "--chat-template"},
               engine_options());
    flags.insert(std::begin(kStructuredFlags), std::end(kStructuredFlags));
    opts.insert(std::begin(kStructuredOptions), std::end(kStructuredOptions));
    Args args(flags, opts);
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln generate: %s\n", args.error().c_str());
        print_usage(stderr);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        print_usage(stdout);
        return 0;
    }
    if (!args.positional().empty()) {
        print_usage(stderr);
        return 2;
    }
    if (!args.has("--chat") && (args.get("--system") || args.get("--chat-template"))) {
        std::fprintf(stderr, "kiln generate: --system and --chat-template need --chat\n");
        return 2;
    }
    int max_tokens = 256;
    if (auto n = args.get_either("--max-tokens", "-n")) {
        auto v = parse_threads(*n);
        if (!v) {
            std::fprintf(stderr, "kiln generate: -n needs a positive integer, got '%s'\n", n->c_str());
            return 2;
        }
        max_tokens = *v;
    }
    SamplingParams params;
    if (!parse_sampling(args, params)) return 2;
    params.max_tokens = max_tokens;
    std::string so_error;
    if (!parse_structured_flags(args, params.structured, &so_error)) {
        std::fprintf(stderr, "kiln generate: %s\n", so_error.c_str());
        return 2;
    }
    // Range checks before the (possibly slow) model load; token ids are checked again by Sampler::create.
    if (Status st = validate_sampling_params(params); !st.ok()) {
        std::fprintf(stderr, "kiln generate: %s\n", st.message.c_str());
        return 2;
    }
    EngineOptions options;
    if (!parse_engine_options(args, "generate", options)) return 2;
    if (const int rc = run_if_worker(options, "generate"); rc >= 0) return rc;
    if (!args.get("--max-seqs")) options.max_seqs = 1;  // one request: size the default KV budget for it
    const auto t_load = Clock::now();
    Status st;
    std::unique_ptr<Engine> engine = Engine::create(options, &st);
    if (!engine) {
        std::fprintf(stderr, "kiln generate: %s\n", st.message.c_str());
        return 1;
    }
    const double load_s = since(t_load);
    if (engine->model_info().device != "cpu") std::fprintf(stderr, "%s\n", engine->model_info().device.c_str());
    std::vector<int32_t> ids;
    if (!prompt_tokens(args, *engine, ids)) return 1;
    const ModelInfo& info = engine->model_info();
    if (ids.empty() && info.bos_id >= 0) ids.push_back(info.bos_id);
    if (ids.empty()) {
        std::fprintf(stderr, "kiln generate: empty prompt and the tokenizer has no BOS token\n");
        return 1;
    }
    if (int64_t(ids.size()) >= info.max_model_len) {
        std::fprintf(stderr, "kiln generate: the prompt has %zu tokens; the context holds %lld\n", ids.size(),
                     (long long)info.max_model_len);
        return 1;
    }
    if (int64_t(ids.size()) + params.max_tokens > info.max_model_len) {  // stop at the context, as llama.cpp does
        params.max_tokens = int32_t(info.max_model_len - int64_t(ids.size()));
        std::fprintf(stderr, "kiln generate: -n lowered to %d to fit the context of %lld tokens\n", params.max_tokens,
                     (long long)info.max_model_len);
    }
    Request req;
    req.prompt_ids = ids;
    req.sampling = params;
    std::promise<RequestOutput> done;
    double ttft = 0;
    req.on_output = [&](const RequestOutput& o) {  // on the engine's thread
        std::fwrite(o.text.data(), 1, o.text.size(), stdout);
        std::fflush(stdout);
        if (!o.token_ids.empty() && ttft == 0) ttft = o.ttft_seconds;
        if (o.finished) done.set_value(o);
    };
    std::future<RequestOutput> result = done.get_future();
    const auto t_gen = Clock::now();
    st = engine->add_request(std::move(req), nullptr);
    if (!st.ok()) {
        std::fprintf(stderr, "kiln generate: %s\n", st.message.c_str());
        return 1;
    }
    const RequestOutput last = result.get();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (last.finish_reason == FinishReason::kError) {
        std::fprintf(stderr, "kiln generate: %s\n", last.error.c_str());
        return 1;
    }
    const double gen_s = since(t_gen);
    const double decode_s = gen_s - ttft;
    const int64_t generated = last.completion_tokens;
    std::fprintf(stderr, "load %.3f s; prompt %zu tokens in %.3f s; %lld tokens generated in %.3f s (%.1f tokens/s)\n",
                 load_s, ids.size(), ttft, (long long)generated, gen_s,
                 generated > 1 && decode_s > 0 ? double(generated - 1) / decode_s : 0.0);
    if (!options.speculative.empty()) std::fprintf(stderr, "%s\n", spec_summary(engine->stats()).c_str());
    return 0;
}

}  // namespace kiln::tools
