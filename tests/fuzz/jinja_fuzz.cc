// libFuzzer target for the Jinja engine: the input is a chat template, rendered over a small conversation
// with tools, tool calls and reasoning, so ASan/UBSan see the lexer, the parser and the evaluator (macros,
// loops, filters, methods) on hostile templates. Limits are small so runaway loops end quickly.
// Corpus: tests/fuzz/corpus/jinja.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/chat_template.h"

using kiln::tokenizer::ChatTemplateInput;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 8192) return 0;
    static const ChatTemplateInput input = [] {
        ChatTemplateInput in;
        in.messages = nlohmann::ordered_json::parse(R"([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris? \u00e9\u65e5"},
            {"role": "assistant", "reasoning_content": "think", "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}])");
        in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
        in.add_generation_prompt = true;
        in.bos_token = "<s>";
        in.now = 0;
        return in;
    }();
    const std::string tmpl(reinterpret_cast<const char*>(data), size);
    (void)kiln::tokenizer::render_chat_template(tmpl, input);
    return 0;
}
