// Chat templates: renders a model's Jinja chat template (HF tokenizer_config.json "chat_template" or GGUF
// tokenizer.chat_template) over a conversation exactly as HF transformers' apply_chat_template does: the
// variables messages, tools, documents, add_generation_prompt, bos_token, eos_token (plus any extra ones),
// messages' null-valued keys dropped and their reasoning aliased under reasoning_content and thinking.
// Templates the engine cannot render and raise_exception() give an error Status, never a crash.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja_engine.h"

namespace kiln::tokenizer {

struct ChatMessage {
    std::string role;
    std::string content;
};

struct ChatTemplateInput {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style message objects
    nlohmann::ordered_json tools;  // null (no tools) or an array of {"type": "function", "function": {...}}
    bool add_generation_prompt = false;
    std::string bos_token, eos_token;
    jinja::Dict extra;  // more variables (enable_thinking, date_string, ...); they override the ones above
    int64_t now = -1;   // strftime_now's clock in Unix seconds (UTC); -1 = the system clock
};

core::Result<std::string> render_chat_template(const std::string& tmpl, const ChatTemplateInput& input);

// Plain role/content conversations. `extra` adds or overrides template variables.
core::Result<std::string> render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt, const std::string& bos_token,
                                               const std::string& eos_token, const jinja::Dict& extra = {});

// A JSON value as a template value (objects keep their key order, which tojson prints).
jinja::Value json_to_value(const nlohmann::ordered_json& j);

}  // namespace kiln::tokenizer
