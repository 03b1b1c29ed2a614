// Jinja2 subset front end: lexer (template -> text/tag segments, whitespace control) and parser
// (tags -> the AST of jinja_ast.h). Malformed input throws JinjaError, caught by jinja::render().
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "tokenizer/jinja_ast.h"

namespace kiln::tokenizer::jinja::detail {
namespace {

// ---------------------------------------------------------------- lexer: segments

enum class SegKind { kText, kExpr, kStmt };
struct Segment {
    SegKind kind;
    std::string body;
    int line;
};


// Finds the closer of a tag starting at `pos` (just past the opener), skipping quoted strings.
size_t find_close(const std::string& t, size_t pos, const char* closer) {
    char quote = 0;
    for (size_t p = pos; p + 1 < t.size(); ++p) {
        char c = t[p];
        if (quote) {
            if (c == '\\') ++p;
            else if (c == quote) quote = 0;
        } else if (c == '\'' || c == '"') {
            quote = c;
        } else if (c == closer[0] && t[p + 1] == closer[1]) {
            return p;
        }
    }
    return std::string::npos;
}

std::vector<Segment> lex(const std::string& t) {
    std::vector<Segment> segs;
    std::string text;
    bool strip_next = false, trim_nl = false;
    size_t pos = 0;
    int line = 1;
    auto flush_text = [&]() {
        if (!text.empty()) segs.push_back({SegKind::kText, text, line});
        text.clear();
    };
    while (pos < t.size()) {
        size_t open = pos;
        while (open + 1 < t.size() && !(t[open] == '{' && (t[open + 1] == '{' || t[open + 1] == '%' ||
                                                           t[open + 1] == '#')))
            ++open;
        if (open + 1 >= t.size()) open = t.size();
        std::string chunk = t.substr(pos, open - pos);
        size_t start = 0;
        if (strip_next) {
            while (start < chunk.size() && is_ws(chunk[start])) ++start;
        } else if (trim_nl && !chunk.empty()) {
            if (chunk[0] == '\n') start = 1;
            else if (chunk.size() >= 2 && chunk[0] == '\r' && chunk[1] == '\n') start = 2;
        }
        strip_next = trim_nl = false;
        text += chunk.substr(start);
        for (char c : chunk) line += c == '\n';
        if (open >= t.size()) break;
        char kind = t[open + 1];
        size_t inner = open + 2;
        bool minus_open = inner < t.size() && t[inner] == '-';
        bool plus_open = inner < t.size() && t[inner] == '+';
        if (minus_open) {
            while (!text.empty() && is_ws(text.back())) text.pop_back();
        } else if (kind != '{' && !plus_open) {
            // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
            size_t k = text.size();
            while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
            bool line_start;
            if (k > 0) {
                line_start = text[k - 1] == '\n';
            } else {
                size_t before = open - text.size();
                line_start = before == 0 || t[before - 1] == '\n';
            }
            if (line_start) text.resize(k);
        }
        if (minus_open || plus_open) ++inner;
        const char* closer = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        size_t close = kind == '#' ? t.find("#}", inner) : find_close(t, inner, closer);
        if (close == std::string::npos) fail("unclosed tag at line " + std::to_string(line));
        bool minus_close = close > inner && t[close - 1] == '-';
        std::string body = t.substr(inner, close - inner - (minus_close ? 1 : 0));
        flush_text();
        if (kind != '#') segs.push_back({kind == '{' ? SegKind::kExpr : SegKind::kStmt, body, line});
        for (char c : t.substr(open, close + 2 - open)) line += c == '\n';
        pos = close + 2;
        if (minus_close) strip_next = true;
        else if (kind != '{') trim_nl = true;
    }
    flush_text();
    return segs;
}

// ---------------------------------------------------------------- tokens inside a tag

enum class Tok { kName, kString, kInt, kFloat, kOp, kEnd };
struct Token {
    Tok kind;
    std::string text;
};

std::vector<Token> tokenize(const std::string& s, int line) {
    std::vector<Token> out;
    size_t p = 0;
    static const char* kOps2[] = {"==", "!=", "<=", ">=", "//", "**"};
    while (p < s.size()) {
        char c = s[p];
        if (is_ws(c)) { ++p; continue; }
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t q = p;
            while (q < s.size() && (std::isalnum(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
            out.push_back({Tok::kName, s.substr(p, q - p)});
            p = q;
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
            size_t q = p;
            bool is_float = false;
            while (q < s.size() && (std::isdigit(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
            if (q + 1 < s.size() && s[q] == '.' && std::isdigit(static_cast<unsigned char>(s[q + 1]))) {
                is_float = true;
                ++q;
                while (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) ++q;
            }
            std::string num;
            for (size_t k = p; k < q; ++k) if (s[k] != '_') num += s[k];
            out.push_back({is_float ? Tok::kFloat : Tok::kInt, num});
            p = q;
        } else if (c == '\'' || c == '"') {
            std::string str;
            size_t q = p + 1;
            while (q < s.size() && s[q] != c) {
                if (s[q] == '\\' && q + 1 < s.size()) {
                    char e = s[++q];
                    switch (e) {
                        case 'n': str += '\n'; break;
                        case 't': str += '\t'; break;
                        case 'r': str += '\r'; break;
                        case '\\': str += '\\'; break;
                        case '\'': str += '\''; break;
                        case '"': str += '"'; break;
                        default: str += '\\'; str += e;
                    }
                } else {
                    str += s[q];
                }
                ++q;
            }
            if (q >= s.size()) fail("unterminated string at line " + std::to_string(line));
            out.push_back({Tok::kString, str});
            p = q + 1;
        } else {
            std::string op(1, c);
            for (const char* o : kOps2)
                if (s.compare(p, 2, o) == 0) op = o;
            if (op.size() == 1 && std::string("+-*/%~|()[]{},.:=<>").find(c) == std::string::npos)
                fail(std::string("unexpected character '") + c + "' at line " + std::to_string(line));
            out.push_back({Tok::kOp, op});
            p += op.size();
        }
    }
    out.push_back({Tok::kEnd, ""});
    return out;
}

class Parser {
public:
    Parser(std::vector<Token> toks, int line, int max_depth) : t_(std::move(toks)), line_(line), max_depth_(max_depth) {}

    const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
    bool at_op(const char* op) const { return peek().kind == Tok::kOp && peek().text == op; }
    bool at_name(const char* n) const { return peek().kind == Tok::kName && peek().text == n; }
    bool at_end() const { return peek().kind == Tok::kEnd; }
    Token next() { Token tk = peek(); if (p_ < t_.size() - 1) ++p_; return tk; }
    void expect_op(const char* op) {
        if (!at_op(op)) err(std::string("expected '") + op + "'");
        next();
    }
    std::string expect_name() {
        if (peek().kind != Tok::kName) err("expected a name");
        return next().text;
    }
    [[noreturn]] void err(const std::string& what) const {
        fail(what + " near '" + peek().text + "' at line " + std::to_string(line_));
    }
    void expect_end() { if (!at_end()) err("unexpected token"); }

    ExprP expression() {
        Guard g(this);
        ExprP e = or_expr();
        if (at_name("if")) {
            next();
            auto c = mk(EK::kCond);
            ExprP cond = or_expr();
            ExprP other;
            if (at_name("else")) { next(); other = expression(); }
            else { other = mk(EK::kLit); }
            c->kids.push_back(std::move(cond));
            c->kids.push_back(std::move(e));
            c->kids.push_back(std::move(other));
            return c;
        }
        return e;
    }
    // The expression without the conditional form (for `for ... in X if cond`).
    ExprP or_expr() {
        ExprP e = and_expr();
        while (at_name("or")) { next(); e = bin(EK::kOr, "or", std::move(e), and_expr()); }
        return e;
    }

private:
    struct Guard {
        Parser* p;
        explicit Guard(Parser* pp) : p(pp) { if (++p->depth_ > p->max_depth_) p->err("expression nested too deeply"); }
        ~Guard() { --p->depth_; }
    };
    static ExprP mk(EK k) { auto e = std::make_unique<Expr>(); e->kind = k; return e; }
    static ExprP bin(EK k, const std::string& op, ExprP a, ExprP b) {
        auto e = mk(k);
        e->name = op;
        e->kids.push_back(std::move(a));
        e->kids.push_back(std::move(b));
        return e;
    }
    ExprP and_expr() {
        ExprP e = not_expr();
        while (at_name("and")) { next(); e = bin(EK::kAnd, "and", std::move(e), not_expr()); }
        return e;
    }
    ExprP not_expr() {
        if (at_name("not")) {
            Guard g(this);
            next();
            auto e = mk(EK::kNot);
            e->kids.push_back(not_expr());
            return e;
        }
        return compare();
    }
    ExprP compare() {
        ExprP e = add();
        for (;;) {
            static const char* kCmp[] = {"==", "!=", "<", ">", "<=", ">="};
            bool found = false;
            for (const char* op : kCmp) {
                if (at_op(op)) { next(); e = bin(EK::kBin, op, std::move(e), add()); found = true; break; }
            }
            if (found) continue;
            if (at_name("in")) { next(); e = bin(EK::kBin, "in", std::move(e), add()); continue; }
            if (at_name("not") && peek(1).kind == Tok::kName && peek(1).text == "in") {
                next(); next();
                e = bin(EK::kBin, "in", std::move(e), add());
                e->negate = true;
                continue;
            }
            return e;
        }
    }
    ExprP add() {
        ExprP e = concat();
        while (at_op("+") || at_op("-")) { std::string op = next().text; e = bin(EK::kBin, op, std::move(e), concat()); }
        return e;
    }
    ExprP concat() {
        ExprP e = mul();
        while (at_op("~")) { next(); e = bin(EK::kBin, "~", std::move(e), mul()); }
        return e;
    }
    ExprP mul() {
        ExprP e = unary();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            std::string op = next().text;
            e = bin(EK::kBin, op, std::move(e), unary());
        }
        return e;
    }
    ExprP unary() {
        Guard g(this);
        if (at_op("-")) {
            next();
            auto e = mk(EK::kNeg);
            e->kids.push_back(unary());
            return e;
        }
        if (at_op("+")) { next(); return unary(); }
        ExprP e = postfix(primary());
        return filters(std::move(e));
    }
    void call_args(Expr* e) {
        expect_op("(");
        while (!at_op(")")) {
            if (peek().kind == Tok::kName && peek(1).kind == Tok::kOp && peek(1).text == "=") {
                e->kw.push_back(next().text);
                next();
            } else {
                e->kw.push_back("");
            }
            e->kids.push_back(expression());
            if (!at_op(")")) expect_op(",");
        }
        next();
    }
    ExprP postfix(ExprP e) {
        for (;;) {
            if (at_op(".")) {
                next();
                auto a = mk(EK::kAttr);
                a->name = expect_name();
                a->kids.push_back(std::move(e));
                e = std::move(a);
            } else if (at_op("[")) {
                next();
                ExprP parts[3];
                bool slice = false;
                int idx = 0;
                while (!at_op("]")) {
                    if (at_op(":")) {
                        slice = true;
                        if (++idx > 2) err("bad slice");
                        next();
                        continue;
                    }
                    if (parts[idx]) err("expected ']'");
                    parts[idx] = expression();
                }
                next();
                auto a = mk(slice ? EK::kSlice : EK::kIndex);
                a->kids.push_back(std::move(e));
                if (!slice && !parts[0]) err("empty subscript");
                for (int k = 0; k < (slice ? 3 : 1); ++k) a->kids.push_back(parts[k] ? std::move(parts[k]) : nullptr);
                e = std::move(a);
            } else if (at_op("(")) {
                auto c = mk(EK::kCall);
                c->kids.push_back(std::move(e));
                call_args(c.get());
                e = std::move(c);
            } else {
                return e;
            }
        }
    }
    ExprP filters(ExprP e) {
        for (;;) {
            if (at_op("|")) {
                next();
                auto f = mk(EK::kFilter);
                f->name = expect_name();
                f->kids.push_back(std::move(e));
                if (at_op("(")) call_args(f.get());
                e = std::move(f);
            } else if (at_name("is")) {
                next();
                auto f = mk(EK::kTest);
                if (at_name("not")) { next(); f->negate = true; }
                f->name = expect_name();
                f->kids.push_back(std::move(e));
                if (at_op("(")) {
                    call_args(f.get());
                } else if (peek().kind == Tok::kString || peek().kind == Tok::kInt || peek().kind == Tok::kFloat ||
                           (peek().kind == Tok::kName && !at_name("and") && !at_name("or") && !at_name("if") &&
                            !at_name("else") && !at_name("in") && !at_name("is") && !at_name("not"))) {
                    f->kw.push_back("");
                    f->kids.push_back(postfix(primary()));
                }
                e = std::move(f);
            } else {
                return e;
            }
        }
    }
    ExprP primary() {
        Guard g(this);
        Token tk = next();
        auto e = mk(EK::kLit);
        switch (tk.kind) {
            case Tok::kString: {
                std::string s = tk.text;
                while (peek().kind == Tok::kString) s += next().text;  // adjacent literals concatenate
                e->lit = Value::str(s);
                return e;
            }
            case Tok::kInt: {
                errno = 0;
                long long v = std::strtoll(tk.text.c_str(), nullptr, 10);
                if (errno) err("integer literal out of range");
                e->lit = Value::integer(v);
                return e;
            }
            case Tok::kFloat: e->lit = Value::number(std::strtod(tk.text.c_str(), nullptr)); return e;
            case Tok::kName:
                if (tk.text == "true" || tk.text == "True") e->lit = Value::boolean(true);
                else if (tk.text == "false" || tk.text == "False") e->lit = Value::boolean(false);
                else if (tk.text == "none" || tk.text == "None") e->lit = Value::none();
                else { e->kind = EK::kName; e->name = tk.text; }
                return e;
            case Tok::kOp:
                if (tk.text == "(") {
                    ExprP inner = expression();
                    if (at_op(",")) {  // tuple: treat as list
                        auto l = mk(EK::kList);
                        l->kids.push_back(std::move(inner));
                        while (at_op(",")) { next(); if (at_op(")")) break; l->kids.push_back(expression()); }
                        inner = std::move(l);
                    }
                    expect_op(")");
                    return inner;
                }
                if (tk.text == "[") {
                    e->kind = EK::kList;
                    while (!at_op("]")) { e->kids.push_back(expression()); if (!at_op("]")) expect_op(","); }
                    next();
                    return e;
                }
                if (tk.text == "{") {
                    e->kind = EK::kDict;
                    while (!at_op("}")) {
                        e->kids.push_back(expression());
                        expect_op(":");
                        e->kids.push_back(expression());
                        if (!at_op("}")) expect_op(",");
                    }
                    next();
                    return e;
                }
                break;
            case Tok::kEnd: break;
        }
        fail("unexpected '" + tk.text + "' at line " + std::to_string(line_));
    }

    std::vector<Token> t_;
    size_t p_ = 0;
    int line_;
    int depth_ = 0;
    int max_depth_;
};

// Statement-level parser over the segment list.
class TemplateParser {
public:
    TemplateParser(std::vector<Segment> segs, int max_depth) : segs_(std::move(segs)), max_depth_(max_depth) {}

    Body parse_all() {
        std::string end;
        Body b = block({}, &end, 0);
        return b;
    }

private:
    // Parses statements until one of `enders` (first keyword of a {% %} tag); returns it in *end and
    // leaves its Parser in cur_ for the caller.
    Body block(const std::set<std::string>& enders, std::string* end, int depth) {
        if (depth > max_depth_) fail("blocks nested too deeply");
        Body body;
        while (i_ < segs_.size()) {
            const Segment& sg = segs_[i_++];
            if (sg.kind == SegKind::kText) {
                auto s = std::make_unique<Stmt>();
                s->kind = SK::kText;
                s->text = sg.body;
                body.push_back(std::move(s));
                continue;
            }
            auto p = std::make_unique<Parser>(tokenize(sg.body, sg.line), sg.line, max_depth_);
            if (sg.kind == SegKind::kExpr) {
                auto s = std::make_unique<Stmt>();
                s->kind = SK::kOutput;
                s->exprs.push_back(p->expression());
                p->expect_end();
                body.push_back(std::move(s));
                continue;
            }
            std::string kw = p->expect_name();
            if (enders.count(kw)) {
                *end = kw;
                cur_ = std::move(p);
                return body;
            }
            body.push_back(statement(kw, *p, sg.line, depth));
        }
        if (!enders.empty()) fail("missing {% " + *enders.begin() + " %} at end of template");
        return body;
    }

    std::unique_ptr<Stmt> statement(const std::string& kw, Parser& p, int line, int depth) {
        auto s = std::make_unique<Stmt>();
        std::string end;
        if (kw == "if") {
            s->kind = SK::kIf;
            s->exprs.push_back(p.expression());
            p.expect_end();
            for (;;) {
                s->bodies.push_back(block({"elif", "else", "endif"}, &end, depth + 1));
                auto ender = std::move(cur_);
                if (end == "endif") { ender->expect_end(); break; }
                if (end == "else") {
                    ender->expect_end();
                    s->bodies.push_back(block({"endif"}, &end, depth + 1));
                    cur_->expect_end();
                    break;
                }
                s->exprs.push_back(ender->expression());
                ender->expect_end();
            }
        } else if (kw == "for") {
            s->kind = SK::kFor;
            s->names.push_back(p.expect_name());
            while (p.at_op(",")) { p.next(); s->names.push_back(p.expect_name()); }
            if (!p.at_name("in")) p.err("expected 'in'");
            p.next();
            s->exprs.push_back(p.or_expr());
            if (p.at_name("if")) { p.next(); s->exprs.push_back(p.expression()); }
            if (p.at_name("recursive")) p.err("recursive loops are not supported");
            p.expect_end();
            s->bodies.push_back(block({"else", "endfor"}, &end, depth + 1));
            if (end == "else") {
                cur_->expect_end();
                s->bodies.push_back(block({"endfor"}, &end, depth + 1));
            } else {
                s->bodies.emplace_back();
            }
            cur_->expect_end();
        } else if (kw == "set") {
            s->kind = SK::kSet;
            s->names.push_back(p.expect_name());
            if (p.at_op(".")) { p.next(); s->names.push_back(p.expect_name()); }
            if (!p.at_op("=")) p.err("only `set name = value` is supported (no set blocks or unpacking)");
            p.next();
            s->exprs.push_back(p.expression());
            p.expect_end();
        } else if (kw == "break" || kw == "continue") {
            s->kind = kw == "break" ? SK::kBreak : SK::kContinue;
            p.expect_end();
        } else {
            fail("unsupported tag {% " + kw + " %} at line " + std::to_string(line));
        }
        return s;
    }

    std::vector<Segment> segs_;
    size_t i_ = 0;
    int max_depth_;
    std::unique_ptr<Parser> cur_;
};

}  // namespace

Body parse_template(const std::string& tmpl, int max_depth) {
    TemplateParser tp(lex(tmpl), max_depth);
    return tp.parse_all();
}

}  // namespace kiln::tokenizer::jinja::detail
