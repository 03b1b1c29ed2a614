// Request parsing and validation of the OpenAI schema (see openai_schema.h). Responses are built in
// openai_response.cc.
#include "server/openai_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace kiln::server {
namespace {

// Ordered: a JSON Schema's property order is the order the output must follow.
using json = nlohmann::ordered_json;
using Err = std::optional<ApiError>;

constexpr int kMaxJsonDepth = 64;

// Rejects pathological nesting before the parser sees it (cheap; strings are skipped).
bool depth_ok(std::string_view s) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth) return false;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return true;
}

Err parse_object(std::string_view body, json* out) {
    if (!depth_ok(body)) return bad_request("the JSON body is nested too deeply");
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return bad_request("the body is not valid JSON (or not valid UTF-8)");
    if (!j.is_object()) return bad_request("the body must be a JSON object");
    *out = std::move(j);
    return std::nullopt;
}

const json* field(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
}

Err get_number(const json& j, const char* key, double lo, double hi, float* out) {
    const json* v = field(j, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return bad_request(std::string(key) + " must be a number", key);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        return bad_request(std::string(key) + " must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]", key);
    *out = float(x);
    return std::nullopt;
}

// Integers only (2.0 is not one, as in OpenAI's API); [lo, hi].
Err get_int(const json& j, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
    const json* v = field(j, key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) return bad_request(std::string(key) + " must be an integer", key);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi))
        return bad_request(std::string(key) + " must be at most " + std::to_string(hi), key);
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
        return bad_request(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                           key);
    *out = x;
    return std::nullopt;
}

Err get_bool(const json& j, const char* key, bool* out) {
    const json* v = field(j, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return bad_request(std::string(key) + " must be a boolean", key);
    *out = v->get<bool>();
    return std::nullopt;
}

// Fields that change the output and that kiln does not implement: present and not a harmless
// default -> 400 naming the field.
Err reject_unsupported(const json& j, Endpoint ep) {
    auto is_off = [](const json& v) {
        return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number_integer() && v.get<int64_t>() == 0) ||
               (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty());
    };
    static const char* const kFields[] = {"echo",       "suffix",          "functions",
                                          "function_call", "audio",      "modalities",
                                          "prediction", "prompt_logprobs", "guided_whitespace_pattern"};
    for (const char* f : kFields) {
        auto it = j.find(f);
        if (it != j.end() && !is_off(*it)) return bad_request(std::string(f) + " is not supported by kiln serve", f);
    }
    if (const json* v = field(j, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
        return bad_request("best_of is not supported by kiln serve (only 1)", "best_of");
    if (ep == Endpoint::kCompletions && field(j, "top_logprobs"))
        return bad_request("top_logprobs is a chat field; /v1/completions takes logprobs: N", "top_logprobs");
    return std::nullopt;
}

// Completions: logprobs N (an integer). Chat: logprobs (a boolean) and top_logprobs N.
Err parse_logprobs(const json& j, Endpoint ep, SamplingParams* s) {
    std::optional<int64_t> n;
    if (ep == Endpoint::kCompletions) {
        if (auto e = get_int(j, "logprobs", 0, kMaxLogprobs, &n)) return e;
        if (n) s->logprobs = int32_t(*n);
        return std::nullopt;
    }
    bool on = false;
    if (auto e = get_bool(j, "logprobs", &on)) return e;
    if (auto e = get_int(j, "top_logprobs", 0, kMaxLogprobs, &n)) return e;
    if (n && !on) return bad_request("top_logprobs needs logprobs: true", "top_logprobs");
    if (on) s->logprobs = n ? int32_t(*n) : 0;
    return std::nullopt;
}

Err parse_token_list(const json& a, const char* param, std::vector<int32_t>* out) {
    out->clear();
    for (const json& t : a) {
        if (!t.is_number_integer()) return bad_request(std::string(param) + " token ids must be integers", param);
        const int64_t x = t.get<int64_t>();
        if (t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
            return bad_request(std::string(param) + " token id out of range", param);
        if (x < 0 || x > std::numeric_limits<int32_t>::max())
            return bad_request(std::string(param) + " token id out of range", param);
        out->push_back(int32_t(x));
    }
    return std::nullopt;
}

Err parse_prompt(const json& j, GenerationRequest* out) {
    const json* p = field(j, "prompt");
    if (!p) return bad_request("prompt is required", "prompt");
    if (p->is_string()) {
        out->prompt = p->get<std::string>();
        return std::nullopt;
    }
    if (!p->is_array())
        return bad_request("prompt must be a string, a list of token ids or a list of one of them", "prompt");
    if (p->empty()) return bad_request("prompt is empty", "prompt");
    if ((*p)[0].is_number()) {
        out->has_prompt_ids = true;
        return parse_token_list(*p, "prompt", &out->prompt_ids);
    }
    if (p->size() > 1) return bad_request("several prompts in one request are not supported; send one", "prompt");
    const json& one = (*p)[0];
    if (one.is_string()) {
        out->prompt = one.get<std::string>();
        return std::nullopt;
    }
    if (one.is_array()) {
        if (one.empty()) return bad_request("prompt is empty", "prompt");
        out->has_prompt_ids = true;
        return parse_token_list(one, "prompt", &out->prompt_ids);
    }
    return bad_request("prompt must be a string, a list of token ids or a list of one of them", "prompt");
}

// content: a string, null, or a list of {"type": "text", "text": ...} parts (concatenated).
Err message_text(const json& msg, const std::string& role, bool may_be_null, std::optional<std::string>* out) {
    const json* c = field(msg, "content");
    if (c && c->is_string()) {
        *out = c->get<std::string>();
    } else if (c && c->is_array()) {
        std::string text;
        for (const json& part : *c) {
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
                !part["text"].is_string())
                return bad_request("only text content parts are supported", "messages");
            text += part["text"].get<std::string>();
        }
        *out = std::move(text);
    } else if (c || !may_be_null) {
        return bad_request("the content of a " + role + " message must be a string or a list of text parts",
                           "messages");
    }
    return std::nullopt;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
Err parse_history_calls(const json& calls, json* out) {
    if (!calls.is_array()) return bad_request("tool_calls must be a list", "messages");
    *out = json::array();
    for (const json& c : calls) {
        const json* fn = c.is_object() ? field(c, "function") : nullptr;
        const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
        if (!name || !name->is_string())
            return bad_request("each tool call needs function.name (a string)", "messages");
        const json* args = field(*fn, "arguments");
        if (args && !args->is_string() && !args->is_object())
            return bad_request("tool call arguments must be a JSON string", "messages");
        json call = json::object();
        if (const json* id = field(c, "id")) {
            if (!id->is_string()) return bad_request("tool call ids must be strings", "messages");
            call["id"] = *id;
        }
        call["type"] = "function";
        call["function"] = {{"name", *name}, {"arguments", args ? *args : json("{}")}};
        out->push_back(std::move(call));
    }
    return std::nullopt;
}

Err parse_messages(const json& j, GenerationRequest* out) {
    const json* m = field(j, "messages");
    if (!m) return bad_request("messages is required", "messages");
    if (!m->is_array() || m->empty()) return bad_request("messages must be a non-empty list", "messages");
    json msgs = json::array();
    for (const json& msg : *m) {
        if (!msg.is_object()) return bad_request("each message must be an object", "messages");
        const json* role = field(msg, "role");
        if (!role || !role->is_string()) return bad_request("each message needs a string role", "messages");
        const std::string r = role->get<std::string>();
        if (r != "system" && r != "user" && r != "assistant" && r != "developer" && r != "tool")
            return bad_request("message role '" + r + "' is not supported (system, developer, user, assistant, tool)",
                               "messages");
        json tm = {{"role", r == "developer" ? "system" : r}};
        json calls;
        if (r == "assistant") {
            if (const json* tc = field(msg, "tool_calls")) {
                if (auto e = parse_history_calls(*tc, &calls)) return e;
            }
        }
        std::optional<std::string> text;
        if (auto e = message_text(msg, r, r == "assistant", &text)) return e;
        if (text) tm["content"] = *text;
        if (r == "assistant") {
            if (const json* rc = field(msg, "reasoning_content"); rc && rc->is_string()) tm["reasoning_content"] = *rc;
            if (!calls.is_null() && !calls.empty()) tm["tool_calls"] = std::move(calls);
        }
        if (r == "tool") {
            if (const json* id = field(msg, "tool_call_id")) {
                if (!id->is_string()) return bad_request("tool_call_id must be a string", "messages");
                tm["tool_call_id"] = *id;
            }
        }
        if (const json* name = field(msg, "name"); name && name->is_string()) tm["name"] = *name;
        msgs.push_back(std::move(tm));
    }
    out->messages_json = msgs.dump();
    return std::nullopt;
}

// tools, tool_choice, parallel_tool_calls, chat_template_kwargs. `required` and a named function are
// enforced with the grammar engine (the reply is then JSON: a list of {name, parameters}, or the named
// function's arguments), as vLLM does.
Err parse_tools(const json& j, GenerationRequest* out) {
    using TC = GenerationRequest::ToolChoice;
    if (const json* kw = field(j, "chat_template_kwargs")) {
        if (!kw->is_object()) return bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
        out->kwargs_json = kw->dump();
    }
    if (auto e = get_bool(j, "parallel_tool_calls", &out->parallel_tool_calls)) return e;
    const json* tools = field(j, "tools");
    const json* choice = field(j, "tool_choice");
    if (tools && !tools->is_array()) return bad_request("tools must be a list", "tools");
    std::vector<std::string> names;
    json params = json::object();
    if (tools) {
        for (const json& t : *tools) {
            const json* type = t.is_object() ? field(t, "type") : nullptr;
            if (!type || *type != "function") return bad_request("each tool must have type \"function\"", "tools");
            const json* fn = field(t, "function");
            const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
            if (!name || !name->is_string() || name->get<std::string>().empty() || name->get<std::string>().size() > 64)
                return bad_request("each tool needs function.name (1 to 64 characters)", "tools");
            const std::string n = name->get<std::string>();
            if (n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos)
                return bad_request("tool name '" + n + "' may only hold a-z, A-Z, 0-9, _, - and .", "tools");
            if (std::find(names.begin(), names.end(), n) != names.end())
                return bad_request("two tools are named '" + n + "'", "tools");
            const json* p = field(*fn, "parameters");
            if (p && !p->is_object()) return bad_request("function.parameters must be a JSON Schema object", "tools");
            if (const json* d = field(*fn, "description"); d && !d->is_string())
                return bad_request("function.description must be a string", "tools");
            names.push_back(n);
            params[n] = p ? *p : json{{"type", "object"}};
        }
        if (!tools->empty()) out->tools_json = tools->dump();
    }
    out->tool_choice = names.empty() ? TC::kNone : TC::kAuto;
    if (choice) {
        if (choice->is_string()) {
            const std::string c = choice->get<std::string>();
            if (c == "none") out->tool_choice = TC::kNone;
            else if (c == "auto") out->tool_choice = names.empty() ? TC::kNone : TC::kAuto;
            else if (c == "required") out->tool_choice = TC::kRequired;
            else return bad_request("tool_choice must be none, auto, required or {\"type\": \"function\", ...}", "tool_choice");
        } else {
            const json* fn = choice->is_object() ? field(*choice, "function") : nullptr;
            const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
            if (!name || !name->is_string())
                return bad_request("tool_choice must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}",
                                   "tool_choice");
            out->tool_choice = TC::kNamed;
            out->tool_name = name->get<std::string>();
        }
        if (out->tool_choice != TC::kNone && names.empty())
            return bad_request("tool_choice needs tools", "tool_choice");
        if (out->tool_choice == TC::kNamed && std::find(names.begin(), names.end(), out->tool_name) == names.end())
            return bad_request("tool_choice names '" + out->tool_name + "', which is not in tools", "tool_choice");
    }
    if (out->tool_choice == TC::kNone) out->tools_json.clear();  // none: the template does not see the tools
    if (out->tool_choice != TC::kRequired && out->tool_choice != TC::kNamed) return std::nullopt;
    StructuredOutput& so = out->sampling.structured;
    if (!so.kind.empty())
        return bad_request("tool_choice " + std::string(out->tool_choice == TC::kNamed ? "naming a function" : "required") +
                               " cannot be combined with " + out->structured_param,
                           "tool_choice");
    so.kind = "json_schema";
    out->structured_param = "tools";
    if (out->tool_choice == TC::kNamed) {
        so.value = params[out->tool_name].dump();
        return std::nullopt;
    }
    json any = json::array();
    for (const std::string& n : names)
        any.push_back({{"type", "object"},
                       {"properties", {{"name", {{"const", n}}}, {"parameters", params[n]}}},
                       {"required", {"name", "parameters"}}});
    json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}};
    if (!out->parallel_tool_calls) schema["maxItems"] = 1;
    so.value = schema.dump();
    return std::nullopt;
}

Err parse_stop(const json& j, SamplingParams* s) {
    const json* v = field(j, "stop");
    if (!v) return std::nullopt;
    std::vector<std::string> stops;
    if (v->is_string()) {
        stops.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > kMaxStopStrings)
            return bad_request("stop takes at most " + std::to_string(kMaxStopStrings) + " strings", "stop");
        for (const json& x : *v) {
            if (!x.is_string()) return bad_request("stop must be a string or a list of strings", "stop");
            stops.push_back(x.get<std::string>());
        }
    } else {
        return bad_request("stop must be a string or a list of strings", "stop");
    }
    for (std::string& x : stops)
        if (!x.empty()) s->stop.push_back(std::move(x));
    return std::nullopt;
}

Err parse_logit_bias(const json& j, SamplingParams* s) {
    const json* v = field(j, "logit_bias");
    if (!v) return std::nullopt;
    if (!v->is_object()) return bad_request("logit_bias must be an object of token id -> bias", "logit_bias");
    for (auto it = v->begin(); it != v->end(); ++it) {
        const std::string& k = it.key();
        int64_t id = -1;
        if (!k.empty() && k.size() <= 10 && k.find_first_not_of("0123456789") == std::string::npos) id = std::stoll(k);
        if (id < 0 || id > std::numeric_limits<int32_t>::max())
            return bad_request("logit_bias keys must be token ids (non-negative integers)", "logit_bias");
        if (!it->is_number() || !std::isfinite(it->get<double>()) || std::fabs(it->get<double>()) > 100)
            return bad_request("logit_bias values must be numbers in [-100, 100]", "logit_bias");
        s->logit_bias.emplace_back(int32_t(id), it->get<float>());
    }
    return std::nullopt;
}

// One of: response_format (json_object / json_schema), vLLM's guided_json / guided_regex /
// guided_choice / guided_grammar, or vLLM's newer structured_outputs {json, regex, choice, grammar,
// json_object}. The spec itself is compiled (and refused, naming the part) when the request starts.
Err parse_structured(const json& j, GenerationRequest* out) {
    StructuredOutput& so = out->sampling.structured;
    auto set = [&](const char* param, const char* kind) -> Err {
        if (!so.kind.empty())
            return bad_request(std::string("only one of response_format, guided_json, guided_regex, guided_choice, "
                                           "guided_grammar and structured_outputs may be given (") +
                                   out->structured_param + " and " + param + ")",
                               param);
        so.kind = kind;
        out->structured_param = param;
        return std::nullopt;
    };
    auto schema_text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    auto choices = [&](const json& v, const char* param) -> Err {
        if (!v.is_array() || v.empty()) return bad_request(std::string(param) + " must be a non-empty list of strings", param);
        for (const json& c : v) {
            if (!c.is_string()) return bad_request(std::string(param) + " must be a non-empty list of strings", param);
            so.choices.push_back(c.get<std::string>());
        }
        return std::nullopt;
    };
    if (const json* v = field(j, "response_format")) {
        const json* type = v->is_object() ? field(*v, "type") : nullptr;
        if (!type || !type->is_string())
            return bad_request("response_format must be an object with a type", "response_format");
        const std::string t = type->get<std::string>();
        if (t == "json_object") {
            if (auto e = set("response_format", "json_object")) return e;
        } else if (t == "json_schema") {
            const json* js = field(*v, "json_schema");
            const json* schema = js && js->is_object() ? field(*js, "schema") : nullptr;
            if (!schema || !(schema->is_object() || schema->is_boolean()))
                return bad_request("response_format json_schema needs json_schema.schema (an object)",
                                   "response_format.json_schema.schema");
            if (auto e = set("response_format", "json_schema")) return e;
            so.value = schema->dump();
        } else if (t != "text") {
            return bad_request("response_format type must be text, json_object or json_schema, got '" + t + "'",
                               "response_format");
        }
    }
    if (const json* v = field(j, "guided_json")) {
        if (!v->is_object() && !v->is_string() && !v->is_boolean())
            return bad_request("guided_json must be a JSON Schema (an object or its text)", "guided_json");
        if (auto e = set("guided_json", "json_schema")) return e;
        so.value = schema_text(*v);
    }
    if (const json* v = field(j, "guided_regex")) {
        if (!v->is_string()) return bad_request("guided_regex must be a string", "guided_regex");
        if (auto e = set("guided_regex", "regex")) return e;
        so.value = v->get<std::string>();
    }
    if (const json* v = field(j, "guided_choice")) {
        if (auto e = set("guided_choice", "choice")) return e;
        if (auto e = choices(*v, "guided_choice")) return e;
    }
    if (const json* v = field(j, "guided_grammar")) {
        if (!v->is_string()) return bad_request("guided_grammar must be a string (GBNF)", "guided_grammar");
        if (auto e = set("guided_grammar", "grammar")) return e;
        so.value = v->get<std::string>();
    }
    if (const json* v = field(j, "structured_outputs")) {
        if (!v->is_object()) return bad_request("structured_outputs must be an object", "structured_outputs");
        for (auto it = v->begin(); it != v->end(); ++it) {
            const std::string& k = it.key();
            const json& x = it.value();
            if (x.is_null() || (x.is_boolean() && !x.get<bool>())) continue;
            const std::string param = "structured_outputs." + k;
            if (k == "json") {
                if (auto e = set("structured_outputs", "json_schema")) return e;
                so.value = schema_text(x);
            } else if (k == "json_object") {
                if (auto e = set("structured_outputs", "json_object")) return e;
            } else if (k == "regex" || k == "grammar") {
                if (!x.is_string()) return bad_request(param + " must be a string", param);
                if (auto e = set("structured_outputs", k == "regex" ? "regex" : "grammar")) return e;
                so.value = x.get<std::string>();
            } else if (k == "choice") {
                if (auto e = set("structured_outputs", "choice")) return e;
                if (auto e = choices(x, param.c_str())) return e;
            } else if (k != "disable_fallback" && k != "disable_any_whitespace" && k != "disable_additional_properties" &&
                       k != "backend") {  // the three flags ask for what kiln does anyway (docs/structured.md)
                return bad_request(param + " is not supported by kiln serve", param);
            }
        }
    }
    return std::nullopt;
}

Err parse_sampling(const json& j, GenerationRequest* out) {
    SamplingParams& s = out->sampling;
    if (auto e = get_number(j, "temperature", 0, 2, &s.temperature)) return e;
    if (auto e = get_number(j, "top_p", 0, 1, &s.top_p)) return e;
    if (s.top_p <= 0) return bad_request("top_p must be in (0, 1]", "top_p");
    if (auto e = get_number(j, "min_p", 0, 1, &s.min_p)) return e;
    if (auto e = get_number(j, "presence_penalty", -2, 2, &s.presence_penalty)) return e;
    if (auto e = get_number(j, "frequency_penalty", -2, 2, &s.frequency_penalty)) return e;
    if (auto e = get_number(j, "repetition_penalty", 0, 100, &s.repetition_penalty)) return e;
    if (s.repetition_penalty <= 0) return bad_request("repetition_penalty must be > 0", "repetition_penalty");
    std::optional<int64_t> v;
    if (auto e = get_int(j, "top_k", -1, std::numeric_limits<int32_t>::max(), &v)) return e;
    if (v) s.top_k = int32_t(*v);
    v.reset();
    // OpenAI seeds are any 64-bit integer; negative ones wrap.
    if (auto e = get_int(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &v))
        return e;
    if (v) {
        s.seed = uint64_t(*v);
        s.has_seed = true;
    }
    if (auto e = get_bool(j, "ignore_eos", &s.ignore_eos)) return e;
    if (auto e = get_bool(j, "speculative", &out->speculate)) return e;
    if (auto e = parse_stop(j, &s)) return e;
    if (auto e = parse_logprobs(j, out->endpoint, &s)) return e;
    if (auto e = parse_structured(j, out)) return e;
    if (out->endpoint == Endpoint::kChat)
        if (auto e = parse_tools(j, out)) return e;
    return parse_logit_bias(j, &s);
}

}  // namespace

ApiError bad_request(std::string message, std::string param) {
    ApiError e;
    e.status = 400;
    e.message = std::move(message);
    e.param = std::move(param);
    return e;
}

std::optional<ApiError> parse_generation_request(std::string_view body, Endpoint endpoint, GenerationRequest* out) {
    *out = GenerationRequest{};
    out->endpoint = endpoint;
    json j;
    if (auto e = parse_object(body, &j)) return e;
    if (const json* m = field(j, "model")) {
        if (!m->is_string()) return bad_request("model must be a string", "model");
        out->model = m->get<std::string>();
    }
    if (auto e = reject_unsupported(j, endpoint)) return e;
    if (auto e = endpoint == Endpoint::kChat ? parse_messages(j, out) : parse_prompt(j, out)) return e;
    std::optional<int64_t> v;
    if (auto e = get_int(j, "n", 1, kMaxChoices, &v)) return e;
    if (v) out->n = int(*v);
    v.reset();
    if (auto e = get_int(j, "max_tokens", 1, std::numeric_limits<int32_t>::max(), &v)) return e;
    if (v) out->max_tokens = v;
    v.reset();
    if (auto e = get_int(j, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max(), &v)) return e;
    if (v) out->max_tokens = v;
    if (auto e = get_bool(j, "stream", &out->stream)) return e;
    if (const json* so = field(j, "stream_options")) {
        if (!so->is_object()) return bad_request("stream_options must be an object", "stream_options");
        if (!out->stream) return bad_request("stream_options needs stream: true", "stream_options");
        if (auto e = get_bool(*so, "include_usage", &out->include_usage)) {
            e->param = "stream_options.include_usage";
            return e;
        }
    }
    return parse_sampling(j, out);
}

std::optional<ApiError> check_against_model(GenerationRequest* req, int64_t prompt_len, int64_t max_model_len,
                                            int64_t vocab_size) {
    const char* pparam = req->endpoint == Endpoint::kChat ? "messages" : "prompt";
    if (prompt_len <= 0) return bad_request("the prompt has no tokens", pparam);
    if (prompt_len >= max_model_len)
        return bad_request("the prompt has " + std::to_string(prompt_len) + " tokens; the context holds " +
                               std::to_string(max_model_len) + " (prompt + output)",
                           pparam);
    for (int32_t t : req->prompt_ids)
        if (t >= vocab_size)
            return bad_request(
                "prompt token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(vocab_size),
                "prompt");
    for (const auto& [t, b] : req->sampling.logit_bias)
        if (t >= vocab_size)
            return bad_request("logit_bias token id " + std::to_string(t) + " is outside the vocabulary of " +
                                   std::to_string(vocab_size),
                               "logit_bias");
    if (req->sampling.top_k > vocab_size) req->sampling.top_k = 0;  // keeps every token either way
    const int64_t room = max_model_len - prompt_len;
    if (req->max_tokens) {
        if (*req->max_tokens > room)
            return bad_request("max_tokens (" + std::to_string(*req->max_tokens) + ") + the prompt (" +
                                   std::to_string(prompt_len) + " tokens) exceed the context of " +
                                   std::to_string(max_model_len),
                               "max_tokens");
        req->sampling.max_tokens = int32_t(*req->max_tokens);
    } else {
        req->sampling.max_tokens = int32_t(req->endpoint == Endpoint::kChat ? room : std::min<int64_t>(16, room));
    }
    return std::nullopt;
}

std::optional<ApiError> parse_tokenize_request(std::string_view body, std::string* prompt, bool* add_special,
                                               std::string* messages_json) {
    json j;
    if (auto e = parse_object(body, &j)) return e;
    messages_json->clear();
    *add_special = true;
    if (field(j, "messages")) {
        GenerationRequest chat;
        if (auto e = parse_messages(j, &chat)) return e;
        *messages_json = std::move(chat.messages_json);
        return std::nullopt;
    }
    const json* p = field(j, "prompt");
    if (!p || !p->is_string()) return bad_request("prompt must be a string", "prompt");
    *prompt = p->get<std::string>();
    *add_special = true;
    return get_bool(j, "add_special_tokens", add_special);
}

std::optional<ApiError> parse_detokenize_request(std::string_view body, std::vector<int32_t>* tokens) {
    json j;
    if (auto e = parse_object(body, &j)) return e;
    const json* t = field(j, "tokens");
    if (!t || !t->is_array()) return bad_request("tokens must be a list of token ids", "tokens");
    return parse_token_list(*t, "tokens", tokens);
}

}  // namespace kiln::server
