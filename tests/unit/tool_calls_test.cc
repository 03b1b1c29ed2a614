// Tool-call formats: detection over the real templates of the chat-template corpus, parsing of replies
// written the way those templates render tool calls in history, and the streaming contract (every prefix
// parsed with final = false gives a prefix of the final content and of the final calls).
#include "tokenizer/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

namespace kiln::tokenizer {
namespace {

using json = nlohmann::ordered_json;

json goldens() {
    std::string path = std::string(__FILE__);
    path = path.substr(0, path.rfind('/')) + "/../golden/data/chat_templates.json";
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
}

TEST(ToolCalls, DetectsTheFormatOfRealTemplates) {
    json g = goldens();
    const std::map<std::string, ToolFormat> expect = {
        {"Qwen-Qwen2.5-7B-Instruct", ToolFormat::kHermes},
        {"Qwen-Qwen3-0.6B", ToolFormat::kHermes},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolFormat::kHermes},
        {"Qwen3.5-4B", ToolFormat::kQwenXml},
        {"Qwen3-Coder", ToolFormat::kQwenXml},
        {"GLM-4.6", ToolFormat::kGlm},
        {"GLM-4.7-Flash", ToolFormat::kGlm},
        {"meta-llama-Llama-3.1-8B-Instruct", ToolFormat::kLlama3},
        {"meta-llama-Llama-3.2-3B-Instruct", ToolFormat::kLlama3},
        {"meta-llama-Llama-3.3-70B-Instruct", ToolFormat::kLlama3},
        {"mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::kMistral},
        {"Mistral-Small-3.2-24B-Instruct-2506", ToolFormat::kMistral},
        {"openai-gpt-oss-120b", ToolFormat::kGptOss},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFormat::kDeepSeek},
        {"deepseek-ai-DeepSeek-V3.1", ToolFormat::kDeepSeek},
        {"google-gemma-2-2b-it", ToolFormat::kNone},
        {"SmolLM2-135M-Instruct", ToolFormat::kNone},
    };
    for (const auto& [name, f] : expect) {
        ASSERT_TRUE(g["templates"].contains(name)) << name;
        EXPECT_EQ(tool_format_name(detect_tool_format(g["templates"][name].get<std::string>())), std::string(tool_format_name(f)))
            << name;
    }
}

struct Case {
    ToolFormat format;
    std::string text;
    std::string content;
    std::vector<ParsedToolCall> calls;
};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}}}}}])");

std::vector<Case> cases() {
    return {
        {ToolFormat::kHermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         "Let me check.\n", {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::kHermes,
         "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
         "", {{"a", "{}"}, {"b", R"({"x":1})"}}},
        {ToolFormat::kHermes, "No tools needed: 4.", "No tools needed: 4.", {}},
        {ToolFormat::kHermes, "<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", {}},
        {ToolFormat::kQwenXml,
         "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
         "<parameter=zip>\n94103\n</parameter>\n</function>\n</tool_call>",
         "Sure.\n", {{"get_weather", R"({"city":"San Francisco","days":3,"zip":"94103"})"}}},
        {ToolFormat::kGlm,
         "I will check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York</arg_value>\n"
         "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
         "I will check.\n", {{"get_weather", R"({"city":"New York","days":2})"}}},
        {ToolFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
         {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::kLlama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}", "",
         {{"a", R"({"x":1})"}, {"b", "{}"}}},
        {ToolFormat::kLlama3, "The answer is {x}.", "The answer is {x}.", {}},
        {ToolFormat::kLlama3, "{\"answer\": 4}", "{\"answer\": 4}", {}},
        {ToolFormat::kMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcdef123\"}]", "",
         {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::kMistral, "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[CALL_ID]x1[ARGS]{\"q\": \"a\"}",
         "Checking.", {{"get_weather", R"({"city":"Paris"})"}, {"search", R"({"q":"a"})"}}},
        {ToolFormat::kGptOss,
         "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
         "<|constrain|>json<|message|>{\"city\":\"Paris\"}",
         "", {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::kGptOss, "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
         "It is 4.", {}},
        {ToolFormat::kDeepSeek,
         "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "Let me look.", {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::kDeepSeek,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
         "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "", {{"get_weather", R"({"city":"Paris"})"}, {"search", R"({"q":1})"}}},
    };
}

TEST(ToolCalls, ParsesEachFormat) {
    for (const Case& c : cases()) {
        ToolParse p = parse_tool_calls(c.format, c.text, kTools, true);
        EXPECT_EQ(p.content, c.content) << c.text;
        ASSERT_EQ(p.calls.size(), c.calls.size()) << c.text;
        for (size_t k = 0; k < c.calls.size(); ++k) {
            EXPECT_EQ(p.calls[k].name, c.calls[k].name) << c.text;
            EXPECT_EQ(p.calls[k].arguments, c.calls[k].arguments) << c.text;
        }
    }
}

// What a stream emits (the new content of each prefix, the calls not yet emitted) adds up to the final parse,
// and nothing emitted is ever taken back.
TEST(ToolCalls, StreamingPrefixesOnlyGrow) {
    for (const Case& c : cases()) {
        const ToolParse whole = parse_tool_calls(c.format, c.text, kTools, true);
        std::string emitted;
        size_t calls = 0;
        for (size_t n = 0; n <= c.text.size(); ++n) {
            ToolParse p = parse_tool_calls(c.format, c.text.substr(0, n), kTools, false);
            ASSERT_EQ(p.content.compare(0, emitted.size(), emitted), 0) << c.text << " at " << n;
            ASSERT_EQ(whole.content.compare(0, p.content.size(), p.content), 0) << c.text << " at " << n << ": " << p.content;
            ASSERT_LE(p.calls.size(), whole.calls.size()) << c.text << " at " << n;
            for (size_t k = 0; k < p.calls.size(); ++k) ASSERT_EQ(p.calls[k].arguments, whole.calls[k].arguments) << c.text;
            ASSERT_GE(p.calls.size(), calls);
            emitted = p.content;
            calls = p.calls.size();
        }
    }
}

TEST(ToolCalls, FormatNames) {
    for (const char* n : {"none", "hermes", "qwen_xml", "glm", "llama3", "mistral", "gpt_oss", "deepseek"}) {
        auto f = tool_format_from_name(n);
        ASSERT_TRUE(f.has_value()) << n;
        EXPECT_STREQ(tool_format_name(*f), n);
    }
    EXPECT_FALSE(tool_format_from_name("nope").has_value());
}

}  // namespace
}  // namespace kiln::tokenizer
