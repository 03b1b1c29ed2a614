// The OpenAI HTTP schema of `kiln serve`, without any network: request bodies of /v1/completions and
// /v1/chat/completions parsed and validated into plain structs, and the JSON of responses, stream
// chunks and errors. Follows the OpenAI API reference (completions, chat completions, streaming
// chunks, error object); fields that would change the output and that kiln does not implement
// (echo, suffix, prompt_logprobs, best_of > 1, functions, ...) are rejected naming the field;
// unknown fields are ignored, as OpenAI-compatible servers do.
// Invariant: parsing never throws and never aborts; every problem becomes an ApiError.
// Checks that need the model (context length, vocabulary size) are done by the server after
// tokenizing (see check_against_model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/engine.h"

namespace kiln::server {

// An OpenAI error: HTTP status plus the `error` object.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // "" -> null
    std::string code;   // "" -> null
};
ApiError bad_request(std::string message, std::string param = "");

enum class Endpoint { kCompletions, kChat };

// One validated generation request (n choices).
struct GenerationRequest {
    Endpoint endpoint = Endpoint::kCompletions;
    std::string model;  // "" = not given
    // Completions: the text or, when has_prompt_ids, the token ids.
    std::string prompt;
    std::vector<int32_t> prompt_ids;
    bool has_prompt_ids = false;
    // Chat: the conversation as the chat template gets it (a JSON array: roles system/user/assistant/tool,
    // text content, assistant tool_calls, tool results' tool_call_id), and the tools (docs/tools.md).
    std::string messages_json;
    std::string tools_json;   // "" or the validated tools array
    std::string kwargs_json;  // chat_template_kwargs: "" or a JSON object
    enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
    ToolChoice tool_choice = ToolChoice::kNone;  // kAuto when tools are given without tool_choice
    std::string tool_name;                       // kNamed: the function
    bool parallel_tool_calls = true;
    int n = 1;
    bool stream = false;
    bool include_usage = false;
    std::optional<int64_t> max_tokens;  // nullopt: the endpoint's default
    SamplingParams sampling;            // max_tokens left for the server to fill
    bool speculate = true;              // kiln's "speculative": false opts out of the server's --spec
    std::string structured_param;       // the field sampling.structured came from (for errors)
};

constexpr int kMaxChoices = 8;
constexpr int kMaxLogprobs = 20;  // completions `logprobs` and chat `top_logprobs` (vLLM's default cap)
constexpr size_t kMaxStopStrings = 16;

// Parses and validates a request body; nullopt on success.
std::optional<ApiError> parse_generation_request(std::string_view body, Endpoint endpoint, GenerationRequest* out);

// The checks that need the model: prompt length against the context, max_tokens (the default
// filled in: 16 for completions, the rest of the context for chat), token ids against the
// vocabulary. `prompt_len` is the encoded prompt's length. Fills req->sampling.max_tokens.
std::optional<ApiError> check_against_model(GenerationRequest* req, int64_t prompt_len, int64_t max_model_len,
                                            int64_t vocab_size);

// /tokenize and /detokenize bodies.
// /tokenize: {"prompt": "...", "add_special_tokens": bool} or, as vLLM takes it, {"messages": [...]}
// (a chat to render with the chat template; *messages_json non-empty then).
std::optional<ApiError> parse_tokenize_request(std::string_view body, std::string* prompt, bool* add_special,
                                               std::string* messages_json);
std::optional<ApiError> parse_detokenize_request(std::string_view body, std::vector<int32_t>* tokens);

// ---- responses (JSON text) ----
std::string error_json(const ApiError& e);

// One generated token's logprobs, with the token strings resolved (bytes: what it adds to the text).
struct LogprobEntry {
    std::string token;
    float logprob = 0;
    std::vector<std::pair<std::string, float>> top;  // best first
};
// The `logprobs` object of a choice or chunk over `tokens` (completions: tokens, token_logprobs,
// top_logprobs with the chosen token included, text_offset counted from `text_offset`; chat: content
// entries with bytes). -inf becomes -9999 (JSON has no infinity), as in vLLM.
struct LogprobsPart {
    const std::vector<LogprobEntry>* tokens = nullptr;  // nullptr: "logprobs": null
    int64_t text_offset = 0;
};

struct ToolCallOut {
    std::string id, name, arguments;
};

struct ChoiceResult {
    std::string text;           // chat with tools: the content once the calls are taken out
    std::string finish_reason;  // "stop" / "length" / "tool_calls" (an aborted request reports "abort")
    std::vector<LogprobEntry> logprobs;
    std::vector<ToolCallOut> tool_calls;
};
struct Usage {
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};
// The whole (non-streamed) response; with_logprobs fills each choice's logprobs object.
std::string response_json(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                          const std::vector<ChoiceResult>& choices, const Usage& usage, bool with_logprobs = false);
// One SSE event body (without "data: "): a text delta of choice `index` and/or its finish reason
// ("" = none yet). For chat, role_only sends the opening {"role": "assistant", "content": ""} delta.
// with_usage_null adds "usage": null (stream_options.include_usage asks for it on every chunk).
std::string chunk_json(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model, int index,
                       const std::string& text, const std::string& finish_reason, bool role_only, bool with_usage_null,
                       const LogprobsPart& logprobs = {});
// A chat chunk whose delta carries tool calls: `first` and on are the calls' indices. Each call goes out as
// OpenAI streams one: a delta with index, id, type and the function's name (arguments ""), then one with
// its arguments.
std::string tool_call_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                                 const std::vector<ToolCallOut>& calls, size_t first, bool with_usage_null);
// One such delta: with `header`, the call's index, id, type, name and `arguments`; without, `arguments` only
// (a fragment of them, as a named tool choice streams its arguments while they are generated).
std::string tool_call_delta_json(const std::string& id, int64_t created, const std::string& model, int index,
                                 size_t call_index, const ToolCallOut* header, const std::string& arguments,
                                 bool with_usage_null);
// The final usage chunk (choices: []).
std::string usage_chunk_json(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                             const Usage& usage);
std::string models_json(const std::string& model, int64_t created, int64_t max_model_len);

}  // namespace kiln::server
