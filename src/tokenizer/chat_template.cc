// render_chat_template: builds the variables HF passes to a chat template and renders it.
#include "tokenizer/chat_template.h"

namespace kiln::tokenizer {

core::Result<std::string> render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt, const std::string& bos_token,
                                               const std::string& eos_token, const jinja::Dict& extra) {
    using jinja::Value;
    jinja::List msgs;
    for (const auto& m : messages)
        msgs.push_back(Value::make_dict({{"role", Value::str(m.role)}, {"content", Value::str(m.content)}}));
    jinja::Dict globals = {{"messages", Value::make_list(std::move(msgs))},
                           {"add_generation_prompt", Value::boolean(add_generation_prompt)},
                           {"bos_token", Value::str(bos_token)},
                           {"eos_token", Value::str(eos_token)}};
    for (const auto& kv : extra) globals.push_back(kv);
    return jinja::render(tmpl, globals);
}

}  // namespace kiln::tokenizer
