// Private to json_schema.cc and json_schema_types.cc: the converter that walks a schema and names its
// rules, and the small GBNF text helpers both halves use.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln::grammar::json_schema_detail {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxRepeat = 10000;  // parse_gbnf's bound on x{m,n}

// "#" + ptr: how error messages name a place in the schema.
std::string where(const std::string& ptr);
// A key as a JSON pointer token (~0, ~1 escapes).
std::string pointer_token(std::string_view key);
// A rule-name fragment from any text: runs of [A-Za-z0-9] joined by '-'.
std::string sanitize(std::string_view s);
// Whether `e` is a bare rule name.
bool is_identifier(std::string_view e);
// The non-empty parts joined by `sep`.
std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::string seq(const std::string& a, const std::string& b);
// Alternatives as one expression, parenthesised when there are several.
std::string group(const std::vector<std::string>& alts);
// x{m,n} in its tersest spelling; "" when n == 0.
std::string repeat(const std::string& x, int64_t m, std::optional<int64_t> n);
// v.dump(), never throwing on bad UTF-8.
std::string compact(const Json& v);
// Whether v is an instance of the JSON Schema type `type` (2.0 is an integer).
bool has_type(const Json& v, const std::string& type);

// A numeric bound, exact when it is a whole number (so range arithmetic is done on integers).
struct Bound {
    double value = 0;
    std::optional<int64_t> exact;
};

class Converter {
public:
    explicit Converter(const Json& root);
    core::Result<std::string> run();

private:
    std::string reserve(const std::string& base);
    std::string use(const char* shared);
    core::Result<std::string> rule_for(const Json& s, const std::string& ptr, const std::string& base);
    core::Result<std::string> body_for(const Json& s, const std::string& ptr, const std::string& name);
    core::Status only(const Json& s, const std::string& ptr, std::initializer_list<std::string_view> allowed,
                      std::string_view beside);
    core::Result<std::vector<std::string>> alternatives(const Json& s, const std::string& ptr, const std::string& name);
    core::Result<std::vector<std::string>> read_types(const Json& s, const std::string& ptr);
    core::Result<std::vector<std::string>> enum_alternatives(const Json& s, const std::string& ptr);
    core::Result<std::vector<std::string>> combinator_alternatives(const Json& s, const std::string& ptr,
                                                                   const std::string& name, const char* combinator);
    core::Result<std::string> ref_rule(const std::string& ref, const std::string& ptr);
    core::Result<std::optional<int64_t>> count(const Json& s, const char* key, const std::string& ptr);
    core::Result<std::optional<Bound>> bound(const Json& s, const char* key, const std::string& ptr);

    // json_schema_types.cc: one JSON type's instances under the schema's keywords for that type.
    core::Result<std::string> string_expr(const Json& s, const std::string& ptr);
    core::Result<std::string> integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                            const std::string& ptr);
    core::Result<std::string> integer_expr(const Json& s, const std::string& ptr);
    core::Result<std::string> number_expr(const Json& s, const std::string& ptr);
    core::Result<std::string> object_expr(const Json& s, const std::string& ptr, const std::string& name);
    core::Result<std::string> array_expr(const Json& s, const std::string& ptr, const std::string& name);

    const Json& root_;
    std::vector<std::string> order_;             // rule names in the order they were reserved
    std::map<std::string, std::string> bodies_;  // name -> body; a reserved name without one is unused
    std::set<std::string> taken_;
    std::set<std::string> shared_used_;
    std::map<std::string, std::string> refs_;  // $ref text -> rule name
    int depth_ = 0;
};

}  // namespace kiln::grammar::json_schema_detail
