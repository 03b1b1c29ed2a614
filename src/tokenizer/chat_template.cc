// render_chat_template: builds the variables HF's render_jinja_template passes to a chat template.
#include "tokenizer/chat_template.h"

namespace kiln::tokenizer {

using jinja::Value;
using json = nlohmann::ordered_json;

Value json_to_value(const json& j) {
    switch (j.type()) {
        case json::value_t::null: return Value::none();
        case json::value_t::boolean: return Value::boolean(j.get<bool>());
        case json::value_t::number_integer: return Value::integer(j.get<int64_t>());
        case json::value_t::number_unsigned: {
            uint64_t u = j.get<uint64_t>();
            return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                         : Value::number(static_cast<double>(u));
        }
        case json::value_t::number_float: return Value::number(j.get<double>());
        case json::value_t::string: return Value::str(j.get<std::string>());
        case json::value_t::array: {
            jinja::List l;
            l.reserve(j.size());
            for (const auto& e : j) l.push_back(json_to_value(e));
            return Value::make_list(std::move(l));
        }
        case json::value_t::object: {
            jinja::Dict d;
            d.reserve(j.size());
            for (const auto& [k, v] : j.items()) d.emplace_back(k, json_to_value(v));
            return Value::make_dict(std::move(d));
        }
        default: return Value::none();
    }
}

namespace {

// HF's _normalize_chat_messages and _alias_reasoning_fields: None-valued keys dropped; a message's reasoning
// (reasoning_content, thinking or reasoning, the first non-null) given as both "thinking" (first, unless the
// message has it) and "reasoning_content".
Value template_message(const json& m) {
    if (!m.is_object()) return json_to_value(m);
    jinja::Dict d;
    const json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
        auto it = m.find(key);
        if (it != m.end() && !it->is_null()) { reasoning = &*it; break; }
    }
    if (reasoning) d.emplace_back("thinking", json_to_value(*reasoning));
    bool has_rc = false;
    for (const auto& [k, v] : m.items()) {
        if (v.is_null()) continue;
        Value val = json_to_value(v);
        if (k == "thinking" && reasoning) { d[0].second = val; continue; }
        if (k == "reasoning_content" && reasoning) { val = json_to_value(*reasoning); has_rc = true; }
        d.emplace_back(k, std::move(val));
    }
    if (reasoning && !has_rc) d.emplace_back("reasoning_content", json_to_value(*reasoning));
    return Value::make_dict(std::move(d));
}

}  // namespace

core::Result<std::string> render_chat_template(const std::string& tmpl, const ChatTemplateInput& in) {
    jinja::List msgs;
    if (in.messages.is_array())
        for (const auto& m : in.messages) msgs.push_back(template_message(m));
    jinja::Dict globals = {{"messages", Value::make_list(std::move(msgs))},
                           {"tools", in.tools.is_null() ? Value::none() : json_to_value(in.tools)},
                           {"documents", Value::none()},
                           {"add_generation_prompt", Value::boolean(in.add_generation_prompt)},
                           {"bos_token", Value::str(in.bos_token)},
                           {"eos_token", Value::str(in.eos_token)}};
    for (const auto& kv : in.extra) globals.push_back(kv);
    jinja::RenderLimits limits;
    limits.now = in.now;
    return jinja::render(tmpl, globals, limits);
}

core::Result<std::string> render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt, const std::string& bos_token,
                                               const std::string& eos_token, const jinja::Dict& extra) {
    ChatTemplateInput in;
    for (const auto& m : messages) in.messages.push_back({{"role", m.role}, {"content", m.content}});
    in.add_generation_prompt = add_generation_prompt;
    in.bos_token = bos_token;
    in.eos_token = eos_token;
    in.extra = extra;
    return render_chat_template(tmpl, in);
}

}  // namespace kiln::tokenizer
