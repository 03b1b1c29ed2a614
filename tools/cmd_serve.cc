// `kiln serve [-m MODEL] [--host H] [--port P] [--api-key K] [--max-queue N] [--served-model-name NAME]
// [--chat-template FILE] [--log-format text|json] [engine options]`: listens at once (/health
// answers 503 while loading), loads the model into a kiln::Engine and serves the OpenAI-compatible
// HTTP API of src/server (docs/server.md) until SIGINT or SIGTERM, which stop the listener, abort
// running requests and exit 0.
// Signals: blocked in every thread (the mask is set before any thread starts) and taken by one
// sigwait thread, so no handler runs inside the engine or httplib.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "engine_options.h"
#include "kiln/engine.h"
#include "model_session.h"
#include "core/thread_pool.h"
#include "server/http_server.h"

namespace kiln::tools {
namespace {

constexpr const char* kServeUsage =
    "usage: kiln serve [-m MODEL] [--host HOST] [--port PORT] [--api-key KEY] [--max-queue N]\n"
    "                  [--served-model-name NAME] [--chat-template FILE] [--tool-call-parser NAME]\n"
    "                  [--log-format text|json] [--dp N]\n"
    "                  [-t N] [engine options]\n"
    "\n"
    "Serves MODEL over an OpenAI-compatible HTTP API (docs/server.md): /v1/completions,\n"
    "/v1/chat/completions (JSON or SSE streaming), /v1/models, /health, /metrics, /tokenize,\n"
    "/detokenize. SIGINT or SIGTERM stop it.\n"
    "\n"
    "  --host HOST            address to listen on (default 127.0.0.1)\n"
    "  --port PORT            TCP port (default 8000; 0 = any free port, printed on stderr)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize\n"
    "  --max-queue N          requests that may wait beyond --max-seqs before 429 (default 256)\n"
    "  --served-model-name N  the model name clients send and see (default: the model's name)\n"
    "  --chat-template FILE   a Jinja chat template instead of the model's (for models without one)\n"
    "  --tool-call-parser F   how replies are read for tool calls: hermes, qwen_xml, glm, llama3,\n"
    "                         mistral, gpt_oss, deepseek or none (default: the chat template's)\n"
    "  --log-format FMT       request log lines on stderr: text (default) or json\n"
    "  --dp N                 data parallelism: N replicas of the model in this process (CPU), each\n"
    "                         with -t threads (default: the cores / N) and its own KV cache, all\n"
    "                         over one copy of the weights\n"
    "                         (--kv-cache-gb each; the default budget is split); a request goes to\n"
    "                         the replica that cached its prompt's prefix, else to the least busy\n"
    "                         (--max-seqs each, --max-queue shared; docs/parallel.md)\n";

void print_usage(std::FILE* f) {
    std::fputs(kServeUsage, f);
    std::fputs(kSessionHelp, f);
    std::fputs(kEngineHelp, f);
}

bool parse_int_in(const std::string& s, long lo, long hi, int* out) {
    try {
        size_t used = 0;
        long v = std::stol(s, &used);
        if (used != s.size() || v < lo || v > hi) return false;
        *out = int(v);
        return true;
    } catch (...) {
        return false;
    }
}

// Fills the server options from the flags; false after printing the problem.
bool parse_server_options(const Args& args, server::ServerOptions& o) {
    if (auto v = args.get("--host")) o.host = *v;
    if (auto v = args.get("--port"); v && !parse_int_in(*v, 0, 65535, &o.port)) {
        std::fprintf(stderr, "kiln serve: --port needs an integer in [0, 65535], got '%s'\n", v->c_str());
        return false;
    }
    if (auto v = args.get("--max-queue"); v && !parse_int_in(*v, 0, 1 << 20, &o.max_queue)) {
        std::fprintf(stderr, "kiln serve: --max-queue needs an integer in [0, 1048576], got '%s'\n", v->c_str());
        return false;
    }
    if (auto v = args.get("--api-key")) {
        if (v->empty()) {
            std::fprintf(stderr, "kiln serve: --api-key is empty\n");
            return false;
        }
        o.api_key = *v;
    }
    if (auto v = args.get("--served-model-name")) o.served_model_name = *v;
    if (auto v = args.get("--log-format")) {
        if (*v != "text" && *v != "json") {
            std::fprintf(stderr, "kiln serve: --log-format is text or json, got '%s'\n", v->c_str());
            return false;
        }
        o.log_json = *v == "json";
    }
    if (auto v = args.get("--tool-call-parser")) {
        if (!is_tool_call_format(*v)) {
            std::fprintf(stderr,
                         "kiln serve: --tool-call-parser is one of hermes, qwen_xml, glm, llama3, mistral, gpt_oss, "
                         "deepseek, none; got '%s'\n",
                         v->c_str());
            return false;
        }
        o.tool_call_parser = *v;
    }
    if (auto f = args.get("--chat-template")) {
        std::ifstream in(*f, std::ios::binary);
        if (!in) {
            std::fprintf(stderr, "kiln serve: cannot read chat template '%s'\n", f->c_str());
            return false;
        }
        std::stringstream ss;
        ss << in.rdbuf();
        o.chat_template = ss.str();
    }
    return true;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
    Args args(merged({"--help", "-h"}, engine_flags()),
              merged({"--host", "--port", "--api-key", "--max-queue", "--served-model-name", "--chat-template",
                      "--tool-call-parser", "--log-format", "--dp"},
                     engine_options()));
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln serve: %s\n", args.error().c_str());
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
    server::ServerOptions sopt;
    if (!parse_server_options(args, sopt)) return 2;
    EngineOptions options;
    if (!parse_engine_options(args, "serve", options)) return 2;
    int dp = 1;  // checked before a worker rank could start
    if (auto v = args.get("--dp"); v && !parse_int_in(*v, 1, 64, &dp)) {
        std::fprintf(stderr, "kiln serve: --dp needs an integer in [1, 64], got '%s'\n", v->c_str());
        return 2;
    }
    if (dp > 1 && (options.tensor_parallel > 1 || options.pipeline_parallel > 1 || options.expert_parallel > 1 ||
                   options.device != "cpu")) {
        std::fprintf(stderr, "kiln serve: --dp runs CPU replicas in one process; not with --tp, --pp, --ep or a GPU yet\n");
        return 2;
    }
    if (const int rc = run_if_worker(options, "serve"); rc >= 0) return rc;
    if (dp > 1) {  // the cores and the default KV budget shared out
        if (options.threads == 0) options.threads = std::max(1, core::ThreadPool::default_num_threads() / dp);
        options.kv_default_share = 1.0 / dp;
    }
    sopt.max_seqs = options.max_seqs * dp;

    // Before any thread exists, so that every thread inherits the mask and only sigwait sees them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a dead server

    // Listen first, so that /health answers 503 while the model loads (load balancers and clients
    // can tell "loading" from "down").
    std::vector<std::unique_ptr<Engine>> replicas;  // declared before the server: outlive its handlers
    server::HttpServer http(sopt);
    std::string err;
    if (!http.bind(&err)) {
        std::fprintf(stderr, "kiln serve: %s\n", err.c_str());
        return 1;
    }
    std::fprintf(stderr, "kiln serve: listening on http://%s:%d, loading %s\n", sopt.host.c_str(), http.port(),
                 options.model.c_str());
    std::fflush(stderr);
    std::atomic<bool> listener_ok{true};
    std::thread listener([&] { listener_ok = http.serve(); });
    std::atomic<bool> signalled{false};
    std::thread sig_thread([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (!signalled.exchange(true)) std::fprintf(stderr, "kiln serve: signal %d, shutting down\n", sig);
        http.stop();
    });
    // Waits for the listener (stopping it first when stop_now) and ends the signal thread; returns `rc`.
    auto shut_down = [&](int rc, bool stop_now = true) {
        if (stop_now) http.stop();
        listener.join();
        // Wakes sigwait when no signal came (the signal stays blocked, so it only reaches sigwait).
        if (!signalled.exchange(true)) pthread_kill(sig_thread.native_handle(), SIGTERM);
        sig_thread.join();
        return rc;
    };

    Status st;
    for (int r = 0; r < dp && !signalled; ++r) {
        // Replicas after the first share its weights (one copy in memory).
        replicas.push_back(r == 0 ? Engine::create(options, &st) : Engine::create_replica(*replicas[0], options, &st));
        if (!replicas.back()) {
            std::fprintf(stderr, "kiln serve: %s\n", st.message.c_str());
            return shut_down(1);
        }
    }
    if (signalled) return shut_down(0);  // stopped while loading
    Engine* engine = replicas[0].get();
    if (!sopt.chat_template.empty()) {  // a broken template is a start-up error, not one per request
        std::string text;
        Status t = engine->apply_chat_template({{"user", "hi"}}, true, sopt.chat_template, &text);
        if (!t.ok()) {
            std::fprintf(stderr, "kiln serve: --chat-template: %s\n", t.message.c_str());
            return shut_down(2);
        }
    }
    if (signalled) return shut_down(0);  // stopped while loading
    std::vector<Engine*> engines;
    for (auto& e : replicas) engines.push_back(e.get());
    http.set_engines(engines);
    const ModelInfo& info = engine->model_info();
    const std::string where =
        info.device == "cpu" ? std::to_string(info.threads) + " threads, " + info.isa : info.device;
    const std::string copies = dp > 1 ? ", " + std::to_string(dp) + " replicas" : "";
    std::fprintf(stderr, "kiln serve: %s (%s, context %lld, %s%s) on http://%s:%d\n", info.path.c_str(),
                 info.arch.c_str(), (long long)info.max_model_len, where.c_str(), copies.c_str(), sopt.host.c_str(),
                 http.port());
    std::fflush(stderr);
    shut_down(0, /*stop_now=*/false);  // serves until a signal stops the listener
    if (!listener_ok) {
        std::fprintf(stderr, "kiln serve: the listener failed\n");
        return 1;
    }
    return 0;
}

}  // namespace kiln::tools
