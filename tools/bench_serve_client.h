// The HTTP side of `kiln bench serve`: reaching a `kiln serve` (or any OpenAI-compatible server),
// tokenizing prompts through its /tokenize route, and timing one streamed completion.
// A stream is read as server-sent events: `data: {json}` lines, `: comment` lines (keep-alive
// probes) ignored, `data: [DONE]` last. A request succeeds only with HTTP 200, no error object in
// the stream, a usage chunk (stream_options.include_usage) and the final [DONE].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace kiln::tools {

struct ServerTarget {
    std::string host;
    int port = 8000;
    std::string api_key;  // sent as `Authorization: Bearer KEY` when set
    std::string model;    // the request's `model` field when set
    bool chat = false;    // /v1/chat/completions instead of /v1/completions
};

// Parses `http://HOST[:PORT][/]` (port 80 when absent). False with *error set otherwise.
bool parse_server_url(const std::string& url, ServerTarget* target, std::string* error);

// A client with the benchmark's timeouts (connect 5 s, read 600 s) and keep-alive on.
std::unique_ptr<httplib::Client> make_client(const ServerTarget& target);

// GET /health until it answers 200 or `wait_s` seconds pass. False with *error set.
bool wait_for_health(const ServerTarget& target, double wait_s, std::string* error);

// The first model id of GET /v1/models ("" when the route fails).
std::string served_model_name(httplib::Client& client, const ServerTarget& target);

// POST /tokenize {"prompt": text, "add_special_tokens": add_special}. False with *error set.
bool tokenize_text(httplib::Client& client, const ServerTarget& target, const std::string& text, bool add_special,
                   std::vector<int32_t>* ids, int64_t* max_model_len, std::string* error);

struct BenchPrompt {
    std::vector<int32_t> ids;  // sent as `prompt` to /v1/completions
    std::string text;          // sent as the user message to /v1/chat/completions
};

struct RequestResult {
    bool ok = false;
    std::string error;                             // why it failed
    double ttft_ms = 0;                            // send -> first event with non-empty text
    double e2e_ms = 0;                             // send -> end of the stream
    std::vector<double> itl_ms;                    // gaps between successive content events
    int64_t prompt_tokens = 0, output_tokens = 0;  // from the usage chunk
};

// Sends one streamed request for `output_len` tokens (greedy, ignore_eos) and times it.
RequestResult run_stream_request(httplib::Client& client, const ServerTarget& target, const BenchPrompt& prompt,
                                 int64_t output_len);

}  // namespace kiln::tools
