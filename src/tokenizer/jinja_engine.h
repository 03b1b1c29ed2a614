// A Jinja2 subset interpreter for Hugging Face chat templates.
//
// Follows Jinja2 3.x semantics as HF transformers configures them (ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, HF's json.dumps-based tojson and
// a raise_exception global). Supported: {{ }}, {% %}, {# #}, whitespace control (-), if/elif/else,
// for (with `if` filter, else, loop.*, break/continue, key/value unpacking), set (names and
// namespace attributes), literals (str/int/float/bool/none/list/dict), + - * / // % ~, comparisons,
// and/or/not, in, `is` tests, conditional expressions, indexing/attributes/slicing, common filters and
// str/dict methods. Macros, call blocks, includes and set blocks are rejected with an error.
//
// Invariants: user input never throws out of jinja_render or aborts; template errors (syntax,
// unsupported features, raise_exception, type errors) become a Status. Parsing depth, output size
// and loop iterations are capped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::tokenizer::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like a Python dict

struct Value {
    enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace };
    Type type = Type::kUndefined;
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
    std::string s;
    std::shared_ptr<List> list;
    std::shared_ptr<Dict> dict;  // kDict and kNamespace

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
    int max_depth = 128;                 // nesting of expressions and blocks
    int64_t max_iterations = 10000000;   // loop bodies executed, all loops together
};

// Renders `tmpl` with the given global variables (later entries win).
core::Result<std::string> render(const std::string& tmpl, const Dict& globals, const RenderLimits& limits = {});

}  // namespace kiln::tokenizer::jinja
