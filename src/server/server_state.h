// The shared state of HttpServer's handlers (private to src/server): the engine, the options, the
// httplib server, metrics, the in-flight request count and the request log.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "server/http_common.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/router.h"

namespace kiln::server {

using Clock = std::chrono::steady_clock;

struct HttpServer::State {
    explicit State(ServerOptions o) : opt(std::move(o)) {}
    Engine* engine = nullptr;  // set once by set_engines, before `ready`; routes other than /health wait for it
    // Data parallelism: every replica (engine is the first; the tokenizer and model are the same in
    // all), and the router that picks one per generation request (null with one engine).
    std::vector<Engine*> engines;
    std::unique_ptr<PrefixRouter> router;
    // Every replica's statistics, summed (the KV peak: the largest).
    EngineStats stats() const;
    std::atomic<bool> ready{false};
    ServerOptions opt;
    std::string model_name;
    int64_t created = 0;  // unix time at start
    httplib::Server http;
    Metrics metrics;
    std::atomic<int64_t> in_flight{0};  // engine requests the handlers wait on
    std::atomic<bool> stopping{false};
    std::atomic<bool> serve_started{false}, serve_done{false};  // serve() entered / returned
    std::atomic<uint64_t> next_id{0};
    uint64_t id_salt = 0;
    int port = 0;
    std::mutex log_mu;

    std::string new_id(const char* prefix);
};

// What the request log line reports (one line per generation request, on stderr).
struct RequestLogEntry {
    std::string id, path;
    int status = 0;
    int n = 1;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    double ttft_s = -1, total_s = 0;
    std::string finish_reason, error;
    bool stream = false;
};
void log_request(HttpServer::State& s, const RequestLogEntry& e);

// POST /v1/completions and /v1/chat/completions.
void handle_generation(HttpServer::State& s, const httplib::Request& req, httplib::Response& res, Endpoint ep);

}  // namespace kiln::server
