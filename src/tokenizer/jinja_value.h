// Jinja value helpers (internal): Python truthiness, str() and repr(), json.dumps, equality and ordering,
// code-point string operations, and jinja2's Undefined rules. Errors throw detail::JinjaError.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace kiln::tokenizer::jinja::detail {

bool truthy(const Value& v);
std::string to_str(const Value& v);  // Python str()
std::string repr(const Value& v);    // Python repr()
std::string py_float(double f);      // Python repr(float)
const char* type_name(const Value& v);  // "dict object", "str object", ... as jinja2's messages name them

struct JsonStyle {
    int indent = -1;                       // -1: one line
    std::string item_sep, key_sep;         // "" = json.dumps' defaults for the indent
    bool sort_keys = false;
    bool ensure_ascii = false;
};
void to_json(const Value& v, const JsonStyle& style, std::string& out);  // json.dumps

bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; throws for unorderable types
bool is_num(const Value& v);
Value make_tuple(List items);
double num(const Value& v);

// Undefined values: throws jinja2's UndefinedError for `v` when it is undefined.
void require_defined(const Value& v);
// The items of an iterable (list, dict keys, string characters, undefined = none); throws otherwise.
std::vector<Value> iterate(const Value& v);
const Value* dict_find(const Value& d, const std::string& key);

// Dict keys are strings; other keys (ints, floats, booleans, None in dict literals) are stored as "\x02" +
// their repr and read back by key_value.
std::string dict_key(const Value& k);
Value key_value(const std::string& key);

// Strings as code points (invalid UTF-8 bytes count as one character each).
bool is_ascii(const std::string& s);
std::vector<std::string> code_points(const std::string& s);
int64_t char_length(const std::string& s);

}  // namespace kiln::tokenizer::jinja::detail
