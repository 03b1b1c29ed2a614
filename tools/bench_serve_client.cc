// HTTP requests and SSE timing for `kiln bench serve` (see bench_serve_client.h).
#include "bench_serve_client.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

httplib::Headers auth_headers(const ServerTarget& t) {
    httplib::Headers h;
    if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
    return h;
}

// `{"error": {"message": ...}}` from a reply body, else the body itself (cut short).
std::string error_text(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("error")) {
        const json& e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
        return e.dump();
    }
    return body.size() > 200 ? body.substr(0, 200) + "..." : body;
}

// The stream of one request: splits the body into lines and folds each event into the result.
class StreamReader {
public:
    StreamReader(RequestResult* r, Clock::time_point start, bool chat) : r_(r), start_(start), chat_(chat) {}

    // Folds newly received bytes; false stops the transfer (an error event, or data after [DONE]).
    bool feed(const char* data, size_t n) {
        const Clock::time_point now = Clock::now();
        buf_.append(data, n);
        size_t begin = 0;
        for (size_t nl; (nl = buf_.find('\n', begin)) != std::string::npos; begin = nl + 1) {
            std::string_view line(buf_.data() + begin, nl - begin);
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            if (!on_line(line, now)) return false;
        }
        buf_.erase(0, begin);
        return true;
    }

    bool done() const { return done_; }
    bool saw_usage() const { return usage_; }
    bool saw_content() const { return content_; }

private:
    bool on_line(std::string_view line, Clock::time_point now) {
        if (line.empty() || line[0] == ':') return true;  // event separator or comment
        if (line.rfind("data:", 0) != 0) return true;     // event:, id:, retry: fields
        std::string_view payload = line.substr(5);
        if (!payload.empty() && payload[0] == ' ') payload.remove_prefix(1);
        if (done_) return fail("data after [DONE]");
        if (payload == "[DONE]") {
            done_ = true;
            return true;
        }
        json j = json::parse(payload, nullptr, false);
        if (!j.is_object()) return fail("an event that is not a JSON object: " + std::string(payload.substr(0, 120)));
        if (j.contains("error")) return fail("error in the stream: " + error_text(std::string(payload)));
        if (j.contains("usage") && j["usage"].is_object()) {
            const json& u = j["usage"];
            r_->prompt_tokens = u.value("prompt_tokens", int64_t(0));
            r_->output_tokens = u.value("completion_tokens", int64_t(0));
            usage_ = true;
        }
        if (has_text(j)) {
            if (!content_)
                r_->ttft_ms = ms_between(start_, now);
            else
                r_->itl_ms.push_back(ms_between(last_, now));
            content_ = true;
            last_ = now;
        }
        return true;
    }

    bool has_text(const json& j) const {
        if (!j.contains("choices") || !j["choices"].is_array()) return false;
        for (const json& c : j["choices"]) {
            const json* t = nullptr;
            if (chat_ && c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content"))
                t = &c["delta"]["content"];
            else if (!chat_ && c.contains("text"))
                t = &c["text"];
            if (t && t->is_string() && !t->get_ref<const std::string&>().empty()) return true;
        }
        return false;
    }

    bool fail(std::string msg) {
        if (r_->error.empty()) r_->error = std::move(msg);
        return false;
    }

    RequestResult* r_;
    Clock::time_point start_, last_;
    bool chat_;
    std::string buf_;
    bool done_ = false, usage_ = false, content_ = false;
};

}  // namespace

bool parse_server_url(const std::string& url, ServerTarget* target, std::string* error) {
    constexpr std::string_view kScheme = "http://";
    if (url.rfind(kScheme, 0) != 0) {
        *error = "--url must start with http:// (got '" + url + "')";
        return false;
    }
    std::string rest = url.substr(kScheme.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (rest.empty() || rest.find('/') != std::string::npos) {
        *error = "--url must be http://HOST[:PORT] with no path (got '" + url + "')";
        return false;
    }
    target->port = 80;
    const size_t colon = rest.rfind(':');
    if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
        const std::string port = rest.substr(colon + 1);
        int p = 0;
        for (char ch : port) p = (ch >= '0' && ch <= '9' && p < 100000) ? p * 10 + (ch - '0') : 1 << 20;
        if (port.empty() || p < 1 || p > 65535) {
            *error = "--url has a bad port '" + port + "'";
            return false;
        }
        target->port = p;
        rest.resize(colon);
    }
    if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
    if (rest.empty()) {
        *error = "--url has no host (got '" + url + "')";
        return false;
    }
    target->host = rest;
    return true;
}

std::unique_ptr<httplib::Client> make_client(const ServerTarget& target) {
    auto c = std::make_unique<httplib::Client>(target.host, target.port);
    c->set_connection_timeout(5, 0);
    c->set_read_timeout(600, 0);
    c->set_write_timeout(60, 0);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // small request writes must not wait for delayed ACKs (Nagle)
    return c;
}

bool wait_for_health(const ServerTarget& target, double wait_s, std::string* error) {
    auto client = make_client(target);
    client->set_connection_timeout(1, 0);
    client->set_read_timeout(10, 0);
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
    for (;;) {
        httplib::Result res = client->Get("/health");
        if (res && res->status == 200) return true;
        if (Clock::now() >= deadline) {
            *error = res ? "GET /health answered HTTP " + std::to_string(res->status)
                         : "cannot connect (" + httplib::to_string(res.error()) + ")";
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
}

std::string served_model_name(httplib::Client& client, const ServerTarget& target) {
    httplib::Result res = client.Get("/v1/models", auth_headers(target));
    if (!res || res->status != 200) return "";
    json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
    const json& m = j["data"][0];
    return m.is_object() && m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "";
}

bool tokenize_text(httplib::Client& client, const ServerTarget& target, const std::string& text, bool add_special,
                   std::vector<int32_t>* ids, int64_t* max_model_len, std::string* error) {
    const json body = {{"prompt", text}, {"add_special_tokens", add_special}};
    httplib::Result res = client.Post("/tokenize", auth_headers(target), body.dump(), "application/json");
    if (!res) {
        *error = "POST /tokenize: " + httplib::to_string(res.error());
        return false;
    }
    if (res->status != 200) {
        *error = "POST /tokenize: HTTP " + std::to_string(res->status) + ": " + error_text(res->body);
        return false;
    }
    json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
        *error = "POST /tokenize: no token list in the reply";
        return false;
    }
    ids->clear();
    for (const json& t : j["tokens"]) {
        if (!t.is_number_integer()) {
            *error = "POST /tokenize: a token id that is not an integer";
            return false;
        }
        ids->push_back(t.get<int32_t>());
    }
    *max_model_len = j.value("max_model_len", int64_t(0));
    return true;
}

namespace {

// One attempt; *no_reply: it failed before any response came (a stale kept-alive connection).
RequestResult stream_once(httplib::Client& client, const ServerTarget& target, const BenchPrompt& prompt,
                          int64_t output_len, bool* no_reply) {
    json body = {{"max_tokens", output_len},
                 {"temperature", 0.0},
                 {"ignore_eos", true},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (!target.model.empty()) body["model"] = target.model;
    if (target.chat)
        body["messages"] = json::array({{{"role", "user"}, {"content", prompt.text}}});
    else
        body["prompt"] = prompt.ids;

    RequestResult r;
    httplib::Request req;
    req.method = "POST";
    req.path = target.chat ? "/v1/chat/completions" : "/v1/completions";
    req.headers = auth_headers(target);
    req.headers.emplace("Accept", "text/event-stream");
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");

    const Clock::time_point start = Clock::now();
    StreamReader reader(&r, start, target.chat);
    int status = 0;
    std::string error_body;
    req.response_handler = [&](const httplib::Response& res) {
        status = res.status;
        return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (status != 200) {
            if (error_body.size() < 65536) error_body.append(data, n);
            return true;
        }
        return reader.feed(data, n);
    };
    httplib::Result res = client.send(req);
    r.e2e_ms = ms_between(start, Clock::now());
    *no_reply = !res && status == 0;
    if (!r.error.empty()) return r;  // an error event stopped the stream
    if (!res) {
        r.error = "transport error: " + httplib::to_string(res.error());
        return r;
    }
    if (res->status != 200) {
        r.error =
            "HTTP " + std::to_string(res->status) + ": " + error_text(error_body.empty() ? res->body : error_body);
        return r;
    }
    if (!reader.done()) {
        r.error = "the stream ended without data: [DONE]";
    } else if (!reader.saw_usage()) {
        r.error = "no usage chunk in the stream";
    } else if (!reader.saw_content()) {
        r.error = "no content in the stream";
    } else {
        r.ok = true;
    }
    return r;
}

}  // namespace

RequestResult run_stream_request(httplib::Client& client, const ServerTarget& target, const BenchPrompt& prompt,
                                 int64_t output_len) {
    bool no_reply = false;
    RequestResult r = stream_once(client, target, prompt, output_len, &no_reply);
    // Servers that close a connection after a streamed reply (llama-server) leave the kept-alive
    // socket stale: the next request on it fails before any reply. Once more, on a new connection.
    if (!r.ok && no_reply) r = stream_once(client, target, prompt, output_len, &no_reply);
    return r;
}

}  // namespace kiln::tools
