// Jinja built-ins (internal): filters, tests, methods of str/dict/list, operators and global functions, as
// jinja2 3.x and Python define them for the values of jinja_engine.h. Errors throw detail::JinjaError.
#pragma once

#include <functional>
#include <string>

#include "tokenizer/jinja_ast.h"

namespace kiln::tokenizer::jinja::detail {

Value make_builtin(std::string name, std::function<Value(Interp&, const Args&)> fn);
// A global function (range, dict, namespace, raise_exception, strftime_now, cycler, joiner) or undefined.
Value builtin_global(const std::string& name);

Value apply_filter(Interp& in, const std::string& name, const Value& v, const Args& a);
bool apply_test(Interp& in, const std::string& name, const Value& v, const Args& a);

// Methods: `obj.name(...)`. bound_method gives `obj.name` itself as a callable.
Value call_method(Interp& in, const Value& obj, const std::string& name, const Args& a);
bool is_dict_method(const std::string& name);
bool has_method(const Value& obj, const std::string& name);
Value bound_method(const Value& obj, const std::string& name);

// Operators: + - * / // % ** ~; `item in container`; obj[start:stop:step].
Value binary_op(Interp& in, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
std::string html_escape(const std::string& s);  // markupsafe.escape
std::string case_map(const std::string& s, bool upper);  // str.upper() / str.lower()
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace kiln::tokenizer::jinja::detail
