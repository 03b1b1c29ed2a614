// Jinja internals shared by the parser (jinja_parse.cc), the evaluator (jinja_engine.cc), the value helpers
// (jinja_value.cc) and the built-ins (jinja_builtins.cc): the AST, the internal error type, call arguments
// and callables. Not part of the tokenizer's API.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_engine.h"

namespace kiln::tokenizer::jinja::detail {

using Type = Value::Type;

// Thrown inside the parser/evaluator only; render() turns it into a Status. `line` 0 = not yet known (the
// evaluator adds the line of the statement being run).
struct JinjaError {
    std::string msg;
    int line = 0;
};
inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] inline void fail(const std::string& msg) { throw JinjaError{msg}; }

enum class EK { kLit, kName, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kNot, kNeg, kBin, kCompare, kAnd, kOr,
                kCond, kList, kTuple, kDict };
struct Expr {
    EK kind;
    int line = 0;
    Value lit;
    std::string name;  // variable / attribute / filter / test / operator
    std::vector<std::unique_ptr<Expr>> kids;  // operands; for calls/filters/tests: target first, then args
    std::vector<std::string> kw;              // calls: keyword names aligned with the trailing args ("" = positional);
                                              // kCompare: the operators between kids
    bool negate = false;                      // `is not`
};
using ExprP = std::unique_ptr<Expr>;

enum class SK { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kMacro, kCallBlock, kFilterBlock,
                kWith, kBlock };
struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
    SK kind;
    int line = 0;
    std::string text;                 // kText; kMacro: the macro's name
    std::vector<ExprP> exprs;         // kOutput: [e]; kIf: conditions; kFor: [iter, filter or null];
                                      // kSet: [value]; kSetBlock/kFilterBlock: [filter chain or null];
                                      // kMacro: one default per parameter (null = none);
                                      // kCallBlock: [call, then one default per caller parameter];
                                      // kWith: one value per name
    std::vector<Body> bodies;         // kIf: one per condition (+ else); kFor: [body, else]; others: [body]
    std::vector<std::string> names;   // kFor/kSet: targets ("ns.attr" for namespace attributes);
                                      // kMacro/kCallBlock: parameters; kWith: names
    bool recursive = false;           // kFor
};

// Arguments of a call, filter or test (the filtered / tested value not included).
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    // Keyword `key`, else positional `index`; nullptr if neither.
    const Value* get(std::string_view key, size_t index) const {
        for (const auto& [k, v] : kw) if (k == key) return &v;
        return index < pos.size() ? &pos[index] : nullptr;
    }
};

// What the built-ins need from the evaluator.
class Interp {
public:
    virtual ~Interp() = default;
    virtual Value call(const Value& fn, const Args& a) = 0;  // calls a callable value
    virtual const RenderLimits& limits() const = 0;
    // Namespaces are the only mutable values, so the only way values can form a reference cycle: the
    // interpreter empties every one it was told of when the render ends.
    virtual void track_namespace(const std::shared_ptr<Dict>& d) = 0;
};

}  // namespace kiln::tokenizer::jinja::detail

namespace kiln::tokenizer::jinja {
// A macro or a built-in function. `call` runs it; macros run inside the interpreter they came from.
struct Callable {
    std::string name;
    std::function<Value(detail::Interp&, const detail::Args&)> call;
};
}  // namespace kiln::tokenizer::jinja

namespace kiln::tokenizer::jinja::detail {

// Lexes and parses a template; throws JinjaError (with its line) on malformed input.
Body parse_template(const std::string& tmpl, int max_depth);

}  // namespace kiln::tokenizer::jinja::detail
