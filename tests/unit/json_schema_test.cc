// json_schema_to_gbnf against Python jsonschema: tests/golden/data/json_schema_cases.json (from
// scripts/gen_json_schema_cases.py) holds schemas and candidate texts with jsonschema's verdict; the
// grammar must accept exactly the texts whose `expect` is true (`expect` differs from `valid` only where
// the file marks the grammar stricter or looser on purpose). Also the refusals (status code and the
// keyword named), json_object_gbnf, and the shape of the generated GBNF.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "grammar/gbnf.h"

namespace kiln::grammar {
namespace {

using json = nlohmann::ordered_json;  // property order is what the grammar follows

json load_cases() {
    std::string path = std::string(__FILE__);
    path = path.substr(0, path.rfind('/')) + "/../golden/data/json_schema_cases.json";
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
}

core::StatusCode code_named(const std::string& name) {
    if (name == "kInvalidArgument") return core::StatusCode::kInvalidArgument;
    if (name == "kUnsupported") return core::StatusCode::kUnsupported;
    ADD_FAILURE() << "unknown status code " << name;
    return core::StatusCode::kOk;
}

// The grammar for `schema`, parsed; fails the test (and returns nullopt) when either step fails.
std::optional<Grammar> compile(const json& schema, const std::string& what) {
    auto text = json_schema_to_gbnf(schema);
    if (!text.is_ok()) {
        ADD_FAILURE() << what << ": " << text.status().message();
        return std::nullopt;
    }
    auto g = parse_gbnf(text.value());
    if (!g.is_ok()) {
        ADD_FAILURE() << what << ": " << g.status().message() << "\n" << text.value();
        return std::nullopt;
    }
    return std::move(g).value();
}

TEST(JsonSchema, MatchesJsonschemaVerdicts) {
    json data = load_cases();
    ASSERT_GE(data["schemas"].size(), 40u);
    int checked = 0;
    for (const auto& s : data["schemas"]) {
        std::string name = s["name"];
        auto g = compile(s["schema"], name);
        if (!g) continue;
        for (const auto& c : s["cases"]) {
            std::string text = c["text"];
            bool expect = c["expect"];
            EXPECT_EQ(full_match(*g, text), expect)
                << name << ": " << text << (c.contains("note") ? " (" + c["note"].get<std::string>() + ")" : "") << "\n"
                << json_schema_to_gbnf(s["schema"]).value();
            ++checked;
        }
    }
    EXPECT_GE(checked, 300);
}

TEST(JsonSchema, RefusesWhatItCannotHonour) {
    json data = load_cases();
    ASSERT_GE(data["refusals"].size(), 10u);
    for (const auto& r : data["refusals"]) {
        std::string name = r["name"];
        auto result = json_schema_to_gbnf(r["schema"]);
        ASSERT_FALSE(result.is_ok()) << name << " gave\n" << result.value();
        EXPECT_EQ(result.status().code(), code_named(r["code"])) << name << ": " << result.status().message();
        const std::string& msg = result.status().message();
        EXPECT_NE(msg.find(r["keyword"].get<std::string>()), std::string::npos) << name << ": " << msg;
        if (r.contains("where")) {
            EXPECT_NE(msg.find(r["where"].get<std::string>()), std::string::npos) << name << ": " << msg;
        }
    }
}

TEST(JsonSchema, ObjectGrammarAcceptsAnyObject) {
    auto g = parse_gbnf(json_object_gbnf());
    ASSERT_TRUE(g.is_ok()) << g.status().message() << "\n" << json_object_gbnf();
    EXPECT_TRUE(full_match(*g, R"({"a": [1, 2.5e3, "x\u00e9", null, true]})"));
    EXPECT_TRUE(full_match(*g, "{}"));
    EXPECT_TRUE(full_match(*g, "{\n  \"a\": {\n    \"b\": [\n      -0.5\n    ]\n  }\n}"));
    EXPECT_FALSE(full_match(*g, "[1]"));
    EXPECT_FALSE(full_match(*g, R"({"a":})"));
    EXPECT_FALSE(full_match(*g, R"({"a": 1,})"));
    EXPECT_FALSE(full_match(*g, "\"a\""));
}

TEST(JsonSchema, DefinesEachSharedRuleOnceAndKeepsSchemaOrder) {
    json schema = json::parse(R"({"type": "object", "properties": {
        "zeta": {"type": "string"}, "alpha": {"type": "string"}, "mid": {"$ref": "#/$defs/pair"}},
        "required": ["zeta", "alpha", "mid"],
        "$defs": {"pair": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}})");
    auto text = json_schema_to_gbnf(schema);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    const std::string& t = text.value();
    EXPECT_EQ(t.rfind("root ::= ", 0), 0u) << t;
    EXPECT_LT(t.find("zeta"), t.find("alpha")) << t;  // ordered_json keeps the schema's order
    for (const char* rule : {"\nstring ::= ", "\nstring-char ::= ", "\nws ::= ", "\ndef-pair ::= "}) {
        size_t at = t.find(rule);
        EXPECT_NE(at, std::string::npos) << rule << "\n" << t;
        EXPECT_EQ(t.find(rule, at + 1), std::string::npos) << rule << "\n" << t;
    }
    EXPECT_NE(t.find(R"(ws ::= "" | " " | "\n" [ \t]{0,20})"), std::string::npos) << t;
    auto g = parse_gbnf(t);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_TRUE(full_match(*g, R"({"zeta": "z", "alpha": "a", "mid": ["x", "y"]})"));
    EXPECT_FALSE(full_match(*g, R"({"alpha": "a", "zeta": "z", "mid": []})"));
}

TEST(JsonSchema, RuleNamesFromOddPropertyNamesStayDistinct) {
    json schema = json::parse(R"({"type": "object", "properties": {
        "a b": {"type": "string", "minLength": 1}, "a-b": {"type": "string", "minLength": 2},
        "": {"enum": [1, 2]}, "string": {"type": "integer", "minimum": 0}, "é": {"const": "é"}},
        "required": ["a b", "a-b", "", "string", "é"]})");
    auto g = compile(schema, "odd names");
    ASSERT_TRUE(g);
    EXPECT_TRUE(full_match(*g, R"({"a b": "x", "a-b": "xy", "": 2, "string": 7, "é": "é"})"));
    EXPECT_FALSE(full_match(*g, R"({"a b": "x", "a-b": "x", "": 2, "string": 7, "é": "é"})"));
    EXPECT_FALSE(full_match(*g, R"({"a b": "x", "a-b": "xy", "": 2, "string": -7, "é": "é"})"));
}

TEST(JsonSchema, ManyOptionalPropertiesStayLinear) {
    json props = json::object();
    for (int i = 0; i < 200; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
    json schema = {{"type", "object"}, {"properties", props}, {"required", json::array({"p199"})}};
    auto text = json_schema_to_gbnf(schema);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    EXPECT_LT(text.value().size(), 200u * 200u) << "quadratic in the number of properties";
    auto g = parse_gbnf(text.value());
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_TRUE(full_match(*g, R"({"p3": 1, "p150": 2, "p199": 3})"));
    EXPECT_TRUE(full_match(*g, R"({"p199": 3})"));
    EXPECT_FALSE(full_match(*g, R"({"p3": 1})"));
    EXPECT_FALSE(full_match(*g, R"({"p150": 2, "p3": 1, "p199": 3})"));
}

TEST(JsonSchema, TupleItemsOfEarlierDrafts) {
    json schema = json::parse(R"({"type": "array", "items": [{"type": "string"}, {"type": "integer"}],
                                  "additionalItems": {"type": "boolean"}})");
    auto g = compile(schema, "items as a list");
    ASSERT_TRUE(g);
    EXPECT_TRUE(full_match(*g, "[]"));
    EXPECT_TRUE(full_match(*g, R"(["a", 1, true, false])"));
    EXPECT_FALSE(full_match(*g, R"(["a", 1, 2])"));
    EXPECT_FALSE(full_match(*g, "[1]"));
}

TEST(JsonSchema, MalformedSchemasAreInvalidArguments) {
    for (const char* text : {R"({"type": "object", "properties": []})", R"({"type": "string", "minLength": -1})",
                             R"({"type": "string", "minLength": 3, "maxLength": 2})", R"({"enum": []})",
                             R"({"type": "integer", "minimum": 5, "maximum": 4})", R"({"anyOf": []})",
                             R"({"type": "number", "exclusiveMinimum": 1, "maximum": 1})", R"({"nullable": 1})",
                             R"({"type": "array", "items": false, "minItems": 1})", "17"}) {
        auto r = json_schema_to_gbnf(json::parse(text));
        ASSERT_FALSE(r.is_ok()) << text << " gave\n" << r.value();
        EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument) << text << ": " << r.status().message();
    }
}

TEST(JsonSchema, HugeEnumsAreRefusedAndLargeOnesStayExact) {
    json big = json::object();
    big["enum"] = json::array();
    for (int i = 0; i < 10001; ++i) big["enum"].push_back("v" + std::to_string(i));
    auto r = json_schema_to_gbnf(big);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), core::StatusCode::kUnsupported);
    EXPECT_NE(r.status().message().find("more than 10000"), std::string::npos);
    big["enum"].erase(10000);
    big["enum"][9999] = "v0";  // a repeat: kept once
    auto g = compile(big, "10000 values");
    ASSERT_TRUE(g);
    EXPECT_TRUE(full_match(*g, "\"v9998\""));
    EXPECT_FALSE(full_match(*g, "\"v9999\""));
    EXPECT_TRUE(full_match(*g, "\"v0\""));
    EXPECT_FALSE(full_match(*g, "\"v10000\""));
}

}  // namespace
}  // namespace kiln::grammar
