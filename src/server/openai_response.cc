// Response, stream-chunk and error JSON of the OpenAI schema (see openai_schema.h). Generated text
// can hold bytes that are not UTF-8 (byte-fallback tokens): they are replaced by U+FFFD rather than
// failing the dump.
#include <nlohmann/json.hpp>

#include "server/openai_schema.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json null_or(const std::string& s) {
    return s.empty() ? json(nullptr) : json(s);
}

json usage_object(const Usage& u) {
    json j = {{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
    return j;
}

json envelope(Endpoint ep, bool chunk, const std::string& id, int64_t created, const std::string& model) {
    const char* object =
        ep == Endpoint::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"system_fingerprint", nullptr}};
}

}  // namespace

std::string error_json(const ApiError& e) {
    json j = {
        {"error", {{"message", e.message}, {"type", e.type}, {"param", null_or(e.param)}, {"code", null_or(e.code)}}}};
    return dump(j);
}

std::string response_json(Endpoint ep, const std::string& id, int64_t created, const std::string& model,
                          const std::vector<ChoiceResult>& choices, const Usage& usage) {
    json j = envelope(ep, false, id, created, model);
    json arr = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        json c = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", null_or(choices[i].finish_reason)}};
        if (ep == Endpoint::kChat)
            c["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
        else
            c["text"] = choices[i].text;
        arr.push_back(std::move(c));
    }
    j["choices"] = std::move(arr);
    j["usage"] = usage_object(usage);
    return dump(j);
}

std::string chunk_json(Endpoint ep, const std::string& id, int64_t created, const std::string& model, int index,
                       const std::string& text, const std::string& finish_reason, bool role_only,
                       bool with_usage_null) {
    json j = envelope(ep, true, id, created, model);
    json c = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", null_or(finish_reason)}};
    if (ep == Endpoint::kChat) {
        if (role_only)
            c["delta"] = {{"role", "assistant"}, {"content", ""}};
        else if (!text.empty())
            c["delta"] = {{"content", text}};
        else
            c["delta"] = json::object();
    } else {
        c["text"] = text;
    }
    j["choices"] = json::array({std::move(c)});
    if (with_usage_null) j["usage"] = nullptr;
    return dump(j);
}

std::string usage_chunk_json(Endpoint ep, const std::string& id, int64_t created, const std::string& model,
                             const Usage& usage) {
    json j = envelope(ep, true, id, created, model);
    j["choices"] = json::array();
    j["usage"] = usage_object(usage);
    return dump(j);
}

std::string models_json(const std::string& model, int64_t created, int64_t max_model_len) {
    json m = {{"id", model},
              {"object", "model"},
              {"created", created},
              {"owned_by", "kiln"},
              {"max_model_len", max_model_len}};
    return dump(json{{"object", "list"}, {"data", json::array({m})}});
}

}  // namespace kiln::server
