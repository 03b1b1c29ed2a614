// A Jinja2 interpreter for Hugging Face chat templates.
//
// Renders templates as Python jinja2 3.x does with the settings HF transformers' apply_chat_template uses
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the loopcontrols extension, the `generation`
// tag, HF's json.dumps-based tojson, and the globals raise_exception, strftime_now, dict, namespace):
//   tags     if/elif/else, for (filter, else, unpacking, recursive, loop.* incl. cycle/changed, break,
//            continue), set (names, tuples, namespace attributes, blocks with filters), macro (defaults,
//            caller, varargs/kwargs), call blocks, filter blocks, with, raw, generation, comments and
//            whitespace control (- and +);
//   values   None/bool/int/float/str/list/dict/namespace/callables; strings are sequences of code points
//            (length, indexing, slicing); map/select/... results behave as jinja2's generators (always true,
//            not JSON-serializable, no length); undefined values render empty and fail when used as jinja2's
//            default Undefined fails (attribute access, calls, arithmetic, tojson);
//   builtins the filters, tests, string/dict methods and globals chat templates use (jinja_builtins.cc);
//            list and dict mutation is refused as the immutable sandbox refuses it.
// Templates the engine cannot render give an error that names the construct and the line.
//
// Invariants: user input never throws out of render() or aborts; every error (syntax, unsupported
// construct, raise_exception, type errors, limits) becomes a Status. Parse depth, output size and loop
// iterations are capped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::tokenizer::jinja {

struct Value;
struct Callable;  // macros and built-in functions (jinja_internal.h)
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like a Python dict

struct Value {
    enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };
    Type type = Type::kUndefined;
    bool b = false;
    bool lazy = false;    // kList: a jinja2 generator (map, select, ...): truthy, unsized, not JSON-serializable
    bool markup = false;  // kString: markupsafe's Markup (from |safe, |escape): `+` HTML-escapes a plain operand
    bool tuple = false;   // kList: a Python tuple (literals, items(), varargs, ...): prints as (a, b)
    int64_t i = 0;
    double f = 0.0;
    std::string s;  // kString; kUndefined: why it is undefined ("'x' is undefined"), for errors
    std::shared_ptr<List> list;
    std::shared_ptr<Dict> dict;  // kDict and kNamespace
    std::shared_ptr<const Callable> fn;

    static Value undefined(std::string why = {}) { Value v; v.s = std::move(why); return v; }
    static Value none() { Value v; v.type = Type::kNone; return v; }
    static Value boolean(bool x) { Value v; v.type = Type::kBool; v.b = x; return v; }
    static Value integer(int64_t x) { Value v; v.type = Type::kInt; v.i = x; return v; }
    static Value number(double x) { Value v; v.type = Type::kFloat; v.f = x; return v; }
    static Value str(std::string x) { Value v; v.type = Type::kString; v.s = std::move(x); return v; }
    static Value make_list(List x = {}) {
        Value v; v.type = Type::kList; v.list = std::make_shared<List>(std::move(x)); return v;
    }
    static Value make_dict(Dict x = {}) {
        Value v; v.type = Type::kDict; v.dict = std::make_shared<Dict>(std::move(x)); return v;
    }
};

struct RenderLimits {
    size_t max_output_bytes = size_t{16} << 20;
    int max_depth = 128;                 // nesting of expressions, blocks and macro calls
    int64_t max_iterations = 10000000;   // loop bodies executed, all loops together
    int64_t now = -1;                    // strftime_now's clock in Unix seconds (UTC); -1 = the system clock
};

// Renders `tmpl` with the given global variables (later entries win).
core::Result<std::string> render(const std::string& tmpl, const Dict& globals, const RenderLimits& limits = {});

}  // namespace kiln::tokenizer::jinja
