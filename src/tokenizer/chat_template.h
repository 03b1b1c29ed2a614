// Chat templates: renders a model's Jinja chat template (HF tokenizer_config.json "chat_template" or
// GGUF tokenizer.chat_template) over a conversation, as HF transformers' apply_chat_template does
// (Jinja2 with trim_blocks and lstrip_blocks; see jinja_engine.h for the supported subset).
// Unsupported or malformed templates and raise_exception() give an error Status, never a crash.
#pragma once

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

// `extra` adds or overrides template variables (e.g. "tools", "date_string").
core::Result<std::string> render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt, const std::string& bos_token,
                                               const std::string& eos_token, const jinja::Dict& extra = {});

}  // namespace kiln::tokenizer
