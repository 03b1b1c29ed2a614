// `kiln router`'s HTTP server: data parallelism across processes and hosts. One OpenAI-compatible
// endpoint in front of several `kiln serve` processes (or any OpenAI-compatible servers with
// /health), each a replica of the same model: a generation request goes to the worker that got its
// prompt's prefix before (its prefix cache holds it), unless that worker is busier than the least busy
// by more than the slack, else to the least busy (server/router.h's PrefixRouter, over the prompt's
// bytes in blocks of block_bytes: the router does not tokenize, as SGLang's cache-aware router
// matches text). Streams are relayed event by event as they arrive; a client that goes away closes
// the worker's stream (the worker then aborts the request). A worker that does not answer its
// /health (polled every health_interval_s) or refuses a connection is out until it answers again; a
// request whose worker cannot be reached goes to the next; none left: 503 with an OpenAI error.
// Routes: POST /v1/completions, /v1/chat/completions (routed), GET /v1/models, POST /tokenize,
// /detokenize (any ready worker), GET /health (200 while a worker is ready, with each worker's
// state), GET /metrics (the routing counters and each worker's state).
// Invariants: no request input aborts the process; every failure is an OpenAI error JSON.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::server {

struct ProxyOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                  // 0: any free port (see ProxyServer::port)
    std::vector<std::string> workers;  // http://HOST[:PORT] of each replica's server
    std::string api_key;               // "": no authentication; else clients send 'Authorization: Bearer KEY'
    std::string worker_api_key;        // sent to the workers; "": the client's Authorization header as is
    int block_bytes = 64;              // the prefix affinity's granularity, in prompt bytes
    int64_t slack = 4;                 // sequences in flight a prefix's worker may exceed the least busy by
    double health_interval_s = 2.0;
    int connect_timeout_s = 5, read_timeout_s = 600;
    size_t max_body_bytes = 4u << 20;  // larger bodies: 413
    int max_connections = 512;         // client connections served at once (one thread each)
};

// HOST and PORT of `http://HOST[:PORT][/]` (port 80 when absent). nullopt with *error set otherwise.
struct WorkerAddress {
    std::string host;
    int port = 80;
};
std::optional<WorkerAddress> parse_worker_url(const std::string& url, std::string* error);

// What the affinity hashes of a generation request's JSON body: a completion's prompt (a string, or
// token ids as decimal text, the first of a list of prompts), a chat's messages (each one's role and
// content, in order). nullopt with *error set when the body is not a JSON object with those fields.
std::optional<std::string> affinity_text(std::string_view body, bool chat, std::string* error);

class ProxyServer {
public:
    explicit ProxyServer(ProxyOptions options);
    ~ProxyServer();
    ProxyServer(const ProxyServer&) = delete;
    ProxyServer& operator=(const ProxyServer&) = delete;

    // Checks the worker URLs and binds host:port; false (message in *error) when either fails.
    bool bind(std::string* error);
    int port() const;
    // Polls the workers' health and serves until stop(); false if the listener failed.
    bool serve();
    // Thread-safe, idempotent: stops accepting and makes serve() return.
    void stop();

    struct State;

private:
    std::unique_ptr<State> state_;
};

}  // namespace kiln::server
