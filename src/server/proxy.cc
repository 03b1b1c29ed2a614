// ProxyServer (proxy.h): routing generation requests over workers, relaying their replies and
// streams, and polling the workers' health.
#include "server/proxy.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "server/http_common.h"
#include "server/openai_schema.h"
#include "server/router.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

ApiError unavailable(const std::string& message) {
    return {503, message, "server_error", "", "no_worker"};
}

// One upstream server and what the router knows of it.
struct Worker {
    std::string url;
    WorkerAddress at;
    std::atomic<bool> ready{false};
    std::atomic<int64_t> failures{0};  // requests it could not be reached for
    int missed = 0;                     // /health timeouts in a row (the poller's own)
    std::mutex mu;
    std::string last_error;  // under mu
    void down(const std::string& why) {
        ready = false;
        std::lock_guard<std::mutex> lock(mu);
        last_error = why;
    }
    void unreachable(const std::string& why) {  // a request could not reach it
        ++failures;
        down(why);
    }
    std::string error() {
        std::lock_guard<std::mutex> lock(mu);
        return last_error;
    }
};

// A worker's streamed reply, read on a thread of its own while the client's connection takes the
// bytes as they come (httplib writes the client's reply only after the handler returns).
struct Relay {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::string> chunks;
    int status = 0;          // the worker's HTTP status, once its headers came
    bool finished = false;   // the worker's reply ended (or never started)
    bool broken = false;     // it ended without a complete reply
    bool reached = false;    // ... after the request reached the worker (not retried)
    std::string error;       // why, when broken
    std::atomic<bool> cancel{false};
    std::unique_ptr<httplib::Client> client;  // the reader's connection; stop() from another thread ends it
    std::thread reader;
};

// A client error in words (httplib's own names are one word: "Connection", "Read").
std::string what_failed(httplib::Error e) {
    switch (e) {
        case httplib::Error::Connection:
            return "cannot connect (refused or unreachable)";
        case httplib::Error::ConnectionTimeout:
            return "connection timed out";
        case httplib::Error::Read:
            return "reading the reply failed (closed or timed out)";
        case httplib::Error::Write:
            return "sending the request failed";
        case httplib::Error::Canceled:
            return "canceled";
        default:
            return httplib::to_string(e);
    }
}

// Whether a request that failed with `e` never reached the worker (so another may take it): the
// connection was refused or timed out. A read or write error mid-request is not retried: the
// worker may be generating it.
bool not_reached(httplib::Error e) {
    return e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout;
}

// A worker's share of the router's load, released once (by whoever holds it last).
struct LoadHold {
    PrefixRouter* router = nullptr;
    int worker = -1;
    int64_t n = 1;
    LoadHold(PrefixRouter* r, int w, int64_t count) : router(r), worker(w), n(count) {}
    LoadHold(const LoadHold&) = delete;
    LoadHold& operator=(const LoadHold&) = delete;
    ~LoadHold() { release(); }
    void release() {
        if (router) router->release(worker, n);
        router = nullptr;
    }
};

}  // namespace

struct ProxyServer::State {
    explicit State(ProxyOptions o) : opt(std::move(o)) {}
    ProxyOptions opt;
    httplib::Server http;
    std::vector<std::unique_ptr<Worker>> workers;
    std::unique_ptr<PrefixRouter> router;
    std::atomic<bool> stopping{false};
    std::atomic<bool> serve_started{false}, serve_done{false};
    std::mutex health_mu;
    std::condition_variable health_cv;
    int port = 0;
    // The upstream connections in use, so that stop() can end them (a request waiting on a worker
    // would otherwise hold its handler thread, and shutdown, until the worker answers).
    std::mutex clients_mu;
    std::set<httplib::Client*> clients;
    struct ClientLease {
        State& s;
        httplib::Client* c;
        std::shared_ptr<void> owner;  // what holds c: kept until c is out of the set
        ClientLease(State& st, httplib::Client* cl, std::shared_ptr<void> o = nullptr) : s(st), c(cl), owner(std::move(o)) {
            std::lock_guard<std::mutex> lock(s.clients_mu);
            s.clients.insert(c);
            if (s.stopping) c->stop();
        }
        ~ClientLease() {
            std::lock_guard<std::mutex> lock(s.clients_mu);
            s.clients.erase(c);
        }
    };
    void stop_clients() {
        std::lock_guard<std::mutex> lock(clients_mu);
        for (httplib::Client* c : clients) c->stop();
    }

    std::unique_ptr<httplib::Client> client(const Worker& w, int read_timeout_s) const {
        auto c = std::make_unique<httplib::Client>(w.at.host, w.at.port);
        c->set_connection_timeout(opt.connect_timeout_s, 0);
        c->set_read_timeout(read_timeout_s, 0);
        c->set_write_timeout(opt.connect_timeout_s, 0);
        c->set_tcp_nodelay(true);
        return c;
    }
    httplib::Headers headers_for(const httplib::Request& req) const {
        httplib::Headers h;
        if (!opt.worker_api_key.empty()) {
            h.emplace("Authorization", "Bearer " + opt.worker_api_key);
        } else if (req.has_header("Authorization")) {
            h.emplace("Authorization", req.get_header_value("Authorization"));
        }
        return h;
    }
    std::vector<bool> ready_mask() const {
        std::vector<bool> m;
        for (const auto& w : workers) m.push_back(w->ready.load());
        return m;
    }
    std::string why_none() {
        std::string s = "no worker is ready";
        for (const auto& w : workers) {
            const std::string e = w->error();
            s += "; " + w->url + ": " + (e.empty() ? std::string("not ready") : e);
        }
        return s;
    }
    void poll_health();
    void forward_simple(const httplib::Request& req, httplib::Response& res);
    void route_generation(const httplib::Request& req, httplib::Response& res, bool chat);
};

std::optional<WorkerAddress> parse_worker_url(const std::string& url, std::string* error) {
    const std::string scheme = "http://";
    auto bad = [&](const std::string& why) {
        if (error) *error = "worker URL '" + url + "': " + why;
        return std::nullopt;
    };
    if (url.rfind(scheme, 0) != 0) return bad("not http://HOST[:PORT]");
    std::string rest = url.substr(scheme.size());
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (rest.empty() || rest.find('/') != std::string::npos) return bad("not http://HOST[:PORT]");
    WorkerAddress a;
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) {
        a.host = rest;
        return a;
    }
    a.host = rest.substr(0, colon);
    const std::string p = rest.substr(colon + 1);
    if (a.host.empty() || p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
        return bad("not http://HOST[:PORT]");
    a.port = std::stoi(p);
    if (a.port < 1 || a.port > 65535) return bad("port out of range");
    return a;
}

namespace {

// affinity_text of a parsed body.
std::optional<std::string> affinity_of(const json& j, bool chat, std::string* error) {
    auto bad = [&](const std::string& why) {
        if (error) *error = why;
        return std::nullopt;
    };
    if (!j.is_object()) return bad("the body is not a JSON object");
    if (chat) {
        const auto m = j.find("messages");
        if (m == j.end() || !m->is_array()) return bad("messages must be an array");
        std::string text;
        for (const json& msg : *m) {
            if (!msg.is_object()) return bad("each message must be an object");
            const auto role = msg.find("role"), content = msg.find("content");
            text += role != msg.end() && role->is_string() ? role->get<std::string>() : std::string();
            text += '\n';
            if (content != msg.end() && content->is_string()) {
                text += content->get<std::string>();
            } else if (content != msg.end() && content->is_array()) {  // content parts: their texts, one level
                for (const json& part : *content)
                    if (part.is_object())
                        if (const auto t = part.find("text"); t != part.end() && t->is_string()) text += t->get<std::string>();
            }
            text += '\n';
        }
        return text;
    }
    const auto p = j.find("prompt");
    if (p == j.end()) return bad("prompt is missing");
    const json* prompt = &*p;
    if (prompt->is_array() && !prompt->empty() && (prompt->front().is_string() || prompt->front().is_array()))
        prompt = &prompt->front();  // a list of prompts: the first one's worker takes them all
    if (prompt->is_string()) return prompt->get<std::string>();
    if (!prompt->is_array()) return bad("prompt must be a string or token ids");
    std::string text;
    for (const json& id : *prompt) {
        if (!id.is_number_integer()) return bad("prompt must be a string or token ids");
        text += std::to_string(id.get<int64_t>()) + ' ';
    }
    return text;
}

}  // namespace

std::optional<std::string> affinity_text(std::string_view body, bool chat, std::string* error) {
    return affinity_of(json::parse(body, nullptr, false), chat, error);
}

// Every worker's /health, every health_interval_s, until stopping.
void ProxyServer::State::poll_health() {
    while (!stopping) {
        for (auto& w : workers) {
            if (stopping) break;
            auto c = client(*w, 2);
            c->set_connection_timeout(2, 0);
            ClientLease lease(*this, c.get());
            httplib::Result r = c->Get("/health");
            if (r && r->status == 200) {
                w->missed = 0;
                if (!w->ready.exchange(true)) std::fprintf(stderr, "kiln router: worker %s is ready\n", w->url.c_str());
                continue;
            }
            // Refused or an error status: out at once; a timeout (a busy worker): after two in a row.
            if (!r && r.error() != httplib::Error::Connection && ++w->missed < 2) continue;
            if (w->ready.load() || w->error().empty()) {
                w->down(r ? "/health answered " + std::to_string(r->status) : what_failed(r.error()));
                std::fprintf(stderr, "kiln router: worker %s is not ready (%s)\n", w->url.c_str(), w->error().c_str());
            }
        }
        std::fflush(stderr);
        std::unique_lock<std::mutex> lock(health_mu);
        health_cv.wait_for(lock, std::chrono::duration<double>(opt.health_interval_s), [this] { return stopping.load(); });
    }
}

// A request any ready worker can answer (models, tokenize): relayed to the first that answers.
void ProxyServer::State::forward_simple(const httplib::Request& req, httplib::Response& res) {
    for (auto& w : workers) {
        if (!w->ready) continue;
        auto c = client(*w, opt.read_timeout_s);
        ClientLease lease(*this, c.get());
        httplib::Result r = req.method == "GET"
                                ? c->Get(req.path.c_str(), headers_for(req))
                                : c->Post(req.path.c_str(), headers_for(req), req.body, "application/json");
        if (!r && not_reached(r.error())) {
            w->unreachable(what_failed(r.error()));
            continue;
        }
        if (!r) return send_error(res, {502, w->url + ": " + what_failed(r.error()), "server_error", "", ""});
        res.status = r->status;
        const std::string type = r->get_header_value("Content-Type");
        res.set_content(r->body, type.empty() ? "application/json" : type.c_str());
        return;
    }
    send_error(res, unavailable(why_none()));
}

void ProxyServer::State::route_generation(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::string why;
    const json body = json::parse(req.body, nullptr, false);  // once: the worker parses it again anyway
    const std::optional<std::string> text = affinity_of(body, chat, &why);
    if (!text) return send_error(res, bad_request(why));
    const auto st = body.find("stream");  // anything but true: the worker answers (or refuses) it whole
    const bool stream = st != body.end() && st->is_boolean() && st->get<bool>();
    int64_t n = 1;
    if (const auto it = body.find("n"); it != body.end() && it->is_number_integer())
        n = std::clamp<int64_t>(it->get<int64_t>(), 1, 1024);
    const std::vector<int32_t> units(text->begin(), text->end());  // bytes as the router's "tokens"
    std::vector<bool> usable = ready_mask();
    for (;;) {
        const int w = router->pick(units, n, &usable);
        if (w < 0) return send_error(res, unavailable(why_none()));
        Worker& worker = *workers[size_t(w)];
        usable[size_t(w)] = false;  // not again for this request
        auto hold = std::make_shared<LoadHold>(router.get(), w, n);
        if (!stream) {
            auto c = client(worker, opt.read_timeout_s);
            ClientLease lease(*this, c.get());
            httplib::Result r = c->Post(req.path.c_str(), headers_for(req), req.body, "application/json");
            hold->release();
            if (!r && not_reached(r.error())) {  // the next worker
                worker.unreachable(what_failed(r.error()));
                continue;
            }
            if (!r)
                return send_error(res, {stopping ? 503 : 502, worker.url + ": " + what_failed(r.error()),
                                        "server_error", "", ""});
            res.status = r->status;
            res.set_content(r->body, "application/json");
            return;
        }
        // Streamed: the worker's reply is read on the relay's thread; this handler waits for its
        // status, then hands the client a chunked reply fed from the relay.
        auto relay = std::make_shared<Relay>();
        relay->client = client(worker, opt.read_timeout_s);
        auto lease = std::make_shared<ClientLease>(*this, relay->client.get(), relay);
        relay->reader = std::thread([relay, path = req.path, headers = headers_for(req), payload = req.body] {
            httplib::Request up;
            up.method = "POST";
            up.path = path;
            up.headers = headers;
            up.headers.emplace("Content-Type", "application/json");
            up.body = payload;
            up.response_handler = [&](const httplib::Response& r) {
                std::lock_guard<std::mutex> lock(relay->mu);
                relay->status = r.status;
                relay->cv.notify_all();
                return !relay->cancel.load();
            };
            up.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
                if (relay->cancel) return false;
                std::lock_guard<std::mutex> lock(relay->mu);
                relay->chunks.emplace_back(data, len);
                relay->cv.notify_all();
                return true;
            };
            httplib::Result r = relay->client->send(up);
            std::lock_guard<std::mutex> lock(relay->mu);
            relay->finished = true;
            if (!r) {
                relay->broken = true;
                relay->reached = !not_reached(r.error());
                relay->error = what_failed(r.error());
            }
            relay->cv.notify_all();
        });
        int status = 0;
        {
            std::unique_lock<std::mutex> lock(relay->mu);
            relay->cv.wait(lock, [&] { return relay->status != 0 || relay->finished; });
            status = relay->status;
        }
        if (status == 0) {  // never answered
            relay->reader.join();
            hold->release();
            if (!relay->reached) {  // not reached: the next worker
                worker.unreachable(relay->error);
                continue;
            }
            return send_error(res, {stopping ? 503 : 502, worker.url + ": " + relay->error, "server_error", "", ""});
        }
        if (status != 200) {  // an error reply: relayed whole, as JSON
            relay->reader.join();
            hold->release();
            std::string all;
            for (const std::string& c : relay->chunks) all += c;
            res.status = status;
            res.set_content(all, "application/json");
            return;
        }
        res.set_chunked_content_provider(
            "text/event-stream",
            [relay](size_t, httplib::DataSink& sink) {
                std::unique_lock<std::mutex> lock(relay->mu);
                // Back to httplib every second when nothing came, so that it sees a stopping server.
                if (!relay->cv.wait_for(lock, std::chrono::seconds(1),
                                        [&] { return !relay->chunks.empty() || relay->finished; }))
                    return true;
                while (!relay->chunks.empty()) {
                    const std::string chunk = std::move(relay->chunks.front());
                    relay->chunks.pop_front();
                    lock.unlock();
                    if (!sink.write(chunk.data(), chunk.size())) return false;  // the client went away
                    lock.lock();
                }
                if (!relay->finished) return true;
                if (relay->broken) {  // the worker's stream broke off: say so in the stream
                    const std::string event =
                        "data: " + error_json({502, "the worker's stream broke off: " + relay->error, "server_error", "", ""}) +
                        "\n\n";
                    lock.unlock();
                    sink.write(event.data(), event.size());
                }
                sink.done();
                return true;
            },
            [relay, hold, lease](bool) {  // done or the client gone: end the worker's stream too
                relay->cancel = true;
                relay->client->stop();
                if (relay->reader.joinable()) relay->reader.join();
                hold->release();
            });
        return;
    }
}

ProxyServer::ProxyServer(ProxyOptions options) : state_(std::make_unique<State>(std::move(options))) {
    State& s = *state_;
    httplib::Server& h = s.http;
    h.set_payload_max_length(s.opt.max_body_bytes);
    h.set_tcp_nodelay(true);
    h.set_keep_alive_max_count(10000);
    const size_t threads = size_t(std::clamp(s.opt.max_connections, 8, 4096));
    h.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    h.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
        const std::optional<ApiError> denied = auth_error(req, s.opt.api_key);
        if (!denied) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, *denied);
        return httplib::Server::HandlerResponse::Handled;
    });
    install_error_handlers(h);
    h.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
        s.route_generation(req, res, false);
    });
    h.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
        s.route_generation(req, res, true);
    });
    h.Get("/v1/models", [&s](const httplib::Request& req, httplib::Response& res) { s.forward_simple(req, res); });
    h.Post("/tokenize", [&s](const httplib::Request& req, httplib::Response& res) { s.forward_simple(req, res); });
    h.Post("/detokenize", [&s](const httplib::Request& req, httplib::Response& res) { s.forward_simple(req, res); });
    h.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
        json ws = json::array();
        bool any = false;
        for (size_t i = 0; i < s.workers.size(); ++i) {
            Worker& w = *s.workers[i];
            any = any || w.ready;
            json o = {{"url", w.url}, {"ready", w.ready.load()}, {"in_flight", s.router->load(int(i))}};
            if (!w.ready) o["error"] = w.error();
            ws.push_back(o);
        }
        res.status = any ? 200 : 503;
        res.set_content(json{{"status", any ? "ok" : "no worker ready"}, {"workers", ws}}.dump(
                            -1, ' ', false, json::error_handler_t::replace),
                        "application/json");
    });
    h.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
        std::string out = s.router->metrics();
        out += "# HELP kiln_router_worker_ready Whether the worker answers its /health (1) or not (0).\n"
               "# TYPE kiln_router_worker_ready gauge\n";
        for (size_t i = 0; i < s.workers.size(); ++i)
            out += "kiln_router_worker_ready{replica=\"" + std::to_string(i) + "\",url=\"" + s.workers[i]->url + "\"} " +
                   (s.workers[i]->ready ? "1" : "0") + "\n";
        out += "# HELP kiln_router_worker_failures_total Requests a worker could not be reached for.\n"
               "# TYPE kiln_router_worker_failures_total counter\n";
        for (size_t i = 0; i < s.workers.size(); ++i)
            out += "kiln_router_worker_failures_total{replica=\"" + std::to_string(i) + "\"} " +
                   std::to_string(s.workers[i]->failures.load()) + "\n";
        res.set_content(out, "text/plain; version=0.0.4");
    });
}

ProxyServer::~ProxyServer() {
    stop();
}

bool ProxyServer::bind(std::string* error) {
    State& s = *state_;
    if (s.opt.workers.empty()) {
        if (error) *error = "no workers (--worker http://HOST:PORT, one per replica)";
        return false;
    }
    for (const std::string& url : s.opt.workers) {
        auto at = parse_worker_url(url, error);
        if (!at) return false;
        auto w = std::make_unique<Worker>();
        w->url = url;
        while (!w->url.empty() && w->url.back() == '/') w->url.pop_back();
        w->at = *at;
        s.workers.push_back(std::move(w));
    }
    s.router = std::make_unique<PrefixRouter>(int(s.workers.size()), std::max(1, s.opt.block_bytes), s.opt.slack);
    if (s.opt.port == 0) {
        s.port = s.http.bind_to_any_port(s.opt.host);
    } else if (s.http.bind_to_port(s.opt.host, s.opt.port)) {
        s.port = s.opt.port;
    }
    if (s.port > 0) return true;
    if (error) *error = "cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port);
    return false;
}

int ProxyServer::port() const {
    return state_->port;
}

bool ProxyServer::serve() {
    State& s = *state_;
    s.serve_started = true;
    std::thread health([&s] { s.poll_health(); });
    bool ok = true;
    if (!s.stopping) ok = s.http.listen_after_bind();
    s.stopping = true;
    {
        std::lock_guard<std::mutex> lock(s.health_mu);
        s.health_cv.notify_all();
    }
    health.join();
    s.serve_done = true;
    return ok;
}

// As HttpServer::stop: a stop() before serve() makes serve() return at once.
void ProxyServer::stop() {
    State& s = *state_;
    if (s.stopping.exchange(true)) return;
    {
        std::lock_guard<std::mutex> lock(s.health_mu);
        s.health_cv.notify_all();
    }
    s.stop_clients();  // requests waiting on workers end (502 / a broken-off stream)
    if (!s.serve_started) return;
    while (!s.serve_done && !s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (s.http.is_running()) s.http.stop();
}

}  // namespace kiln::server
