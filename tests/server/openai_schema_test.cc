// Request parsing and validation of src/server/openai_schema (no network, no model): accepted
// shapes of every field, the 4xx of malformed, mistyped, out-of-range and unsupported fields, the
// model-dependent checks (context, vocabulary, default max_tokens), and the response/chunk JSON.
#include "server/openai_schema.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

namespace kiln::server {
namespace {

using json = nlohmann::json;

std::optional<ApiError> parse(const std::string& body, GenerationRequest* r, Endpoint ep = Endpoint::kCompletions) {
    return parse_generation_request(body, ep, r);
}

TEST(OpenAiSchema, ParsesACompletionRequest) {
    GenerationRequest r;
    auto e = parse(R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
        "top_k": 40, "min_p": 0.1, "n": 3, "stop": ["a", "b"], "seed": -1, "presence_penalty": 1,
        "frequency_penalty": -1, "repetition_penalty": 1.2, "logit_bias": {"5": -100, "7": 2.5},
        "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}, "unknown": {"x": [1]}})",
                   &r);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.prompt, "hi");
    EXPECT_EQ(r.max_tokens, 7);
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
    EXPECT_EQ(r.sampling.top_k, 40);
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(r.sampling.has_seed);
    EXPECT_EQ(r.sampling.seed, ~uint64_t(0));
    ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
    EXPECT_TRUE(r.sampling.ignore_eos);
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiSchema, PromptShapes) {
    GenerationRequest r;
    ASSERT_FALSE(parse(R"({"prompt": [1, 2, 3]})", &r));
    EXPECT_TRUE(r.has_prompt_ids);
    EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    ASSERT_FALSE(parse(R"({"prompt": [[4, 5]]})", &r));
    EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{4, 5}));
    ASSERT_FALSE(parse(R"({"prompt": ["one"]})", &r));
    EXPECT_EQ(r.prompt, "one");
    EXPECT_FALSE(r.has_prompt_ids);
}

TEST(OpenAiSchema, ChatMessages) {
    GenerationRequest r;
    auto e = parse(R"({"messages": [{"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null}], "max_completion_tokens": 3})",
                   &r, Endpoint::kChat);
    ASSERT_FALSE(e) << e->message;
    json m = json::parse(r.messages_json);
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[1]["content"], "ab");
    EXPECT_FALSE(m[2].contains("content"));  // null content left out, as HF drops None keys
    EXPECT_EQ(r.max_tokens, 3);
}

TEST(OpenAiSchema, RejectsBadBodies) {
    const struct {
        const char* body;
        const char* param;
    } cases[] = {
        {"{bad", ""},
        {"", ""},
        {"[]", ""},
        {R"({"max_tokens": 1})", "prompt"},
        {R"({"prompt": 5})", "prompt"},
        {R"({"prompt": ["a", "b"]})", "prompt"},
        {R"({"prompt": [-1]})", "prompt"},
        {R"({"prompt": [1.5]})", "prompt"},
        {R"({"prompt": "x", "max_tokens": "3"})", "max_tokens"},
        {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
        {R"({"prompt": "x", "max_tokens": 99999999999})", "max_tokens"},
        {R"({"prompt": "x", "temperature": -1})", "temperature"},
        {R"({"prompt": "x", "top_p": 0})", "top_p"},
        {R"({"prompt": "x", "top_k": -2})", "top_k"},
        {R"({"prompt": "x", "n": 9})", "n"},
        {R"({"prompt": "x", "n": 1.0})", "n"},
        {R"({"prompt": "x", "stop": 3})", "stop"},
        {R"({"prompt": "x", "seed": 1e30})", "seed"},
        {R"({"prompt": "x", "logit_bias": {"a": 1}})", "logit_bias"},
        {R"({"prompt": "x", "logit_bias": {"1": 101}})", "logit_bias"},
        {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
        {R"({"prompt": "x", "logprobs": 2.5})", "logprobs"},
        {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
        {R"({"prompt": "x", "prompt_logprobs": 1})", "prompt_logprobs"},
        {R"({"prompt": "x", "echo": true})", "echo"},
        {R"({"prompt": "x", "suffix": "s"})", "suffix"},
        {R"({"prompt": "x", "best_of": 2})", "best_of"},
        {R"({"prompt": "x", "model": 3})", "model"},
        {"\"just a string\"", ""},
    };
    for (const auto& c : cases) {
        GenerationRequest r;
        auto e = parse(c.body, &r);
        ASSERT_TRUE(e) << c.body;
        EXPECT_EQ(e->status, 400) << c.body;
        EXPECT_EQ(e->param, c.param) << c.body;
        EXPECT_FALSE(e->message.empty());
    }
    GenerationRequest r;
    EXPECT_TRUE(parse("{\"prompt\": \"\xff\"}", &r));                             // invalid UTF-8
    EXPECT_TRUE(parse(std::string(100000, '[') + std::string(100000, ']'), &r));  // nesting
    EXPECT_TRUE(parse(R"({"messages": []})", &r, Endpoint::kChat));
    EXPECT_TRUE(parse(R"({"messages": [{"role": "wizard", "content": "x"}]})", &r, Endpoint::kChat));
    EXPECT_TRUE(parse(R"({"messages": [{"role": "user", "content": "x"}], "functions": [{}]})", &r, Endpoint::kChat));
}

TEST(OpenAiSchema, HarmlessDefaultsOfUnsupportedFieldsAreAccepted) {
    GenerationRequest r;
    EXPECT_FALSE(parse(R"({"prompt": "x", "logprobs": null, "echo": false, "best_of": 1, "suffix": ""})", &r));
    EXPECT_FALSE(parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false,
        "response_format": {"type": "text"}, "tools": []})",
                       &r, Endpoint::kChat));
}

TEST(OpenAiSchema, ChecksAgainstTheModel) {
    GenerationRequest r;
    ASSERT_FALSE(parse(R"({"prompt": "x"})", &r));
    ASSERT_FALSE(check_against_model(&r, 10, 512, 100));
    EXPECT_EQ(r.sampling.max_tokens, 16);  // completions default
    ASSERT_FALSE(parse(R"({"prompt": "x"})", &r));
    ASSERT_FALSE(check_against_model(&r, 500, 512, 100));
    EXPECT_EQ(r.sampling.max_tokens, 12);  // clipped default
    ASSERT_FALSE(parse(R"({"messages": [{"role": "user", "content": "x"}]})", &r, Endpoint::kChat));
    ASSERT_FALSE(check_against_model(&r, 12, 512, 100));
    EXPECT_EQ(r.sampling.max_tokens, 500);  // chat default: the rest of the context
    ASSERT_FALSE(parse(R"({"prompt": "x", "max_tokens": 503})", &r));
    EXPECT_EQ(check_against_model(&r, 10, 512, 100)->param, "max_tokens");
    ASSERT_FALSE(parse(R"({"prompt": "x"})", &r));
    EXPECT_TRUE(check_against_model(&r, 512, 512, 100));  // no room
    ASSERT_FALSE(parse(R"({"prompt": [1, 100]})", &r));
    EXPECT_EQ(check_against_model(&r, 2, 512, 100)->param, "prompt");
    ASSERT_FALSE(parse(R"({"prompt": "x", "logit_bias": {"100": 1}})", &r));
    EXPECT_EQ(check_against_model(&r, 2, 512, 100)->param, "logit_bias");
}

TEST(OpenAiSchema, ResponsesAndChunks) {
    json e = json::parse(error_json({404, "no", "invalid_request_error", "model", "model_not_found"}));
    EXPECT_EQ(e["error"]["code"], "model_not_found");
    EXPECT_TRUE(json::parse(error_json(bad_request("x")))["error"]["param"].is_null());
    json r = json::parse(response_json(Endpoint::kChat, "id1", 1, "m", {{"hi\xff", "stop", {}, {}}}, {3, 2, 0}));
    EXPECT_EQ(r["object"], "chat.completion");
    EXPECT_EQ(r["choices"][0]["message"]["content"], "hi\xef\xbf\xbd");  // invalid UTF-8 replaced
    EXPECT_EQ(r["usage"]["total_tokens"], 5);
    json c = json::parse(chunk_json(Endpoint::kCompletions, "id", 1, "m", 2, "t", "", false, true));
    EXPECT_EQ(c["choices"][0]["index"], 2);
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(c["usage"].is_null());
    json role = json::parse(chunk_json(Endpoint::kChat, "id", 1, "m", 0, "", "", true, false));
    EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
    json u = json::parse(usage_chunk_json(Endpoint::kChat, "id", 1, "m", {1, 2, 0}));
    EXPECT_TRUE(u["choices"].empty());
    EXPECT_EQ(u["usage"]["completion_tokens"], 2);
}

TEST(OpenAiSchema, Logprobs) {
    GenerationRequest r;
    ASSERT_FALSE(parse(R"({"prompt": "x", "logprobs": 3})", &r));
    EXPECT_EQ(r.sampling.logprobs, 3);
    ASSERT_FALSE(parse(R"({"prompt": "x", "logprobs": 0})", &r));
    EXPECT_EQ(r.sampling.logprobs, 0);
    ASSERT_FALSE(parse(R"({"prompt": "x", "logprobs": null})", &r));
    EXPECT_EQ(r.sampling.logprobs, -1);
    EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": 21})", &r)->param, "logprobs");
    EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": true})", &r)->param, "logprobs");
    EXPECT_EQ(parse(R"({"prompt": "x", "top_logprobs": 2})", &r)->param, "top_logprobs");
    auto chat = [](const char* body, GenerationRequest* out) {
        return parse_generation_request(body, Endpoint::kChat, out);
    };
    const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
    ASSERT_FALSE(chat(("{" + msgs + R"(, "logprobs": true, "top_logprobs": 4})").c_str(), &r));
    EXPECT_EQ(r.sampling.logprobs, 4);
    ASSERT_FALSE(chat(("{" + msgs + R"(, "logprobs": true})").c_str(), &r));
    EXPECT_EQ(r.sampling.logprobs, 0);
    ASSERT_FALSE(chat(("{" + msgs + R"(, "logprobs": false})").c_str(), &r));
    EXPECT_EQ(r.sampling.logprobs, -1);
    EXPECT_EQ(chat(("{" + msgs + R"(, "top_logprobs": 2})").c_str(), &r)->param, "top_logprobs");
    EXPECT_EQ(chat(("{" + msgs + R"(, "logprobs": 2})").c_str(), &r)->param, "logprobs");
    EXPECT_EQ(chat(("{" + msgs + R"(, "logprobs": true, "top_logprobs": 99})").c_str(), &r)->param, "top_logprobs");

    const float inf = std::numeric_limits<float>::infinity();
    std::vector<LogprobEntry> lps = {{"ab", -0.5f, {{"ab", -0.5f}, {"c", -1.5f}}}, {"\xc3", -inf, {}}};
    json c = json::parse(response_json(Endpoint::kCompletions, "id", 1, "m", {{"ab?", "length", lps, {}}}, {}, true));
    const json& l = c["choices"][0]["logprobs"];
    EXPECT_EQ(l["tokens"][0], "ab");
    EXPECT_EQ(l["token_logprobs"][1], -9999.0);  // JSON has no -inf
    EXPECT_EQ(l["text_offset"][1], 2);
    EXPECT_EQ(l["top_logprobs"][0]["c"], -1.5);
    EXPECT_EQ(l["top_logprobs"][1].size(), 1u);  // the chosen token is always there
    json h = json::parse(response_json(Endpoint::kChat, "id", 1, "m", {{"ab?", "length", lps, {}}}, {}, true));
    const json& content = h["choices"][0]["logprobs"]["content"];
    EXPECT_EQ(content[1]["bytes"], json::array({0xc3}));
    EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "c");
    EXPECT_TRUE(json::parse(response_json(Endpoint::kChat, "id", 1, "m", {{"ab", "stop", lps, {}}}, {},
                                          false))["choices"][0]["logprobs"]
                    .is_null());
    LogprobsPart part{&lps, 10};
    json k = json::parse(chunk_json(Endpoint::kCompletions, "id", 1, "m", 0, "ab", "", false, false, part));
    EXPECT_EQ(k["choices"][0]["logprobs"]["text_offset"][0], 10);
}

TEST(OpenAiSchema, TokenizeBodies) {
    std::string p;
    bool add = false;
    std::string m;
    EXPECT_FALSE(parse_tokenize_request(R"({"prompt": "a b"})", &p, &add, &m));
    EXPECT_EQ(p, "a b");
    EXPECT_TRUE(add);
    EXPECT_TRUE(m.empty());
    EXPECT_TRUE(parse_tokenize_request(R"({"prompt": 1})", &p, &add, &m));
    // vLLM's chat form: the messages, checked as /v1/chat/completions checks them.
    EXPECT_FALSE(parse_tokenize_request(R"({"messages": [{"role": "user", "content": "hi"}]})", &p, &add, &m));
    ASSERT_EQ(json::parse(m).size(), 1u);
    EXPECT_EQ(json::parse(m)[0]["content"], "hi");
    EXPECT_TRUE(parse_tokenize_request(R"({"messages": []})", &p, &add, &m));
    EXPECT_TRUE(parse_tokenize_request(R"({"messages": [{"role": "user"}]})", &p, &add, &m));
    std::vector<int32_t> ids;
    EXPECT_FALSE(parse_detokenize_request(R"({"tokens": [1, 2]})", &ids));
    EXPECT_EQ(ids.size(), 2u);
    EXPECT_TRUE(parse_detokenize_request(R"({"tokens": [-1]})", &ids));
    EXPECT_TRUE(parse_detokenize_request(R"({"tokens": "1"})", &ids));
}

TEST(OpenAiSchema, StructuredOutputFields) {
    GenerationRequest r;
    const std::string chat = R"("messages": [{"role": "user", "content": "x"}])";
    ASSERT_FALSE(parse("{" + chat + R"(, "response_format": {"type": "json_object"}})", &r, Endpoint::kChat));
    EXPECT_EQ(r.sampling.structured.kind, "json_object");
    EXPECT_EQ(r.structured_param, "response_format");
    // The schema keeps its property order (z before a), as the output must.
    ASSERT_FALSE(parse("{" + chat + R"(, "response_format": {"type": "json_schema", "json_schema":
        {"name": "n", "schema": {"type": "object", "properties": {"z": {"type": "integer"}, "a": {}}}}}})",
                       &r, Endpoint::kChat));
    EXPECT_EQ(r.sampling.structured.kind, "json_schema");
    EXPECT_LT(r.sampling.structured.value.find("\"z\""), r.sampling.structured.value.find("\"a\""));
    ASSERT_FALSE(parse(R"({"prompt": "x", "guided_choice": ["a", "b"]})", &r));
    EXPECT_EQ(r.sampling.structured.kind, "choice");
    EXPECT_EQ(r.sampling.structured.choices, (std::vector<std::string>{"a", "b"}));
    ASSERT_FALSE(parse(R"({"prompt": "x", "guided_regex": "a+"})", &r));
    EXPECT_EQ(r.sampling.structured.kind, "regex");
    ASSERT_FALSE(parse(R"({"prompt": "x", "guided_json": "{\"type\": \"string\"}"})", &r));
    EXPECT_EQ(r.sampling.structured.value, R"({"type": "string"})");
    ASSERT_FALSE(parse(R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= \"a\""}})", &r));
    EXPECT_EQ(r.sampling.structured.kind, "grammar");
    ASSERT_FALSE(parse(R"({"prompt": "x", "response_format": {"type": "text"}})", &r));
    EXPECT_EQ(r.sampling.structured.kind, "");

    auto err = parse(R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["a"]})", &r);
    ASSERT_TRUE(err);
    EXPECT_NE(err->message.find("only one of"), std::string::npos);
    err = parse("{" + chat + R"(, "response_format": {"type": "json_schema"}})", &r, Endpoint::kChat);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->param, "response_format.json_schema.schema");
    err = parse(R"({"prompt": "x", "response_format": {"type": "xml"}})", &r);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->param, "response_format");
    EXPECT_TRUE(parse(R"({"prompt": "x", "guided_choice": []})", &r));
    EXPECT_TRUE(parse(R"({"prompt": "x", "guided_choice": ["a", 1]})", &r));
    EXPECT_TRUE(parse(R"({"prompt": "x", "guided_regex": 5})", &r));
    EXPECT_TRUE(parse(R"({"prompt": "x", "structured_outputs": {"lark": "x"}})", &r));
    EXPECT_TRUE(parse(R"({"prompt": "x", "guided_whitespace_pattern": " "})", &r));
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

// tools / tool_choice / tool messages: validated, the history passed on for the template, required and
// named choices turned into JSON schemas for the grammar engine.
TEST(OpenAiSchema, Tools) {
    using TC = GenerationRequest::ToolChoice;
    auto chat = [](const std::string& extra, GenerationRequest* r) {
        return parse_generation_request(R"({"messages": [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}])" + extra + "}",
                                        Endpoint::kChat, r);
    };
    const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
        {"type": "function", "function": {"name": "g"}}])";
    GenerationRequest r;
    auto e = chat(tools, &r);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(r.tool_choice, TC::kAuto);
    EXPECT_TRUE(r.sampling.structured.kind.empty());
    json m = json::parse(r.messages_json);
    EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
    EXPECT_EQ(m[2]["tool_call_id"], "c1");
    EXPECT_EQ(json::parse(r.tools_json).size(), 2u);

    ASSERT_FALSE(chat(tools + R"(, "tool_choice": "none")", &r));
    EXPECT_EQ(r.tool_choice, TC::kNone);
    EXPECT_TRUE(r.tools_json.empty());  // the template does not see them

    ASSERT_FALSE(chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})", &r));
    EXPECT_EQ(r.tool_choice, TC::kNamed);
    EXPECT_EQ(r.sampling.structured.kind, "json_schema");
    EXPECT_EQ(json::parse(r.sampling.structured.value)["required"][0], "a");

    ASSERT_FALSE(chat(tools + R"(, "tool_choice": "required", "parallel_tool_calls": false)", &r));
    json schema = json::parse(r.sampling.structured.value);
    EXPECT_EQ(schema["minItems"], 1);
    EXPECT_EQ(schema["maxItems"], 1);
    EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["name"]["const"], "g");

    const std::pair<std::string, std::string> bad[] = {
        {R"(, "tool_choice": "required")", "tool_choice"},  // no tools
        {tools + R"(, "tool_choice": {"type": "function", "function": {"name": "zz"}})", "tool_choice"},
        {tools + R"(, "tool_choice": "sometimes")", "tool_choice"},
        {tools + R"(, "tool_choice": "required", "response_format": {"type": "json_object"})", "tool_choice"},
        {R"(, "tools": [{"type": "function", "function": {"name": "bad name"}}])", "tools"},
        {R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])", "tools"},
        {R"(, "tools": [{"type": "retrieval"}])", "tools"},
        {R"(, "tools": {"type": "function"})", "tools"},
        {R"(, "chat_template_kwargs": [1])", "chat_template_kwargs"},
    };
    for (const auto& [extra, param] : bad) {
        auto err = chat(extra, &r);
        ASSERT_TRUE(err) << extra;
        EXPECT_EQ(err->param, param) << extra;
    }
    EXPECT_TRUE(parse_generation_request(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})",
                                         Endpoint::kChat, &r));

    std::vector<ChoiceResult> choices(1);
    choices[0].finish_reason = "tool_calls";
    choices[0].tool_calls = {{"call_x", "f", "{\"a\":1}"}};
    json resp = json::parse(response_json(Endpoint::kChat, "id", 1, "m", choices, {}));
    EXPECT_TRUE(resp["choices"][0]["message"]["content"].is_null());
    EXPECT_EQ(resp["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
    EXPECT_EQ(resp["choices"][0]["finish_reason"], "tool_calls");
    std::string events = tool_call_chunk_json("id", 1, "m", 0, choices[0].tool_calls, 0, false);
    size_t split = events.find("\n\ndata: ");
    ASSERT_NE(split, std::string::npos);
    json head = json::parse(events.substr(0, split)), args = json::parse(events.substr(split + 8));
    EXPECT_EQ(head["choices"][0]["delta"]["tool_calls"][0]["id"], "call_x");
    EXPECT_EQ(head["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "");
    EXPECT_EQ(args["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
}

}  // namespace
}  // namespace kiln::server
