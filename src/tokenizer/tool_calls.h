// Tool calls in generated text: the formats chat models write them in, detected from the model's chat
// template, and a parser that splits a reply into its content and its calls.
//
//   hermes     <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (Qwen 2.5/3, Hermes 2/3, SmolLM3)
//   qwen_xml   <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>  (Qwen3-Coder,
//              Qwen3.5; values typed by the tool's JSON schema)
//   glm        <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>  (GLM 4.5+; values
//              typed by the tool's JSON schema)
//   llama3     [<|python_tag|>]{"name": ..., "parameters": {...}}[; {...}]  (Llama 3.1/3.2/3.3, at the start)
//   mistral    [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]  or  [TOOL_CALLS]NAME[CALL_ID]id[ARGS]{...}
//   gpt_oss    harmony messages: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...};
//              the final channel is the content, the analysis channel the reasoning
//   deepseek   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//              <｜tool▁call▁end｜>...  (V3, R1) or ...<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}... (V3.1)
//
// Streaming: parse the whole text so far with final = false. The content returned then only grows (text
// that could still turn into a call marker is held back) and only complete calls are returned, so a
// caller emits the new part of the content and the calls it has not emitted yet.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tokenizer {

enum class ToolFormat { kNone, kHermes, kQwenXml, kGlm, kLlama3, kMistral, kGptOss, kDeepSeek };

// The format a chat template's tool-call examples and history rendering use; kNone when it shows none.
ToolFormat detect_tool_format(std::string_view chat_template);
const char* tool_format_name(ToolFormat f);
std::optional<ToolFormat> tool_format_from_name(std::string_view name);  // "hermes", "llama3", ...

struct ParsedToolCall {
    std::string name;
    std::string arguments;  // a JSON object, compact
};

struct ToolParse {
    std::string content;
    std::string reasoning;  // gpt_oss's analysis channel
    std::vector<ParsedToolCall> calls;
};

// Splits `text` (generated with special tokens kept) into content and calls. `tools` (the request's tools
// array, or null) types qwen_xml's and glm's parameter values. A call that does not parse stays in the content
// (final) or is not returned yet (not final).
ToolParse parse_tool_calls(ToolFormat f, const std::string& text, const nlohmann::ordered_json& tools, bool final);

}  // namespace kiln::tokenizer
