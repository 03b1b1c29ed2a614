// `kiln generate -m MODEL -p PROMPT [-n N] [-t N] [--chat] [--tokenizer FILE] [sampling flags]`: the
// prompt (with --chat: the conversation rendered by the model's chat template, tokenized like HF's
// apply_chat_template, i.e. without adding BOS/EOS) runs as one batched prefill, then one token per step until N tokens, EOS or a stop string. Tokens
// are chosen by kiln::sampling::Sampler; without --temp decoding is greedy (temperature 0), unlike
// llama.cpp's 0.8 default, so that runs are reproducible and match the greedy goldens. Text streams
// through StreamDecoder + StopChecker, so stdout gets only generated text, never half a UTF-8
// character nor any part of a stop string; load time and tokens/s go to stderr.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "model_session.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "sampling/stop_checker.h"
#include "tokenizer/chat_template.h"

namespace kiln::tools {
namespace {

constexpr const char* kGenerateUsage =
    "usage: kiln generate [-m MODEL] [-p PROMPT] [-n N] [--chat [--system TEXT]] [sampling options]\n"
    "                     [-t N] [--tokenizer FILE] [--isa ISA] [--f32-activations]\n"
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
    std::fputs(kSessionHelp, f);
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
// Range checks are SamplingParams::validate's.
bool parse_sampling(const Args& args, sampling::SamplingParams& p) {
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
    for (const std::string& v : args.get_all("--stop")) p.stop_strings.push_back(v);
    p.ignore_eos = args.has("--ignore-eos");
    return true;
}

// The prompt's ids: plain text encoded with the tokenizer's BOS/EOS rules, or with --chat the
// conversation rendered by the chat template and encoded without adding BOS/EOS (the template
// writes them), as HF apply_chat_template does.
core::Result<std::vector<int32_t>> prompt_tokens(const Args& args, const tokenizer::Tokenizer& tok) {
    const std::string prompt = args.get_either("--prompt", "-p").value_or("");
    if (!args.has("--chat")) return tok.encode(prompt);
    std::string tmpl = tok.chat_template();
    if (auto f = args.get("--chat-template")) {
        std::ifstream in(*f, std::ios::binary);
        if (!in) return core::error(core::StatusCode::kNotFound) << "cannot read chat template '" << *f << "'";
        std::stringstream ss;
        ss << in.rdbuf();
        tmpl = ss.str();
    }
    if (tmpl.empty()) {
        return core::error(core::StatusCode::kNotFound)
               << "--chat: the model has no chat template; pass --chat-template FILE";
    }
    std::vector<tokenizer::ChatMessage> messages;
    if (auto sys = args.get("--system")) messages.push_back({"system", *sys});
    messages.push_back({"user", prompt});
    const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
    KILN_ASSIGN_OR_RETURN(std::string text, tokenizer::render_chat_template(tmpl, messages, true, bos, eos));
    return tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
}

}  // namespace

int cmd_generate(int argc, char** argv) {
    Args args(merged({"--help", "-h", "--ignore-eos", "--chat"}, kSessionFlags),
              merged({"-p", "--prompt", "-n", "--max-tokens", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--frequency-penalty", "--presence-penalty", "--seed", "--stop", "--system", "--chat-template"}, kSessionOptions));
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
    SessionOptions session_options;
    if (!parse_session_options(args, "generate", session_options)) return 2;
    sampling::SamplingParams params;
    if (!parse_sampling(args, params)) return 2;
    params.max_tokens = max_tokens;
    // Range checks before the (possibly slow) model load; token ids are checked again by Sampler::create.
    if (core::Status st = params.validate(INT32_MAX); !st.is_ok()) {
        std::fprintf(stderr, "kiln generate: %s\n", st.to_string().c_str());
        return 2;
    }
    const auto t_load = Clock::now();
    auto session = open_model_session(session_options);
    if (!session) {
        std::fprintf(stderr, "kiln generate: %s\n", session.status().to_string().c_str());
        return 1;
    }
    const double load_s = since(t_load);
    ModelSession& s = **session;
    const model::ModelConfig& c = s.model->config();
    auto prompt_ids = prompt_tokens(args, *s.tokenizer);
    if (!prompt_ids) {
        std::fprintf(stderr, "kiln generate: %s\n", prompt_ids.status().to_string().c_str());
        return 1;
    }
    std::vector<int32_t> ids = std::move(*prompt_ids);
    if (ids.empty() && s.tokenizer->bos_id() >= 0) ids.push_back(s.tokenizer->bos_id());
    if (ids.empty()) {
        std::fprintf(stderr, "kiln generate: empty prompt and the tokenizer has no BOS token\n");
        return 1;
    }
    auto sampler = sampling::Sampler::create(params, int32_t(c.vocab_size), int32_t(ids.size()));
    if (!sampler) {
        std::fprintf(stderr, "kiln generate: %s\n", sampler.status().to_string().c_str());
        return 2;
    }
    std::vector<int32_t> eos_ids;
    if (s.tokenizer->eos_id() >= 0) eos_ids.push_back(s.tokenizer->eos_id());
    sampling::StopChecker stop(params, eos_ids);
    std::vector<int32_t> history = ids;  // prompt + generated, for the penalties
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
        const int32_t id = sampler->sample(std::span<float>(logits->data(), size_t(c.vocab_size)), history);
        if (stop.is_stop_token(id)) break;
        history.push_back(id);
        sampling::StopChecker::Output out = stop.append(stream.push(id));
        std::fwrite(out.text.data(), 1, out.text.size(), stdout);
        std::fflush(stdout);
        if (out.stopped) {
            ++generated;
            break;
        }
        next = {id};
    }
    std::string tail = stop.stopped() ? std::string() : stop.append(stream.flush()).text;
    if (!stop.stopped()) tail += stop.finish();
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
