// POST /v1/completions and /v1/chat/completions: parse and validate the body, encode the prompt
// (chat: the model's chat template, then tokenized without adding BOS/EOS, as HF
// apply_chat_template), check it against the context, admit it under the queue limit, run n engine
// requests and answer with one JSON body or an SSE stream (OpenAI chunk format, `data: [DONE]`).
// A stream whose client has gone (a failed write; idle streams are probed with SSE comments) aborts
// its engine requests.
#include <algorithm>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/generation.h"
#include "server/server_state.h"

namespace kiln::server {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(200);
constexpr double kKeepAliveSeconds = 2.0;

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Holds `n` of the server's in-flight slots until destroyed.
struct Slot {
    std::atomic<int64_t>& count;
    int64_t n;
    PrefixRouter* router = nullptr;  // data parallelism: the replica's load goes down with it
    int replica = -1;
    ~Slot() {
        count -= n;
        if (router) router->release(replica, n);
    }
};

// One admitted request: its engine requests, what they produced so far, and its log entry. Shared
// by the handler and (when streaming) the content provider.
struct Job {
    HttpServer::State& s;
    Endpoint ep;
    std::string model;
    int64_t created = 0;
    bool include_usage = false;
    bool logprobs = false;
    std::vector<int64_t> text_offset;  // per choice: bytes of token text so far (completions text_offset)
    Clock::time_point t0;
    std::unique_ptr<Slot> slot;
    std::unique_ptr<Generation> gen;
    std::vector<ChoiceResult> choices;
    std::vector<int64_t> completion_tokens;
    Usage usage;
    std::string error;
    RequestLogEntry log;
    bool logged = false;

    // Chat tools (docs/tools.md): kParse reads calls out of the reply in the template's format; kRequired and
    // kNamed constrained the reply to JSON (a list of {name, parameters}; the named function's arguments).
    enum class ToolMode { kOff, kParse, kRequired, kNamed } tool_mode = ToolMode::kOff;
    std::string tool_format, tools_json, tool_name;
    bool parallel_tool_calls = true;
    std::vector<std::string> raw;         // per choice: the generated text
    std::vector<size_t> sent_content;     // per choice, streaming: content bytes sent
    std::vector<size_t> sent_calls;       // per choice, streaming: tool calls sent
    std::vector<std::vector<ToolCallOut>> calls;  // per choice: the calls found so far, with their ids

    Job(HttpServer::State& st, Endpoint e) : s(st), ep(e) {}

    // The server's ids (salt + counter, hex); Mistral's templates want 9 alphanumerics in the history: the
    // counter's end, unique per server.
    std::string new_call_id() const {
        return tool_format == "mistral" ? s.new_id("").substr(15) : s.new_id("call_");
    }

    // Choice i's reply so far read as content and tool calls (final: the generation has ended). New calls get
    // ids; the ones found before keep theirs.
    ToolCallParse read_reply(int i, bool final) {
        ToolCallParse p;
        using json = nlohmann::ordered_json;
        const std::string& text = raw[i];
        if (tool_mode == ToolMode::kParse) {
            p = parse_tool_calls(tool_format, text, tools_json, final);
        } else if (final) {
            json j = json::parse(text, nullptr, false);
            if (tool_mode == ToolMode::kNamed && j.is_object()) {
                p.calls.push_back({tool_name, text});  // as generated: what a stream sent in fragments
            } else if (tool_mode == ToolMode::kRequired && j.is_array()) {
                for (const json& c : j)
                    if (c.is_object() && c.contains("name") && c["name"].is_string() && c.contains("parameters"))
                        p.calls.push_back({c["name"].get<std::string>(), c["parameters"].dump()});
            } else {
                p.content = text;  // cut short (length) before the JSON closed
            }
        }
        if (!parallel_tool_calls && p.calls.size() > 1) p.calls.resize(1);
        for (size_t k = 0; k < p.calls.size(); ++k) {
            if (k < calls[i].size()) calls[i][k].arguments = p.calls[k].arguments;  // a named call streamed first
            else calls[i].push_back({new_call_id(), p.calls[k].name, p.calls[k].arguments});
        }
        return p;
    }
    ~Job() {
        gen.reset();               // aborts what is unfinished before the slot is released
        if (!logged) finish(499);  // the client went away before the stream started
    }

    // The update's logprobs with token strings (empty unless the request asked for them).
    std::vector<LogprobEntry> resolve_logprobs(const RequestOutput& o) const {
        std::vector<LogprobEntry> out;
        if (!logprobs) return out;
        for (const TokenLogprobs& t : o.logprobs) {
            LogprobEntry e{s.engine->token_bytes(t.token_id), t.logprob, {}};
            for (const auto& [id, lp] : t.top) e.top.emplace_back(s.engine->token_bytes(id), lp);
            out.push_back(std::move(e));
        }
        return out;
    }

    // Folds one engine update in (`lps`: its resolved logprobs); returns its finish reason ("" if none).
    std::string absorb(const GenerationEvent& e, const std::vector<LogprobEntry>& lps) {
        const RequestOutput& o = e.output;
        ChoiceResult& c = choices[e.index];
        if (tool_mode == ToolMode::kOff) c.text += o.text;
        else raw[e.index] += o.text;
        c.logprobs.insert(c.logprobs.end(), lps.begin(), lps.end());
        if (!o.token_ids.empty() && log.ttft_s < 0) log.ttft_s = since(t0);
        if (o.prompt_tokens > 0) usage.prompt_tokens = o.prompt_tokens;
        if (e.index == 0) usage.cached_tokens = o.cached_tokens;
        completion_tokens[e.index] = std::max(completion_tokens[e.index], o.completion_tokens);
        if (!o.finished) return "";
        if (o.finish_reason == FinishReason::kError && error.empty())
            error = o.error.empty() ? "engine error" : o.error;
        c.finish_reason = finish_reason_name(o.finish_reason);
        if (tool_mode != ToolMode::kOff) {
            c.text = read_reply(e.index, true).content;
            c.tool_calls = calls[e.index];
            if (!c.tool_calls.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
        }
        return c.finish_reason;
    }

    void finish(int status) {
        logged = true;
        usage.completion_tokens = 0;
        for (int64_t t : completion_tokens) usage.completion_tokens += t;
        log.status = status;
        log.prompt_tokens = usage.prompt_tokens;
        log.completion_tokens = usage.completion_tokens;
        log.cached_tokens = usage.cached_tokens;
        log.total_s = since(t0);
        if (!choices.empty()) log.finish_reason = choices[0].finish_reason;
        if (log.error.empty()) log.error = error;
        s.metrics.record_request(log.path, status);
        if (status == 200)
            s.metrics.record_generation(log.ttft_s, log.total_s, log.prompt_tokens, log.completion_tokens, log.n);
        if (status == 499) s.metrics.record_client_abort();
        log_request(s, log);
    }
};

// Stops waiting when the server shuts down: its engine requests are aborted, their last events come.
std::vector<GenerationEvent> next_events(Job& job) {
    if (job.s.stopping) job.gen->abort();
    return job.gen->wait(kPoll);
}

void run_blocking(Job& job, httplib::Response& res) {
    while (!job.gen->done())
        for (const GenerationEvent& e : next_events(job)) job.absorb(e, job.resolve_logprobs(e.output));
    if (!job.error.empty()) {
        ApiError e{500, job.error, "server_error", "", ""};
        send_error(res, e);
        job.finish(500);
        return;
    }
    if (job.s.stopping) {
        send_error(res, {503, "the server is shutting down", "server_error", "", ""});
        job.finish(503);
        return;
    }
    job.usage.completion_tokens = 0;
    for (int64_t t : job.completion_tokens) job.usage.completion_tokens += t;
    res.set_content(response_json(job.ep, job.log.id, job.created, job.model, job.choices, job.usage, job.logprobs),
                    "application/json");
    job.finish(200);
}

// The whole stream, written in one call of the content provider; false when the client is gone.
bool run_stream(Job& job, httplib::DataSink& sink) {
    auto send = [&](const std::string& data) {
        const std::string ev = "data: " + data + "\n\n";
        return sink.write(ev.data(), ev.size());
    };
    auto gone = [&] {
        job.gen->abort();
        job.finish(499);
        return false;
    };
    const bool usage_null = job.include_usage;
    if (job.ep == Endpoint::kChat)
        for (int i = 0; i < int(job.choices.size()); ++i)
            if (!send(chunk_json(job.ep, job.log.id, job.created, job.model, i, "", "", true, usage_null)))
                return gone();
    Clock::time_point last_write = Clock::now();
    while (!job.gen->done()) {
        std::vector<GenerationEvent> events = next_events(job);
        if (events.empty() && since(last_write) > kKeepAliveSeconds) {  // probe an idle client
            static const char kPing[] = ": keep-alive\n\n";
            if (!sink.is_writable() || !sink.write(kPing, sizeof kPing - 1)) return gone();
            last_write = Clock::now();
        }
        for (const GenerationEvent& e : events) {
            const std::vector<LogprobEntry> lps = job.resolve_logprobs(e.output);
            const std::string reason = job.absorb(e, lps);
            if (e.output.text.empty() && reason.empty() && lps.empty()) continue;
            if (e.output.finish_reason == FinishReason::kError) continue;
            std::string text = e.output.text;
            if (job.tool_mode == Job::ToolMode::kNamed) {  // the reply is the arguments: streamed as they come
                std::vector<ToolCallOut>& calls = job.calls[e.index];
                if (job.sent_calls[e.index] == 0 && !text.empty()) {
                    if (calls.empty()) calls.push_back({job.new_call_id(), job.tool_name, ""});
                    if (!send(tool_call_delta_json(job.log.id, job.created, job.model, e.index, 0, &calls[0], "",
                                                   usage_null)))
                        return gone();
                    job.sent_calls[e.index] = 1;
                }
                if (!text.empty() && !send(tool_call_delta_json(job.log.id, job.created, job.model, e.index, 0,
                                                                nullptr, text, usage_null)))
                    return gone();
                text.clear();
            } else if (job.tool_mode != Job::ToolMode::kOff) {  // content that can no longer become a call, new calls
                const std::string content =
                    reason.empty() ? job.read_reply(e.index, false).content : job.choices[e.index].text;
                size_t& sent = job.sent_content[e.index];
                text = content.size() > sent ? content.substr(sent) : "";  // the content only grows (tool_calls.h)
                sent += text.size();
                if (job.calls[e.index].size() > job.sent_calls[e.index]) {
                    if (!text.empty() &&
                        !send(chunk_json(job.ep, job.log.id, job.created, job.model, e.index, text, "", false, usage_null)))
                        return gone();
                    text.clear();
                    if (!send(tool_call_chunk_json(job.log.id, job.created, job.model, e.index, job.calls[e.index],
                                                   job.sent_calls[e.index], usage_null)))
                        return gone();
                    job.sent_calls[e.index] = job.calls[e.index].size();
                }
            }
            LogprobsPart part{job.logprobs ? &lps : nullptr, job.text_offset[e.index]};
            for (const LogprobEntry& l : lps) job.text_offset[e.index] += int64_t(l.token.size());
            if (text.empty() && reason.empty() && lps.empty()) continue;
            if (!send(chunk_json(job.ep, job.log.id, job.created, job.model, e.index, text, reason, false, usage_null,
                                 part)))
                return gone();
            last_write = Clock::now();
        }
    }
    if (!job.error.empty()) {
        if (!send(error_json({500, job.error, "server_error", "", ""}))) return gone();
    } else if (job.include_usage) {
        job.usage.completion_tokens = 0;
        for (int64_t t : job.completion_tokens) job.usage.completion_tokens += t;
        if (!send(usage_chunk_json(job.ep, job.log.id, job.created, job.model, job.usage))) return gone();
    }
    if (!send("[DONE]")) return gone();
    sink.done();
    job.finish(job.error.empty() ? 200 : 500);
    return true;
}

// The prompt's token ids; an error for an empty prompt or a chat template failure.
std::optional<ApiError> encode_prompt(HttpServer::State& s, const GenerationRequest& r, std::vector<int32_t>* ids) {
    if (r.endpoint == Endpoint::kChat) {
        std::string text;
        ChatTemplateArgs args{r.messages_json, r.tools_json, r.kwargs_json, true, s.opt.chat_template};
        Status st = s.engine->apply_chat_template(args, &text);
        if (!st.ok()) return bad_request("cannot apply the chat template: " + st.message, "messages");
        *ids = s.engine->tokenize(text, /*add_special=*/false, /*parse_special=*/true);
    } else if (r.has_prompt_ids) {
        *ids = r.prompt_ids;
    } else {
        *ids = s.engine->tokenize(r.prompt);
        const int32_t bos = s.engine->model_info().bos_id;
        if (ids->empty() && bos >= 0) ids->push_back(bos);
    }
    return std::nullopt;
}

}  // namespace

void handle_generation(HttpServer::State& s, const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    auto job = std::make_shared<Job>(s, ep);
    job->t0 = Clock::now();
    job->created = int64_t(std::time(nullptr));
    job->log.id = s.new_id(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    job->log.path = req.path;
    job->model = s.model_name;
    auto fail = [&](const ApiError& e) {
        send_error(res, e);
        job->log.error = e.message;
        job->finish(e.status);
    };
    GenerationRequest r;
    if (auto e = parse_generation_request(req.body, ep, &r)) return fail(*e);
    job->log.n = r.n;
    job->log.stream = r.stream;
    if (!r.model.empty() && r.model != s.model_name) {
        ApiError e{404, "The model `" + r.model + "` does not exist (this server serves `" + s.model_name + "`)",
                   "invalid_request_error", "model", "model_not_found"};
        return fail(e);
    }
    std::vector<int32_t> ids;
    if (auto e = encode_prompt(s, r, &ids)) return fail(*e);
    const ModelInfo& info = s.engine->model_info();
    if (auto e = check_against_model(&r, int64_t(ids.size()), info.max_model_len, info.vocab_size)) return fail(*e);
    const int64_t limit = int64_t(s.opt.max_seqs) + s.opt.max_queue;
    if (s.in_flight.fetch_add(r.n) + r.n > limit) {
        s.in_flight -= r.n;
        res.set_header("Retry-After", "1");
        return fail({429, "too many requests waiting (--max-queue " + std::to_string(s.opt.max_queue) + ")", "requests",
                     "", "rate_limit_exceeded"});
    }
    job->slot.reset(new Slot{s.in_flight, r.n});
    if (s.stopping) return fail({503, "the server is shutting down", "server_error", "", ""});
    Engine* engine = s.engine;
    if (s.router) {  // data parallelism: the replica with the prompt's prefix, or the least busy
        job->slot->router = s.router.get();
        job->slot->replica = s.router->pick(ids, r.n);
        engine = s.engines[size_t(job->slot->replica)];
    }
    Status st = Generation::start(*engine, ids, r.sampling, r.n, r.speculate, &job->gen);
    if (!st.ok()) {
        // A structured-output spec kiln cannot honour (kUnsupported) is the request's fault too.
        bool structured = false;
        for (const char* what : {"json schema: ", "regex: ", "choice: ", "grammar: ", "structured output"})
            structured = structured || (!r.structured_param.empty() && st.message.find(what) != std::string::npos);
        const int status = st.code == Status::Code::kInvalidArgument || structured                          ? 400
                           : st.code == Status::Code::kOutOfMemory || st.code == Status::Code::kUnavailable ? 503
                                                                                                            : 500;
        return fail({status, st.message, status == 400 ? "invalid_request_error" : "server_error",
                     structured ? r.structured_param : "", ""});
    }
    job->choices.resize(r.n);
    job->completion_tokens.assign(r.n, 0);
    job->include_usage = r.include_usage;
    job->logprobs = r.sampling.logprobs >= 0;
    job->text_offset.assign(r.n, 0);
    using TC = GenerationRequest::ToolChoice;
    if (r.tool_choice != TC::kNone) {
        job->tool_format = !s.opt.tool_call_parser.empty() ? s.opt.tool_call_parser
                           : detect_tool_call_format(s.opt.chat_template.empty() ? info.chat_template : s.opt.chat_template);
        job->tool_mode = r.tool_choice == TC::kRequired ? Job::ToolMode::kRequired
                         : r.tool_choice == TC::kNamed  ? Job::ToolMode::kNamed
                         : job->tool_format != "none"   ? Job::ToolMode::kParse
                                                        : Job::ToolMode::kOff;
        job->tools_json = r.tools_json;
        job->tool_name = r.tool_name;
        job->parallel_tool_calls = r.parallel_tool_calls;
        job->raw.assign(r.n, "");
        job->sent_content.assign(r.n, 0);
        job->sent_calls.assign(r.n, 0);
        job->calls.assign(r.n, {});
    }
    if (!r.stream) return run_blocking(*job, res);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream",
                                     [job](size_t, httplib::DataSink& sink) { return run_stream(*job, sink); });
}

}  // namespace kiln::server
