// json_schema_to_gbnf: one walk over the schema. A schema node that needs its own rule gets one named
// after its path (root-address-city, def-Node for "#/$defs/Node"), so the GBNF reads like the schema
// and recursion through $ref is a rule calling itself by name before it is defined. Plain nodes
// ({"type": "string"}) use the shared rules (ws, string, number, value, ...) emitted once at the end.
// Generated names start with root, def- or ref- and are made unique, so they never meet a shared one.
// This file: keyword dispatch, $ref, enum/const, combinators; json_schema_types.cc: the JSON types.
//
// Choices beyond json_schema.h, each a place where the grammar is stricter or looser than a validator:
//   - pattern is matched in full (as xgrammar and llama.cpp do), though JSON Schema searches; its
//     characters are emitted raw between the quotes, so a pattern whose language holds '"', '\' or a
//     control character (e.g. [^,]+) also admits text that is not a JSON string. Telling those apart
//     needs the regex's alphabet, which regex_to_gbnf does not report, so it is left to the schema author.
//   - a format format_gbnf does not know leaves a plain string, as validators ignore unknown formats.
//   - minLength/maxLength count string-char units: an escape is one character (as in the decoded
//     string), but a surrogate pair written as two \u escapes counts two.
//   - enum/const values are written only as compact JSON (nlohmann's dump(): "é" raw, not "\u00e9";
//     1.0 is not accepted for 1).
//   - integers are never written 1.0; bounded numbers have no exponent; "-0" only where unbounded.
//   - no `type`: inferred from the keywords present (properties => object, items => array, ...), and
//     any value when there are none, rather than "anything of another type passes".
//   - extra properties (additionalProperties true / a schema) follow the listed ones and may repeat a
//     listed name; `required` names must be listed in `properties`.
//   - $ref, enum/const and anyOf/oneOf/allOf accept only annotations and nullable beside them (enum and
//     const also `type`, which filters their values): intersections are refused, not approximated.
//   - oneOf is read as anyOf: exclusivity would need the complement of each branch.
//   - a schema that is only a reference to itself ({"anyOf": [{"$ref": "#"}, ...]} at the top) gives a
//     left-recursive grammar, which parse_gbnf refuses.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "grammar/gbnf.h"
#include "grammar/json_schema_internal.h"

namespace kiln::grammar {
namespace json_schema_detail {
namespace {

using core::error;
using core::Result;
using core::StatusCode;

struct SharedRule {
    const char* name;
    const char* body;
    std::vector<const char*> deps;  // shared rules it calls
};

const std::vector<SharedRule>& shared_rules() {
    static const std::vector<SharedRule> kRules = {
        {"value",
         "object | array | string | number | boolean | null",
         {"object", "array", "string", "number", "boolean", "null"}},
        {"object",
         R"g("{" ws ( string ":" ws value ( "," ws string ":" ws value )* ws )? "}")g",
         {"ws", "string", "value"}},
        {"array", R"g("[" ws ( value ( "," ws value )* ws )? "]")g", {"ws", "value"}},
        {"string", R"g("\"" string-char* "\"")g", {"string-char"}},
        {"string-char", R"g([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))g", {}},
        {"number", R"g("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)g", {}},
        {"integer", R"g("-"? ( "0" | [1-9] [0-9]{0,15} ))g", {}},
        {"boolean", R"g("true" | "false")g", {}},
        {"null", R"g("null")g", {}},
        {"ws", R"g("" | " " | "\n" [ \t]{0,20})g", {}},
    };
    return kRules;
}

// clang-format off
const std::set<std::string_view> kAnnotations = {
    "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions", "contentEncoding", "contentMediaType"};
const std::set<std::string_view> kHonoured = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
// clang-format on
const std::set<std::string_view> kTypes = {"string", "number", "integer", "boolean", "null", "object", "array"};

constexpr int kMaxDepth = 200;      // schema nesting; deeper is refused before the stack is at risk
constexpr double kMaxBound = 1e18;  // keeps n + 1 and -n - 1 inside int64

// A JSON pointer token decoded (~1 is '/', ~0 is '~'), in one pass so "~01" stays "~1".
std::string unescape_token(std::string_view tok) {
    std::string out;
    for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
            out += tok[++i] == '0' ? '~' : '/';
        } else {
            out += tok[i];
        }
    }
    return out;
}

// Emits the shared rules named in `used` and everything they call, in the fixed order above.
std::string shared_text(std::set<std::string> used) {
    for (bool grew = true; grew;) {
        grew = false;
        for (const auto& r : shared_rules())
            if (used.count(r.name))
                for (const char* d : r.deps) grew |= used.insert(d).second;
    }
    std::string out;
    for (const auto& r : shared_rules())
        if (used.count(r.name)) out += std::string(r.name) + " ::= " + r.body + "\n";
    return out;
}

}  // namespace

std::string where(const std::string& ptr) {
    return "#" + ptr;
}

std::string pointer_token(std::string_view key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
}

std::string sanitize(std::string_view s) {
    std::string out;
    for (char c : s) {
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (alnum)
            out += c;
        else if (!out.empty() && out.back() != '-')
            out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? "x" : out;
}

bool is_identifier(std::string_view e) {
    return !e.empty() && std::all_of(e.begin(), e.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    });
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (const auto& p : parts) {
        if (p.empty()) continue;
        if (!out.empty()) out += sep;
        out += p;
    }
    return out;
}

std::string seq(const std::string& a, const std::string& b) {
    return join({a, b}, " ");
}

std::string group(const std::vector<std::string>& alts) {
    return alts.size() == 1 ? alts[0] : "( " + join(alts, " | ") + " )";
}

std::string repeat(const std::string& x, int64_t m, std::optional<int64_t> n) {
    if (n && *n == 0) return "";
    std::string item = is_identifier(x) ? x : "( " + x + " )";
    if (!n) return item + (m == 0 ? "*" : m == 1 ? "+" : "{" + std::to_string(m) + ",}");
    if (m == *n) return m == 1 ? item : item + "{" + std::to_string(m) + "}";
    if (m == 0 && *n == 1) return item + "?";
    return item + "{" + std::to_string(m) + "," + std::to_string(*n) + "}";
}

std::string compact(const Json& v) {
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool has_type(const Json& v, const std::string& type) {
    if (type == "null") return v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "string") return v.is_string();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "number") return v.is_number();
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
}

Converter::Converter(const Json& root) : root_(root) {
    for (const auto& r : shared_rules()) taken_.insert(r.name);
}

Result<std::string> Converter::run() {
    std::string root = reserve("root");
    refs_["#"] = root;
    KILN_ASSIGN_OR_RETURN(bodies_[root], body_for(root_, "", root));
    std::string out;
    for (const auto& n : order_)
        if (auto it = bodies_.find(n); it != bodies_.end()) out += n + " ::= " + it->second + "\n";
    return out + shared_text(shared_used_);
}

std::string Converter::reserve(const std::string& base) {
    std::string n = base;
    for (int i = 2; taken_.count(n); ++i) n = base + "-" + std::to_string(i);
    taken_.insert(n);
    order_.push_back(n);
    return n;
}

std::string Converter::use(const char* shared) {
    shared_used_.insert(shared);
    return shared;
}

// The name of a rule matching `s`: a shared or $ref rule when the node is just that, else a new rule
// named from `base` (reserved first so a parent's rule prints before its children's).
Result<std::string> Converter::rule_for(const Json& s, const std::string& ptr, const std::string& base) {
    std::string name = reserve(base);
    KILN_ASSIGN_OR_RETURN(std::string body, body_for(s, ptr, name));
    if (is_identifier(body)) return body;  // the reserved name stays unused
    bodies_[name] = body;
    return name;
}

Result<std::string> Converter::body_for(const Json& s, const std::string& ptr, const std::string& name) {
    if (s.is_boolean()) {
        if (s.get<bool>()) return use("value");
        return error(StatusCode::kInvalidArgument) << "schema false at " << where(ptr) << " matches nothing";
    }
    if (!s.is_object()) return error(StatusCode::kInvalidArgument) << "schema at " << where(ptr) << " is not an object";
    if (depth_ >= kMaxDepth)
        return error(StatusCode::kUnsupported) << "schema nested deeper than " << kMaxDepth << " at " << where(ptr);
    ++depth_;
    Result<std::vector<std::string>> alts = alternatives(s, ptr, name);
    --depth_;
    if (!alts.is_ok()) return alts.status();
    std::vector<std::string> a = std::move(alts).value();
    if (auto it = s.find("nullable"); it != s.end()) {
        if (!it->is_boolean())
            return error(StatusCode::kInvalidArgument) << "nullable at " << where(ptr) << " is not a boolean";
        bool has_null =
            std::find(a.begin(), a.end(), "null") != a.end() || std::find(a.begin(), a.end(), "value") != a.end();
        if (it->get<bool>() && !has_null) a.push_back(use("null"));
    }
    return join(a, " | ");
}

// Refuses any keyword of `s` that constrains instances, other than `beside` and those in `allowed`.
core::Status Converter::only(const Json& s, const std::string& ptr, std::initializer_list<std::string_view> allowed,
                             std::string_view beside) {
    for (const auto& [k, v] : s.items()) {
        if (kAnnotations.count(k) || k == "nullable" || k == beside) continue;
        if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
        return error(StatusCode::kUnsupported)
               << "unsupported keyword '" << k << "' next to '" << beside << "' at " << where(ptr);
    }
    return core::Status::ok();
}

// The schema's instances as alternatives, each a sequence (no top-level '|').
Result<std::vector<std::string>> Converter::alternatives(const Json& s, const std::string& ptr,
                                                         const std::string& name) {
    for (const auto& [k, v] : s.items()) {
        if (kAnnotations.count(k) || kHonoured.count(k)) continue;
        if (k == "uniqueItems" && v == false) continue;  // the one refused keyword with a no-op value
        return error(StatusCode::kUnsupported) << "unsupported keyword '" << k << "' at " << where(ptr);
    }
    if (auto it = s.find("$ref"); it != s.end()) {
        KILN_RETURN_IF_ERROR(only(s, ptr, {}, "$ref"));
        if (!it->is_string())
            return error(StatusCode::kInvalidArgument) << "$ref at " << where(ptr) << " is not a string";
        KILN_ASSIGN_OR_RETURN(std::string r, ref_rule(it->get<std::string>(), ptr));
        return std::vector<std::string>{r};
    }
    if (s.contains("enum") || s.contains("const")) return enum_alternatives(s, ptr);
    for (const char* combinator : {"anyOf", "oneOf", "allOf"})
        if (s.contains(combinator)) return combinator_alternatives(s, ptr, name, combinator);

    KILN_ASSIGN_OR_RETURN(std::vector<std::string> types, read_types(s, ptr));
    if (!s.contains("type")) {
        auto any = [&](std::initializer_list<const char*> keys) {
            return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
        };
        if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
        if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) types.push_back("array");
        if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
        if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
        if (types.empty()) return std::vector<std::string>{use("value")};
    }
    if (std::find(types.begin(), types.end(), "number") != types.end())  // a number covers the integers
        types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
    std::vector<std::string> out;
    for (const auto& t : types) {
        Result<std::string> e = t == "string"    ? string_expr(s, ptr)
                                : t == "integer" ? integer_expr(s, ptr)
                                : t == "number"  ? number_expr(s, ptr)
                                : t == "object"  ? object_expr(s, ptr, name)
                                : t == "array"   ? array_expr(s, ptr, name)
                                                 : Result<std::string>(use(t == "null" ? "null" : "boolean"));
        if (!e.is_ok()) return e.status();
        out.push_back(std::move(e).value());
    }
    return out;
}

// `type` as a list of distinct JSON type names (empty when absent).
Result<std::vector<std::string>> Converter::read_types(const Json& s, const std::string& ptr) {
    std::vector<std::string> types;
    auto it = s.find("type");
    if (it == s.end()) return types;
    Json list = it->is_array() ? *it : Json::array({*it});
    for (const auto& t : list) {
        if (!t.is_string() || !kTypes.count(t.get<std::string>()))
            return error(StatusCode::kInvalidArgument)
                   << "type " << compact(t) << " at " << where(ptr) << " is not a JSON type";
        if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end())
            types.push_back(t.get<std::string>());
    }
    if (types.empty()) return error(StatusCode::kInvalidArgument) << "empty type list at " << where(ptr);
    return types;
}

Result<std::vector<std::string>> Converter::enum_alternatives(const Json& s, const std::string& ptr) {
    KILN_RETURN_IF_ERROR(only(s, ptr, {"type", "enum", "const"}, s.contains("enum") ? "enum" : "const"));
    std::vector<Json> values;
    if (auto e = s.find("enum"); e != s.end()) {
        if (!e->is_array() || e->empty())
            return error(StatusCode::kInvalidArgument) << "enum at " << where(ptr) << " is not a non-empty list";
        if (e->size() > 10000)  // as choices: each value is a stack of its own while its prefix is being written
            return error(StatusCode::kUnsupported) << "enum at " << where(ptr) << " has more than 10000 values";
        for (const auto& v : *e)
            if (!s.contains("const") || v == s["const"]) values.push_back(v);
    } else {
        values.push_back(s["const"]);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> types, read_types(s, ptr));
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const auto& v : values) {
        bool typed = types.empty() ||
                     std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
        std::string lit = gbnf_literal(compact(v));
        if (typed && seen.insert(lit).second) alts.push_back(lit);
    }
    if (alts.empty())
        return error(StatusCode::kInvalidArgument)
               << "no enum/const value at " << where(ptr) << " satisfies the schema";
    return alts;
}

Result<std::vector<std::string>> Converter::combinator_alternatives(const Json& s, const std::string& ptr,
                                                                    const std::string& name, const char* combinator) {
    KILN_RETURN_IF_ERROR(only(s, ptr, {}, combinator));
    const Json& list = s[combinator];
    if (!list.is_array() || list.empty())
        return error(StatusCode::kInvalidArgument) << combinator << " at " << where(ptr) << " is not a non-empty list";
    if (std::string_view(combinator) == "allOf" && list.size() > 1)
        return error(StatusCode::kUnsupported)
               << "unsupported keyword 'allOf' with " << list.size() << " schemas at " << where(ptr);
    std::vector<std::string> alts;
    for (size_t i = 0; i < list.size(); ++i) {
        std::string sub = ptr + "/" + combinator + "/" + std::to_string(i);
        KILN_ASSIGN_OR_RETURN(std::string r, rule_for(list[i], sub, name + "-" + std::to_string(i)));
        if (std::find(alts.begin(), alts.end(), r) == alts.end()) alts.push_back(r);
    }
    return alts;
}

Result<std::string> Converter::ref_rule(const std::string& ref, const std::string& ptr) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.size() < 2 || ref[0] != '#' || ref[1] != '/')
        return error(StatusCode::kUnsupported) << "unsupported $ref '" << ref << "' at " << where(ptr)
                                               << " (only local JSON pointers: #, #/$defs/NAME, ...)";
    const Json* target = &root_;
    std::vector<std::string> tokens;
    for (size_t start = 2;;) {
        size_t slash = ref.find('/', start);
        std::string tok =
            unescape_token(std::string_view(ref).substr(start, slash == std::string::npos ? slash : slash - start));
        tokens.push_back(tok);
        bool index = !tok.empty() && tok.size() < 10 && tok.find_first_not_of("0123456789") == std::string::npos;
        if (target->is_object() && target->contains(tok)) {
            target = &(*target)[tok];
        } else if (target->is_array() && index && std::stoul(tok) < target->size()) {
            target = &(*target)[std::stoul(tok)];
        } else {
            return error(StatusCode::kInvalidArgument) << "dangling $ref '" << ref << "' at " << where(ptr);
        }
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
    bool def = tokens.size() == 2 && (tokens[0] == "$defs" || tokens[0] == "definitions");
    std::string name = reserve(def ? "def-" + sanitize(tokens[1]) : "ref-" + sanitize(ref.substr(2)));
    refs_[ref] = name;  // before the body, so a recursive reference finds it
    KILN_ASSIGN_OR_RETURN(bodies_[name], body_for(*target, ref.substr(1), name));
    return name;
}

// A non-negative count keyword (minLength, maxItems, ...), at most kMaxRepeat.
Result<std::optional<int64_t>> Converter::count(const Json& s, const char* key, const std::string& ptr) {
    auto it = s.find(key);
    if (it == s.end()) return std::optional<int64_t>();
    if (!has_type(*it, "integer") || it->get<double>() < 0)
        return error(StatusCode::kInvalidArgument) << key << " at " << where(ptr) << " is not a non-negative integer";
    if (it->get<double>() > static_cast<double>(kMaxRepeat))
        return error(StatusCode::kUnsupported)
               << "unsupported keyword '" << key << "' above " << kMaxRepeat << " at " << where(ptr);
    return std::optional<int64_t>(static_cast<int64_t>(it->get<double>()));
}

Result<std::optional<Bound>> Converter::bound(const Json& s, const char* key, const std::string& ptr) {
    auto it = s.find(key);
    if (it == s.end()) return std::optional<Bound>();
    if (it->is_boolean())
        return error(StatusCode::kUnsupported)
               << "unsupported keyword '" << key << "' as a boolean (draft 4) at " << where(ptr);
    if (!it->is_number())
        return error(StatusCode::kInvalidArgument) << key << " at " << where(ptr) << " is not a number";
    Bound b;
    b.value = it->get<double>();
    if (!std::isfinite(b.value) || std::fabs(b.value) > kMaxBound)
        return error(StatusCode::kUnsupported)
               << "unsupported keyword '" << key << "': " << compact(*it) << " is out of range at " << where(ptr);
    if (it->is_number_integer())
        b.exact = it->get<int64_t>();
    else if (std::floor(b.value) == b.value)
        b.exact = static_cast<int64_t>(b.value);
    return std::optional<Bound>(b);
}

}  // namespace json_schema_detail

core::Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
    try {
        return json_schema_detail::Converter(schema).run();
    } catch (const nlohmann::json::exception& e) {  // a value of an unexpected type slipped past a check
        return core::error(core::StatusCode::kInvalidArgument) << "malformed schema: " << e.what();
    }
}

std::string json_object_gbnf() {
    return "root ::= object\n" + json_schema_detail::shared_text({"object"});
}

}  // namespace kiln::grammar
