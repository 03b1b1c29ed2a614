// Jinja subset internals shared by the parser (jinja_parse.cc) and the evaluator (jinja_engine.cc):
// the AST and the internal error type. Not part of the tokenizer's API.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_engine.h"

namespace kiln::tokenizer::jinja::detail {

using Type = Value::Type;

// Thrown inside the parser/evaluator only; render() turns it into a Status.
struct JinjaError {
    std::string msg;
};
inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] inline void fail(const std::string& msg) { throw JinjaError{msg}; }

enum class EK { kLit, kName, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kNot, kNeg, kBin, kAnd, kOr, kCond,
                kList, kDict };
struct Expr {
    EK kind;
    Value lit;
    std::string name;  // variable / attribute / filter / test / operator
    std::vector<std::unique_ptr<Expr>> kids;  // operands; for calls/filters/tests: target first, then args
    std::vector<std::string> kw;              // keyword names aligned with the trailing args ("" = positional)
    bool negate = false;                      // `is not`, `not in`
};
using ExprP = std::unique_ptr<Expr>;

enum class SK { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
    SK kind;
    std::string text;                 // kText
    std::vector<ExprP> exprs;         // kOutput: [e]; kIf: conditions; kFor: [iter, filter?]; kSet: [value]
    std::vector<Body> bodies;         // kIf: one per condition (+ else); kFor: [body, else]
    std::vector<std::string> names;   // kFor: loop variables; kSet: [name] or [name, attr]
};


// Lexes and parses a template; throws JinjaError on malformed input.
Body parse_template(const std::string& tmpl, int max_depth);

}  // namespace kiln::tokenizer::jinja::detail
