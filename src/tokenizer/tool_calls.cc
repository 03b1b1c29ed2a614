// Tool-call formats: detection from the chat template and parsing of generated text (see tool_calls.h).
#include "tokenizer/tool_calls.h"

#include <algorithm>
#include <initializer_list>

namespace kiln::tokenizer {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";

bool contains(std::string_view s, std::string_view x) { return s.find(x) != std::string_view::npos; }

std::string trim(std::string_view s) {
    size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

// Bytes at the end of `text` that are a proper prefix of `marker` (to hold back while streaming).
size_t partial_tail(std::string_view text, std::string_view marker) {
    for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

// A reply without a call marker: all content, less (while streaming) a tail that could still begin one.
ToolParse no_calls(const std::string& text, bool final, std::initializer_list<std::string_view> markers) {
    size_t hold = 0;
    if (!final)
        for (std::string_view m : markers) hold = std::max(hold, partial_tail(text, m));
    ToolParse r;
    r.content = text.substr(0, text.size() - hold);
    return r;
}

// The end of the JSON value starting at text[pos] (after whitespace), or npos if it is not complete.
size_t json_value_end(std::string_view text, size_t pos) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos >= text.size()) return std::string_view::npos;
    char c = text[pos];
    if (c != '{' && c != '[' && c != '"') {  // a scalar: up to a delimiter
        size_t e = pos;
        while (e < text.size() && !std::isspace(static_cast<unsigned char>(text[e])) && text[e] != ',' &&
               text[e] != ']' && text[e] != '}' && text[e] != ';' && text[e] != '<')
            ++e;
        return e;
    }
    int depth = 0;
    bool in_str = false;
    for (size_t p = pos; p < text.size(); ++p) {
        char ch = text[p];
        if (in_str) {
            if (ch == '\\') ++p;
            else if (ch == '"') {
                in_str = false;
                if (depth == 0) return p + 1;
            }
            continue;
        }
        if (ch == '"') in_str = true;
        else if (ch == '{' || ch == '[') ++depth;
        else if (ch == '}' || ch == ']') {
            if (--depth == 0) return p + 1;
        }
    }
    return std::string_view::npos;
}

std::optional<json> parse_json(std::string_view s) {
    json j = json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return std::nullopt;
    return j;
}

// {"name": ..., "arguments"|"parameters": {...} or a JSON string} as a call.
std::optional<ParsedToolCall> call_from_object(const json& j) {
    if (!j.is_object()) return std::nullopt;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string()) return std::nullopt;
    json args = json::object();
    for (const char* key : {"arguments", "parameters"}) {
        auto a = j.find(key);
        if (a == j.end()) continue;
        if (a->is_string()) {
            auto parsed = parse_json(a->get<std::string>());
            if (!parsed || !parsed->is_object()) return std::nullopt;
            args = *parsed;
        } else if (a->is_object()) {
            args = *a;
        } else {
            return std::nullopt;
        }
        break;
    }
    return ParsedToolCall{name->get<std::string>(), args.dump()};
}

std::optional<ParsedToolCall> call_from_json_text(std::string_view s) {
    auto j = parse_json(trim(s));
    return j ? call_from_object(*j) : std::nullopt;
}

// Blocks <open>...<close>: content is the text outside them (before the first, and after the last when
// final); each block body goes through `parse_body`.
template <typename F>
ToolParse parse_blocks(const std::string& text, std::string_view open, std::string_view close, bool final, F&& parse_body) {
    size_t first = text.find(open);
    if (first == std::string::npos) return no_calls(text, final, {open});
    ToolParse r;
    r.content = text.substr(0, first);
    size_t pos = first;
    std::string failed;
    while (pos != std::string::npos) {
        size_t body = pos + open.size();
        size_t end = text.find(close, body);
        if (end == std::string::npos) {  // unclosed: complete only at the end of the generation
            if (final) {
                if (auto c = parse_body(std::string_view(text).substr(body))) r.calls.push_back(*c);
                else failed += text.substr(pos);
            }
            break;
        }
        if (auto c = parse_body(std::string_view(text).substr(body, end - body))) r.calls.push_back(*c);
        else if (final) failed += text.substr(pos, end + close.size() - pos);
        size_t after = end + close.size();
        size_t next = text.find(open, after);
        if (next == std::string::npos) {
            if (final) r.content += trim(text.substr(after)).empty() ? "" : text.substr(after);
            break;
        }
        pos = next;
    }
    r.content += failed;
    return r;
}

// qwen_xml: a parameter value typed by the tool's schema (strings stay strings; other types are JSON when
// they parse as JSON).
json typed_value(const json& tools, const std::string& fn, const std::string& param, const std::string& raw) {
    std::string type;
    if (tools.is_array())
        for (const auto& t : tools) {
            const json* f = t.contains("function") ? &t["function"] : &t;
            if (!f->is_object() || f->value("name", "") != fn) continue;
            if (f->contains("parameters") && (*f)["parameters"].is_object()) {
                const json& props = (*f)["parameters"].value("properties", json::object());
                if (props.is_object() && props.contains(param) && props[param].is_object())
                    type = props[param].value("type", json("")).is_string() ? props[param].value("type", "") : "";
            }
        }
    if (type == "string") return raw;
    if (auto j = parse_json(raw)) return *j;
    return raw;
}

std::optional<ParsedToolCall> parse_qwen_xml_body(const json& tools, std::string_view body) {
    size_t f = body.find("<function=");
    if (f == std::string_view::npos) return std::nullopt;
    size_t name_end = body.find('>', f);
    if (name_end == std::string_view::npos) return std::nullopt;
    std::string name = trim(body.substr(f + 10, name_end - f - 10));
    json args = json::object();
    size_t pos = name_end + 1;
    for (;;) {
        size_t p = body.find("<parameter=", pos);
        size_t fn_end = body.find("</function>", pos);
        if (p == std::string_view::npos || (fn_end != std::string_view::npos && fn_end < p)) break;
        size_t pn_end = body.find('>', p);
        if (pn_end == std::string_view::npos) return std::nullopt;
        std::string pname = trim(body.substr(p + 11, pn_end - p - 11));
        size_t vend = body.find("</parameter>", pn_end);
        size_t next_p = body.find("<parameter=", pn_end);
        if (vend == std::string_view::npos || (next_p != std::string_view::npos && next_p < vend))
            vend = std::min(next_p, fn_end == std::string_view::npos ? body.size() : fn_end);
        std::string value(body.substr(pn_end + 1, vend - pn_end - 1));
        if (!value.empty() && value.front() == '\n') value.erase(0, 1);
        if (!value.empty() && value.back() == '\n') value.pop_back();
        args[pname] = typed_value(tools, name, pname, value);
        pos = vend;
    }
    if (name.empty()) return std::nullopt;
    return ParsedToolCall{name, args.dump()};
}

std::optional<ParsedToolCall> parse_glm_body(const json& tools, std::string_view body) {
    size_t first = body.find("<arg_key>");
    std::string name = trim(body.substr(0, first));
    if (name.empty() || name.find_first_of("\n<>{") != std::string::npos) return std::nullopt;
    json args = json::object();
    size_t pos = first;
    while (pos != std::string_view::npos) {
        size_t kend = body.find("</arg_key>", pos);
        size_t vbeg = kend == std::string_view::npos ? kend : body.find("<arg_value>", kend);
        size_t vend = vbeg == std::string_view::npos ? vbeg : body.find("</arg_value>", vbeg);
        if (vend == std::string_view::npos) return std::nullopt;
        std::string key = trim(body.substr(pos + 9, kend - pos - 9));
        std::string value(body.substr(vbeg + 11, vend - vbeg - 11));
        args[key] = typed_value(tools, name, key, value);
        pos = body.find("<arg_key>", vend);
    }
    return ParsedToolCall{name, args.dump()};
}

ToolParse parse_llama3(const std::string& text, bool final) {
    ToolParse r;
    size_t p = text.find_first_not_of(" \t\r\n");
    constexpr std::string_view kTag = "<|python_tag|>";
    if (p == std::string::npos) {
        r.content = final ? text : "";
        return r;
    }
    std::string_view rest = std::string_view(text).substr(p);
    if (!final && rest.size() < kTag.size() && kTag.substr(0, rest.size()) == rest) return r;  // maybe the tag
    if (rest.substr(0, kTag.size()) == kTag) p += kTag.size();
    else if (rest[0] != '{') {
        r.content = text;
        return r;
    }
    size_t pos = p;
    for (;;) {
        size_t end = json_value_end(text, pos);
        if (end == std::string::npos) {
            if (final) break;
            return r;  // the rest is still being written
        }
        auto c = call_from_json_text(std::string_view(text).substr(pos, end - pos));
        if (!c) break;
        r.calls.push_back(*c);
        pos = text.find_first_not_of(" \t\r\n", end);
        if (pos == std::string::npos) return r;
        if (text[pos] == ';') pos = text.find_first_not_of(" \t\r\n", pos + 1);
        if (pos == std::string::npos) return r;
    }
    if (final) {  // not (all) tool calls: the whole reply is content
        r.calls.clear();
        r.content = text;
    }
    return r;
}

ToolParse parse_mistral(const std::string& text, bool final) {
    constexpr std::string_view kMark = "[TOOL_CALLS]";
    size_t first = text.find(kMark);
    if (first == std::string::npos) return no_calls(text, final, {kMark});
    ToolParse r;
    r.content = text.substr(0, first);
    size_t pos = first;
    while (pos != std::string::npos && text.compare(pos, kMark.size(), kMark) == 0) {
        pos = text.find_first_not_of(" \t\r\n", pos + kMark.size());
        if (pos == std::string::npos) break;
        if (text[pos] == '[') {  // [{"name": ..., "arguments": ...}, ...]
            size_t end = json_value_end(text, pos);
            if (end == std::string::npos) {
                if (final) r.content += text.substr(first);
                return r;
            }
            auto arr = parse_json(std::string_view(text).substr(pos, end - pos));
            if (!arr || !arr->is_array()) {
                if (final) { r.calls.clear(); r.content = text; }
                return r;
            }
            for (const auto& o : *arr)
                if (auto c = call_from_object(o)) r.calls.push_back(*c);
            pos = text.find(kMark, end);
            continue;
        }
        size_t args = text.find("[ARGS]", pos);  // NAME[CALL_ID]id[ARGS]{...}
        if (args == std::string::npos) {
            if (final) r.content += text.substr(pos);
            return r;
        }
        std::string name = text.substr(pos, args - pos);
        if (size_t cid = name.find("[CALL_ID]"); cid != std::string::npos) name.resize(cid);
        size_t start = args + 6, end = json_value_end(text, start);
        if (end == std::string::npos) return r;
        auto obj = parse_json(std::string_view(text).substr(start, end - start));
        if (obj && obj->is_object()) r.calls.push_back({trim(name), obj->dump()});
        pos = text.find(kMark, end);
    }
    return r;
}

ToolParse parse_gpt_oss(const std::string& text, bool final) {
    if (!contains(text, "<|channel|>") && !contains(text, "<|message|>")) return no_calls(text, final, {"<|channel|>"});
    ToolParse r;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t msg = text.find("<|message|>", pos);
        if (msg == std::string::npos) break;  // a header still being written
        std::string header = text.substr(pos, msg - pos);
        size_t body = msg + 11;
        size_t end = std::string::npos;
        std::string_view ender;
        for (std::string_view e : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}) {
            size_t q = text.find(e, body);
            if (q < end) { end = q; ender = e; }
        }
        bool complete = end != std::string::npos || final;
        std::string content = text.substr(body, (end == std::string::npos ? text.size() : end) - body);
        if (end == std::string::npos && !final) content.resize(content.size() - partial_tail(content, "<|end|>"));
        std::string channel;
        if (size_t c = header.find("<|channel|>"); c != std::string::npos) {
            size_t s = c + 11, e = header.find_first_of(" <", s);
            channel = header.substr(s, e == std::string::npos ? std::string::npos : e - s);
        }
        std::string recipient;
        if (size_t t = header.find("to="); t != std::string::npos) {
            size_t e = header.find_first_of(" <", t + 3);
            recipient = header.substr(t + 3, e == std::string::npos ? std::string::npos : e - t - 3);
        }
        if (recipient.rfind("functions.", 0) == 0) {
            if (complete) {
                auto args = parse_json(trim(content));
                if (args && args->is_object()) r.calls.push_back({recipient.substr(10), args->dump()});
                else if (final) r.content += content;
            }
        } else if (channel == "analysis") {
            r.reasoning += content;
        } else if (recipient.empty()) {
            r.content += content;
        }
        if (end == std::string::npos) break;
        pos = end + ender.size();
        if (text.compare(pos, 9, "<|start|>") == 0) pos += 9;
        else if (ender != "<|start|>" && pos < text.size() && text.compare(pos, 9, "<|start|>") != 0 &&
                 text.find("<|message|>", pos) == std::string::npos) {
            if (final) r.content += text.substr(pos);
            break;
        }
    }
    return r;
}

ToolParse parse_deepseek(const std::string& text, bool final) {
    auto body = [](std::string_view b) -> std::optional<ParsedToolCall> {
        size_t sep = b.find(kDsSep);
        if (sep == std::string_view::npos) return std::nullopt;
        std::string left = trim(b.substr(0, sep));
        std::string_view right = b.substr(sep + kDsSep.size());
        std::string name, args;
        if (left == "function") {  // V3 / R1: name on the first line, then a ```json fence
            size_t nl = right.find('\n');
            name = trim(right.substr(0, nl));
            std::string_view rest = nl == std::string_view::npos ? std::string_view() : right.substr(nl + 1);
            size_t fence = rest.find("```");
            if (fence != std::string_view::npos) {
                size_t nl2 = rest.find('\n', fence);
                rest = nl2 == std::string_view::npos ? std::string_view() : rest.substr(nl2 + 1);
                size_t close = rest.rfind("```");
                if (close != std::string_view::npos) rest = rest.substr(0, close);
            }
            args = trim(rest);
        } else {  // V3.1: NAME<｜tool▁sep｜>{...}
            name = left;
            args = trim(right);
        }
        auto j = parse_json(args);
        if (name.empty() || !j || !j->is_object()) return std::nullopt;
        return ParsedToolCall{name, j->dump()};
    };
    size_t begin = text.find(kDsCallsBegin);
    size_t single = text.find(kDsCallBegin);
    if (begin == std::string::npos && single == std::string::npos)
        return no_calls(text, final, {kDsCallsBegin, kDsCallBegin});
    ToolParse r;
    size_t start = std::min(begin, single);
    std::string head = text.substr(0, start);
    std::string region = text.substr(start);
    if (region.compare(0, kDsCallsBegin.size(), kDsCallsBegin) == 0) region.erase(0, kDsCallsBegin.size());
    size_t calls_end = region.find(kDsCallsEnd);
    std::string tail = calls_end == std::string::npos ? "" : region.substr(calls_end + kDsCallsEnd.size());
    if (calls_end != std::string::npos) region.resize(calls_end);
    ToolParse inner = parse_blocks(region, kDsCallBegin, kDsCallEnd, final || calls_end != std::string::npos, body);
    r.calls = std::move(inner.calls);
    r.content = head;
    if (final) r.content += trim(inner.content).empty() ? "" : inner.content;
    if (final) r.content += tail;
    return r;
}

}  // namespace

ToolFormat detect_tool_format(std::string_view t) {
    if (contains(t, "<|channel|>") && contains(t, "to=")) return ToolFormat::kGptOss;
    if (contains(t, "tool▁calls▁begin") || contains(t, "tool▁call▁begin")) return ToolFormat::kDeepSeek;
    if (contains(t, "[TOOL_CALLS]")) return ToolFormat::kMistral;
    if (contains(t, "<tool_call>") && contains(t, "<function=") && contains(t, "<parameter=")) return ToolFormat::kQwenXml;
    if (contains(t, "<tool_call>") && contains(t, "<arg_key>")) return ToolFormat::kGlm;
    if (contains(t, "<tool_call>")) return ToolFormat::kHermes;
    if (contains(t, "<|python_tag|>") || (contains(t, "\"parameters\": ") && contains(t, "<|start_header_id|>")))
        return ToolFormat::kLlama3;
    return ToolFormat::kNone;
}

const char* tool_format_name(ToolFormat f) {
    switch (f) {
        case ToolFormat::kNone: return "none";
        case ToolFormat::kHermes: return "hermes";
        case ToolFormat::kQwenXml: return "qwen_xml";
        case ToolFormat::kGlm: return "glm";
        case ToolFormat::kLlama3: return "llama3";
        case ToolFormat::kMistral: return "mistral";
        case ToolFormat::kGptOss: return "gpt_oss";
        case ToolFormat::kDeepSeek: return "deepseek";
    }
    return "none";
}

std::optional<ToolFormat> tool_format_from_name(std::string_view name) {
    for (ToolFormat f : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwenXml, ToolFormat::kGlm, ToolFormat::kLlama3,
                         ToolFormat::kMistral, ToolFormat::kGptOss, ToolFormat::kDeepSeek})
        if (name == tool_format_name(f)) return f;
    return std::nullopt;
}

ToolParse parse_tool_calls(ToolFormat f, const std::string& text, const json& tools, bool final) {
    switch (f) {
        case ToolFormat::kHermes:
            return parse_blocks(text, "<tool_call>", "</tool_call>", final,
                                [](std::string_view b) { return call_from_json_text(b); });
        case ToolFormat::kQwenXml:
            return parse_blocks(text, "<tool_call>", "</tool_call>", final,
                                [&](std::string_view b) { return parse_qwen_xml_body(tools, b); });
        case ToolFormat::kGlm:
            return parse_blocks(text, "<tool_call>", "</tool_call>", final,
                                [&](std::string_view b) { return parse_glm_body(tools, b); });
        case ToolFormat::kLlama3: return parse_llama3(text, final);
        case ToolFormat::kMistral: return parse_mistral(text, final);
        case ToolFormat::kGptOss: return parse_gpt_oss(text, final);
        case ToolFormat::kDeepSeek: return parse_deepseek(text, final);
        case ToolFormat::kNone: break;
    }
    ToolParse r;
    r.content = text;
    return r;
}

}  // namespace kiln::tokenizer
