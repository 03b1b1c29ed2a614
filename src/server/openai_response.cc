// Response, stream-chunk and error JSON of the OpenAI schema (see openai_schema.h). Generated text
// can hold bytes that are not UTF-8 (byte-fallback tokens): they are replaced by U+FFFD rather than
// failing the dump.
#include <cmath>
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

float finite(float lp) {
    return lp < -9999.0f || std::isnan(lp) ? -9999.0f : lp;
}

json bytes_of(const std::string& s) {
    json a = json::array();
    for (char c : s) a.push_back(int(uint8_t(c)));
    return a;
}

json logprobs_object(Endpoint ep, const LogprobsPart& part) {
    if (!part.tokens) return nullptr;
    if (ep == Endpoint::kChat) {
        json content = json::array();
        for (const LogprobEntry& e : *part.tokens) {
            json top = json::array();
            for (const auto& [tok, lp] : e.top)
                top.push_back({{"token", tok}, {"logprob", finite(lp)}, {"bytes", bytes_of(tok)}});
            content.push_back({{"token", e.token},
                               {"logprob", finite(e.logprob)},
                               {"bytes", bytes_of(e.token)},
                               {"top_logprobs", top}});
        }
        return {{"content", std::move(content)}, {"refusal", nullptr}};
    }
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    int64_t offset = part.text_offset;
    for (const LogprobEntry& e : *part.tokens) {
        tokens.push_back(e.token);
        lps.push_back(finite(e.logprob));
        json top = json::object();
        for (const auto& [tok, lp] : e.top) top[tok] = finite(lp);
        top[e.token] = finite(e.logprob);  // the chosen token is always included (OpenAI legacy completions)
        tops.push_back(std::move(top));
        offsets.push_back(offset);
        offset += int64_t(e.token.size());
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(lps)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

}  // namespace

std::string error_json(const ApiError& e) {
    json j = {
        {"error", {{"message", e.message}, {"type", e.type}, {"param", null_or(e.param)}, {"code", null_or(e.code)}}}};
    return dump(j);
}

std::string response_json(Endpoint ep, const std::string& id, int64_t created, const std::string& model,
                          const std::vector<ChoiceResult>& choices, const Usage& usage, bool with_logprobs) {
    json j = envelope(ep, false, id, created, model);
    json arr = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        LogprobsPart part{with_logprobs ? &choices[i].logprobs : nullptr, 0};
        json c = {{"index", i},
                  {"logprobs", logprobs_object(ep, part)},
                  {"finish_reason", null_or(choices[i].finish_reason)}};
        if (ep == Endpoint::kChat) {
            const ChoiceResult& r = choices[i];
            c["message"] = {{"role", "assistant"},
                            {"content", r.tool_calls.empty() || !r.text.empty() ? json(r.text) : json(nullptr)}};
            if (!r.tool_calls.empty()) {
                json calls = json::array();
                for (const ToolCallOut& t : r.tool_calls)
                    calls.push_back({{"id", t.id}, {"type", "function"},
                                     {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
                c["message"]["tool_calls"] = std::move(calls);
            }
        } else
            c["text"] = choices[i].text;
        arr.push_back(std::move(c));
    }
    j["choices"] = std::move(arr);
    j["usage"] = usage_object(usage);
    return dump(j);
}

std::string chunk_json(Endpoint ep, const std::string& id, int64_t created, const std::string& model, int index,
                       const std::string& text, const std::string& finish_reason, bool role_only, bool with_usage_null,
                       const LogprobsPart& logprobs) {
    json j = envelope(ep, true, id, created, model);
    json c = {{"index", index}, {"logprobs", logprobs_object(ep, logprobs)}, {"finish_reason", null_or(finish_reason)}};
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

std::string tool_call_delta_json(const std::string& id, int64_t created, const std::string& model, int index,
                                 size_t call_index, const ToolCallOut* header, const std::string& arguments,
                                 bool with_usage_null) {
    json call = {{"index", call_index}};
    if (header) {
        call["id"] = header->id;
        call["type"] = "function";
        call["function"] = {{"name", header->name}, {"arguments", arguments}};
    } else {
        call["function"] = {{"arguments", arguments}};
    }
    json j = envelope(Endpoint::kChat, true, id, created, model);
    json c = {{"index", index}, {"delta", {{"tool_calls", json::array({call})}}}, {"logprobs", nullptr},
              {"finish_reason", nullptr}};
    j["choices"] = json::array({std::move(c)});
    if (with_usage_null) j["usage"] = nullptr;
    return dump(j);
}

std::string tool_call_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                                 const std::vector<ToolCallOut>& calls, size_t first, bool with_usage_null) {
    std::string out;
    for (size_t k = first; k < calls.size(); ++k) {
        if (!out.empty()) out += "\n\ndata: ";
        out += tool_call_delta_json(id, created, model, index, k, &calls[k], "", with_usage_null);
        out += "\n\ndata: ";
        out += tool_call_delta_json(id, created, model, index, k, nullptr, calls[k].arguments, with_usage_null);
    }
    return out;
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
