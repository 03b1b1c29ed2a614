// `kiln serve`'s HTTP server: an OpenAI-compatible API over one kiln::Engine (cpp-httplib, one
// thread per connection from a fixed pool). Routes: GET /health, GET /v1/models,
// POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming), POST /tokenize,
// POST /detokenize, GET /metrics (Prometheus). docs/server.md describes the behaviour.
// The server can listen before the model is loaded: until set_engine, /health answers 503
// {"status": "loading"} and every other route 503 with an OpenAI error.
// Invariants: no request input aborts the process (every problem is an OpenAI error JSON with a
// 4xx status); a streaming client that goes away has its engine requests aborted; stop() (from any
// thread, e.g. a signal handler thread) stops the listener and aborts running requests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/engine.h"

namespace kiln::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                   // 0: any free port (see HttpServer::port)
    std::string api_key;               // "": no authentication
    int max_queue = 256;               // engine requests that may wait beyond max_seqs before 429
    int max_seqs = 64;                 // the engine's sequences per step (to size the limit above)
    std::string served_model_name;     // "": the model's name
    std::string chat_template;         // "": the model's own
    std::string tool_call_parser;      // "": the chat template's format (docs/tools.md); else one of its names
    bool log_json = false;             // one JSON object per request log line instead of text
    size_t max_body_bytes = 4u << 20;  // larger bodies: 413
};

class HttpServer {
public:
    explicit HttpServer(ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds host:port; false (message in *error) when that fails.
    bool bind(std::string* error);
    int port() const;
    // Makes the server answer with `engine` (which must outlive it); call once, from any thread.
    void set_engine(Engine& engine);
    // Data parallelism: replicas of one model (the same options on each), each generation request
    // routed to one of them by server/router.h (a prompt prefix to the replica that cached it, else
    // the least busy); /metrics sums them. Call once instead of set_engine.
    void set_engines(const std::vector<Engine*>& engines);
    // Serves until stop(); returns false if the listener failed.
    bool serve();
    // Thread-safe, idempotent: stops accepting, aborts running requests, makes serve() return.
    void stop();

    struct State;

private:
    std::unique_ptr<State> state_;
};

}  // namespace kiln::server
