// HttpServer: httplib setup, authentication, limits, the small routes and the request log (the
// generation routes are in completion_handler.cc).
#include "server/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "server/http_common.h"
#include "server/server_state.h"
#include "server/web_assets.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

constexpr int kListenBacklog = 1024;

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void setup_routes(HttpServer::State& s) {
    httplib::Server& h = s.http;
    h.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
        if (!s.ready) res.status = 503;
        res.set_content(s.ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}", "application/json");
    });
    h.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
        res.set_content(models_json(s.model_name, s.created, s.engine->model_info().max_model_len), "application/json");
    });
    h.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
        handle_generation(s, req, res, Endpoint::kCompletions);
    });
    h.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
        handle_generation(s, req, res, Endpoint::kChat);
    });
    h.Post("/tokenize", [&s](const httplib::Request& req, httplib::Response& res) {
        std::string prompt;
        bool add_special = true;
        ChatTemplateArgs chat;
        if (auto e = parse_tokenize_request(req.body, &prompt, &add_special, &chat.messages_json)) return send_error(res, *e);
        json out;
        if (!chat.messages_json.empty()) {  // the chat as the model will see it (the playground shows it)
            chat.chat_template = s.opt.chat_template;
            Status st = s.engine->apply_chat_template(chat, &prompt);
            if (!st.ok()) return send_error(res, bad_request("cannot apply the chat template: " + st.message, "messages"));
            add_special = false;
            out["prompt"] = prompt;
        }
        const std::vector<int32_t> ids = s.engine->tokenize(prompt, add_special, true);
        out["tokens"] = ids;
        out["count"] = ids.size();
        out["max_model_len"] = s.engine->model_info().max_model_len;
        res.set_content(dump(out), "application/json");
    });
    h.Post("/detokenize", [&s](const httplib::Request& req, httplib::Response& res) {
        std::vector<int32_t> ids;
        if (auto e = parse_detokenize_request(req.body, &ids)) return send_error(res, *e);
        for (int32_t t : ids)
            if (t >= s.engine->model_info().vocab_size)
                return send_error(
                    res, bad_request("token id " + std::to_string(t) + " is outside the vocabulary", "tokens"));
        res.set_content(dump({{"prompt", s.engine->detokenize(ids)}}), "application/json");
    });
    // The playground and the dashboard: static pages (compiled in, web_assets.h) that call the API
    // with relative URLs, so they work under a reverse proxy's path prefix; the API key, if any, is
    // typed into the page and sent by its requests (the pages themselves hold no data).
    h.Get("/", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(std::string(playground_html()), "text/html; charset=utf-8");
    });
    h.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(std::string(dashboard_html()), "text/html; charset=utf-8");
    });
    h.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
        std::string text = s.metrics.render(s.stats(), s.in_flight.load());
        if (s.router) text += s.router->metrics();
        res.set_content(text, "text/plain; version=0.0.4");
    });
}

void setup_http(HttpServer::State& s) {
    httplib::Server& h = s.http;
    h.set_payload_max_length(s.opt.max_body_bytes);
    // Small SSE writes go out at once instead of waiting for the client's delayed ACK (~40 ms).
    h.set_tcp_nodelay(true);
    // Clients that reuse a connection keep it (and its pool thread) instead of reconnecting every
    // 5 requests, httplib's default.
    h.set_keep_alive_max_count(10000);
    // One pool thread per connection: enough for every admitted request to stream, plus headroom for
    // idle keep-alive connections and the small routes.
    const size_t threads = size_t(std::clamp<int64_t>(int64_t(s.opt.max_seqs) + s.opt.max_queue + 32, 64, 1024));
    h.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    h.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
        if (!s.ready && req.path != "/health") {
            res.set_header("Retry-After", "1");
            send_error(res, {503, "the model is still loading", "server_error", "", "model_loading"});
            return httplib::Server::HandlerResponse::Handled;
        }
        const std::optional<ApiError> denied = auth_error(req, s.opt.api_key);
        if (!denied) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, *denied);
        s.metrics.record_request(req.path, 401);
        return httplib::Server::HandlerResponse::Handled;
    });
    install_error_handlers(h);  // httplib's own rejections (bad HTTP, 404 route, 413 body) too
    setup_routes(s);
}

// httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed in the compiled
// library), so a burst of connections overflows the accept queue and clients see resets. listen()
// again on the bound socket raises it; the socket is found among this process's descriptors by its
// port and SO_ACCEPTCONN.
void raise_listen_backlog(int port) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return;
    while (const dirent* e = readdir(d)) {
        const int fd = std::atoi(e->d_name);
        if (fd <= 2) continue;
        int listening = 0;
        socklen_t len = sizeof listening;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
        sockaddr_storage addr{};
        socklen_t alen = sizeof addr;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
        const int p = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                   : -1;
        if (p == port) ::listen(fd, kListenBacklog);
    }
    closedir(d);
}

std::string json_escape(const std::string& v) {
    return dump(json(v));
}

}  // namespace

std::string HttpServer::State::new_id(const char* prefix) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, (unsigned long long)id_salt,
                  (unsigned long long)next_id.fetch_add(1));
    return buf;
}

void log_request(HttpServer::State& s, const RequestLogEntry& e) {
    std::string line;
    char buf[512];
    if (s.opt.log_json) {
        json j = {{"ts", double(std::time(nullptr))},
                  {"id", e.id},
                  {"path", e.path},
                  {"status", e.status},
                  {"n", e.n},
                  {"stream", e.stream},
                  {"prompt_tokens", e.prompt_tokens},
                  {"completion_tokens", e.completion_tokens},
                  {"cached_tokens", e.cached_tokens},
                  {"ttft_s", e.ttft_s >= 0 ? json(e.ttft_s) : json(nullptr)},
                  {"total_s", e.total_s},
                  {"finish_reason", e.finish_reason}};
        if (!e.error.empty()) j["error"] = e.error;
        line = dump(j);
    } else {
        std::snprintf(
            buf, sizeof buf,
            "kiln serve: %s %s %d n=%d%s prompt=%lld cached=%lld output=%lld ttft=%.3fs total=%.3fs%s%s", e.id.c_str(),
            e.path.c_str(), e.status, e.n, e.stream ? " stream" : "", (long long)e.prompt_tokens,
            (long long)e.cached_tokens, (long long)e.completion_tokens, e.ttft_s >= 0 ? e.ttft_s : 0.0, e.total_s,
            e.finish_reason.empty() ? "" : (" finish=" + e.finish_reason).c_str(), e.error.empty() ? "" : " error=");
        line = buf;
        if (!e.error.empty()) line += json_escape(e.error.substr(0, 200));
    }
    line += '\n';
    std::lock_guard<std::mutex> lock(s.log_mu);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

HttpServer::HttpServer(ServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
    State& s = *state_;
    s.created = int64_t(std::time(nullptr));
    s.id_salt = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
    setup_http(s);
}

EngineStats HttpServer::State::stats() const {
    EngineStats t = engine->stats();
    for (size_t i = 1; i < engines.size(); ++i) {
        const EngineStats s = engines[i]->stats();
        t.num_running += s.num_running;
        t.num_waiting += s.num_waiting;
        t.kv_blocks_in_use += s.kv_blocks_in_use;
        t.kv_blocks_total += s.kv_blocks_total;
        t.peak_kv_blocks_in_use = std::max(t.peak_kv_blocks_in_use, s.peak_kv_blocks_in_use);  // peaks: not summed
        t.prefix_query_tokens += s.prefix_query_tokens;
        t.prefix_hit_tokens += s.prefix_hit_tokens;
        t.prompt_tokens_total += s.prompt_tokens_total;
        t.generated_tokens_total += s.generated_tokens_total;
        t.num_preemptions += s.num_preemptions;
        t.num_steps += s.num_steps;
        t.schedule_seconds += s.schedule_seconds;
        t.forward_seconds += s.forward_seconds;
        t.sample_seconds += s.sample_seconds;
        t.grammar_seconds += s.grammar_seconds;
        t.spec_draft_tokens += s.spec_draft_tokens;
        t.spec_accepted_tokens += s.spec_accepted_tokens;
        t.spec_verify_steps += s.spec_verify_steps;
        t.collective_calls += s.collective_calls;
        t.collective_bytes += s.collective_bytes;
        t.collective_seconds += s.collective_seconds;
    }
    return t;
}

void HttpServer::set_engine(Engine& engine) { set_engines({&engine}); }

void HttpServer::set_engines(const std::vector<Engine*>& engines) {
    State& s = *state_;
    if (engines.empty() || !engines[0]) return;
    Engine& engine = *engines[0];
    s.engines = engines;
    if (engines.size() > 1) s.router = std::make_unique<PrefixRouter>(int(engines.size()), engine.stats().block_size);
    s.engine = &engine;
    s.model_name = s.opt.served_model_name.empty() ? engine.model_info().name : s.opt.served_model_name;
    if (s.model_name.empty()) {  // llama2.c files have no name: the file's stem
        std::string path = engine.model_info().path;
        while (!path.empty() && path.back() == '/') path.pop_back();
        std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
        s.model_name = base.substr(0, base.find_last_of('.') == 0 ? base.size() : base.find_last_of('.'));
    }
    if (s.model_name.empty()) s.model_name = "kiln";
    s.ready = true;  // publishes engine and model_name to the handler threads
}

HttpServer::~HttpServer() {
    stop();
}

bool HttpServer::bind(std::string* error) {
    State& s = *state_;
    if (s.opt.port == 0) {
        s.port = s.http.bind_to_any_port(s.opt.host);
    } else if (s.http.bind_to_port(s.opt.host, s.opt.port)) {
        s.port = s.opt.port;
    }
    if (s.port > 0) {
        raise_listen_backlog(s.port);
        return true;
    }
    if (error) *error = "cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port);
    return false;
}

int HttpServer::port() const {
    return state_->port;
}

// httplib's stop() does nothing until listen_after_bind() has marked the server running, so a stop()
// that came first (a model that fails to load at once) used to leave serve() listening forever.
// serve() returns at once when stop() came before it; a stop() that finds serve() entered waits
// for httplib to run (or for serve() to return) before stopping it. The two flags are the Dekker
// pattern on sequentially consistent atomics: at least one side sees the other's write.
bool HttpServer::serve() {
    State& s = *state_;
    s.serve_started = true;
    bool ok = true;
    if (!s.stopping) ok = s.http.listen_after_bind();
    s.serve_done = true;
    return ok;
}

void HttpServer::stop() {
    State& s = *state_;
    if (s.stopping.exchange(true)) return;  // handlers abort their engine requests within one poll
    if (!s.serve_started) return;           // serve() will see `stopping`
    while (!s.serve_done && !s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (s.http.is_running()) s.http.stop();
}

}  // namespace kiln::server
