// Jinja2 subset front end: lexer (template -> text/tag segments, whitespace control) and parser
// (tags -> the AST of jinja_ast.h). Malformed input throws JinjaError, caught by jinja::render().
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/unicode.h"

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

[[noreturn]] void fail(const std::string& msg, int line) { throw JinjaError{msg, line}; }

bool is_raw(const std::string& body) {
    size_t b = body.find_first_not_of(" \t\n\r");
    size_t e = body.find_last_not_of(" \t\n\r");
    return b != std::string::npos && body.substr(b, e - b + 1) == "raw";
}

// The position of the "%}" closing the first {% endraw %} at or after `pos`.
size_t find_endraw(const std::string& t, size_t pos) {
    for (size_t p = t.find("{%", pos); p != std::string::npos; p = t.find("{%", p + 2)) {
        size_t q = p + 2;
        if (q < t.size() && (t[q] == '-' || t[q] == '+')) ++q;
        while (q < t.size() && is_ws(t[q])) ++q;
        if (t.compare(q, 6, "endraw") != 0) continue;
        q += 6;
        while (q < t.size() && is_ws(t[q])) ++q;
        if (q < t.size() && (t[q] == '-' || t[q] == '+')) ++q;
        if (t.compare(q, 2, "%}") == 0) return q;
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
        const int line_of_tag = line;
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
        if (close == std::string::npos) fail("unclosed tag", line);
        bool minus_close = close > inner && t[close - 1] == '-';
        bool plus_close = close > inner && t[close - 1] == '+';
        std::string body = t.substr(inner, close - inner - (minus_close || plus_close ? 1 : 0));
        flush_text();
        for (char c : t.substr(open, close + 2 - open)) line += c == '\n';
        pos = close + 2;
        if (kind == '%' && is_raw(body)) {  // {% raw %}: text up to {% endraw %} verbatim
            size_t end = find_endraw(t, pos);
            if (end == std::string::npos) fail("missing {% endraw %}", line);
            size_t end_open = t.rfind("{%", end);
            std::string raw = t.substr(pos, end_open - pos);
            if (t[end_open + 2] == '-') while (!raw.empty() && is_ws(raw.back())) raw.pop_back();
            if (minus_close) raw.erase(0, raw.find_first_not_of(" \t\n\r\f\v") == std::string::npos ? raw.size()
                                               : raw.find_first_not_of(" \t\n\r\f\v"));
            else if (!plus_close && !raw.empty() && raw[0] == '\n') raw.erase(0, 1);
            segs.push_back({SegKind::kText, raw, line});
            for (char c : t.substr(pos, end + 2 - pos)) line += c == '\n';
            minus_close = t[end - 1] == '-';
            plus_close = t[end - 1] == '+';
            pos = end + 2;
        } else if (kind != '#') {
            segs.push_back({kind == '{' ? SegKind::kExpr : SegKind::kStmt, body, line_of_tag});
        }
        if (minus_close) strip_next = true;
        else if (kind != '{' && !plus_close) trim_nl = true;
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

// Python's unicode-escape for the escape at s[q] (a backslash); appends it to `out` and returns the position
// after it.
size_t unescape(const std::string& s, size_t q, std::string& out) {
    char e = s[q + 1];
    auto hex = [&](size_t n) -> size_t {
        uint32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
            char h = q + 2 + k < s.size() ? s[q + 2 + k] : 'x';
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated \\x/\\u escape in a string literal", 0);
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                 : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
        }
        if (cp > 0x10FFFF) fail("escape out of range in a string literal", 0);
        utf8_append(out, cp);
        return q + 2 + n;
    };
    switch (e) {
        case 'n': out += '\n'; return q + 2;
        case 't': out += '\t'; return q + 2;
        case 'r': out += '\r'; return q + 2;
        case 'a': out += '\a'; return q + 2;
        case 'b': out += '\b'; return q + 2;
        case 'f': out += '\f'; return q + 2;
        case 'v': out += '\v'; return q + 2;
        case '\\': case '\'': case '"': out += e; return q + 2;
        case '\n': return q + 2;  // line continuation
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                size_t k = q + 1;
                for (int n = 0; n < 3 && k < s.size() && s[k] >= '0' && s[k] <= '7'; ++n, ++k) cp = cp * 8 + (s[k] - '0');
                utf8_append(out, cp);
                return k;
            }
            out += '\\';
            out += e;
            return q + 2;
    }
}

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
                while (q < s.size() && (std::isdigit(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
            }
            if (q < s.size() && (s[q] == 'e' || s[q] == 'E')) {  // exponent: 1e20, 1.5e-7
                size_t r = q + 1;
                if (r < s.size() && (s[r] == '+' || s[r] == '-')) ++r;
                if (r < s.size() && std::isdigit(static_cast<unsigned char>(s[r]))) {
                    is_float = true;
                    q = r;
                    while (q < s.size() && (std::isdigit(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
                }
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
                    q = unescape(s, q, str);
                    continue;
                }
                str += s[q];
                ++q;
            }
            if (q >= s.size()) fail("unterminated string", line);
            out.push_back({Tok::kString, str});
            p = q + 1;
        } else {
            std::string op(1, c);
            for (const char* o : kOps2)
                if (s.compare(p, 2, o) == 0) op = o;
            if (op.size() == 1 && std::string("+-*/%~|()[]{},.:=<>").find(c) == std::string::npos)
                fail(std::string("unexpected character '") + c + "'", line);
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
        fail(what + (at_end() ? " at the end of the tag" : " near '" + peek().text + "'"), line_);
    }
    void expect_end() { if (!at_end()) err("unexpected token"); }
    int line() const { return line_; }

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
    // An expression, or a tuple of them without parentheses (`{% set a = 1, 2 %}`, `{% for x in a, b %}`).
    ExprP tuple_or_expression(bool plain = false) {
        ExprP e = plain ? or_expr() : expression();
        if (!at_op(",")) return e;
        auto l = mk(EK::kTuple);
        l->kids.push_back(std::move(e));
        while (at_op(",")) {
            next();
            if (at_end() || at_name("if") || at_name("recursive")) break;
            l->kids.push_back(plain ? or_expr() : expression());
        }
        return l;
    }
    // `name(args)` arguments: a call's (after the callee) or a filter's.
    void call_args(Expr* e) {
        expect_op("(");
        while (!at_op(")")) {
            if (at_op("*") || at_op("**")) err("*args / **kwargs in calls are not supported");
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
    // A filter chain after `|` or `{% filter %}`, applied to `e`.
    ExprP filter_chain(ExprP e) {
        for (;;) {
            auto f = mk(EK::kFilter);
            f->name = expect_name();
            while (at_op(".")) { next(); f->name += "." + expect_name(); }
            f->kids.push_back(std::move(e));
            if (at_op("(")) call_args(f.get());
            e = std::move(f);
            if (!at_op("|")) return e;
            next();
        }
    }
    ExprP mk(EK k) const { auto e = std::make_unique<Expr>(); e->kind = k; e->line = line_; return e; }

private:
    struct Guard {
        Parser* p;
        explicit Guard(Parser* pp) : p(pp) { if (++p->depth_ > p->max_depth_) p->err("expression nested too deeply"); }
        ~Guard() { --p->depth_; }
    };
    ExprP bin(EK k, const std::string& op, ExprP a, ExprP b) const {
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
    // Comparisons chain as in Python: a < b < c is a < b and b < c.
    ExprP compare() {
        ExprP first = add();
        ExprP chain;
        for (;;) {
            std::string op;
            static const char* kCmp[] = {"==", "!=", "<", ">", "<=", ">="};
            for (const char* o : kCmp) if (at_op(o)) op = o;
            if (!op.empty()) {
                next();
            } else if (at_name("in")) {
                next();
                op = "in";
            } else if (at_name("not") && peek(1).kind == Tok::kName && peek(1).text == "in") {
                next(); next();
                op = "notin";
            } else {
                return chain ? std::move(chain) : std::move(first);
            }
            if (!chain) {
                chain = mk(EK::kCompare);
                chain->kids.push_back(std::move(first));
            }
            chain->kw.push_back(op);
            chain->kids.push_back(add());
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
        ExprP e = pow();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            std::string op = next().text;
            e = bin(EK::kBin, op, std::move(e), pow());
        }
        return e;
    }
    ExprP pow() {
        ExprP e = unary(true);
        while (at_op("**")) { next(); e = bin(EK::kBin, "**", std::move(e), unary(true)); }
        return e;
    }
    ExprP unary(bool with_filter) {
        Guard g(this);
        ExprP e;
        if (at_op("-")) {
            next();
            e = mk(EK::kNeg);
            e->kids.push_back(unary(false));
        } else if (at_op("+")) {
            next();
            e = unary(false);
        } else {
            e = postfix(primary());
        }
        return with_filter ? filters(std::move(e)) : std::move(e);
    }
    ExprP postfix(ExprP e) {
        for (;;) {
            if (at_op(".")) {
                next();
                auto a = mk(EK::kAttr);
                if (peek().kind == Tok::kInt) {  // x.0 is x[0]
                    a->kind = EK::kIndex;
                    a->kids.push_back(std::move(e));
                    auto lit = mk(EK::kLit);
                    lit->lit = Value::integer(std::strtoll(next().text.c_str(), nullptr, 10));
                    a->kids.push_back(std::move(lit));
                } else {
                    a->name = expect_name();
                    a->kids.push_back(std::move(e));
                }
                e = std::move(a);
            } else if (at_op("[")) {
                next();
                ExprP parts[3];
                bool slice = false;
                int idx = 0;
                while (!at_op("]")) {
                    if (at_end()) err("expected ']'");
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
                           at_op("[") || at_op("-") ||
                           (peek().kind == Tok::kName && !at_name("and") && !at_name("or") && !at_name("if") &&
                            !at_name("else") && !at_name("in") && !at_name("is") && !at_name("not"))) {
                    f->kw.push_back("");  // `x is divisibleby 3`, `x is sameas none`
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
                    if (at_op(")")) { next(); e->kind = EK::kTuple; return e; }
                    ExprP inner = expression();
                    if (at_op(",")) {
                        auto l = mk(EK::kTuple);
                        l->kids.push_back(std::move(inner));
                        while (at_op(",")) { next(); if (at_op(")")) break; l->kids.push_back(expression()); }
                        inner = std::move(l);
                    }
                    expect_op(")");
                    return inner;
                }
                if (tk.text == "[") {
                    e->kind = EK::kList;
                    while (!at_op("]")) {
                        if (at_end()) err("expected ']'");
                        e->kids.push_back(expression());
                        if (!at_op("]")) expect_op(",");
                    }
                    next();
                    return e;
                }
                if (tk.text == "{") {
                    e->kind = EK::kDict;
                    while (!at_op("}")) {
                        if (at_end()) err("expected '}'");
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
        fail("unexpected '" + tk.text + "'", line_);
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
        return block({}, &end, 0);
    }

private:
    // Parses statements until one of `enders` (first keyword of a {% %} tag); returns it in *end and
    // leaves its Parser in cur_ for the caller.
    Body block(const std::set<std::string>& enders, std::string* end, int depth) {
        if (depth > max_depth_) fail("blocks nested too deeply", segs_.empty() ? 0 : segs_[std::min(i_, segs_.size() - 1)].line);
        Body body;
        while (i_ < segs_.size()) {
            const Segment& sg = segs_[i_++];
            if (sg.kind == SegKind::kText) {
                auto s = std::make_unique<Stmt>();
                s->kind = SK::kText;
                s->line = sg.line;
                s->text = sg.body;
                body.push_back(std::move(s));
                continue;
            }
            std::unique_ptr<Parser> p;
            try {
                p = std::make_unique<Parser>(tokenize(sg.body, sg.line), sg.line, max_depth_);
            } catch (JinjaError& e) {
                if (e.line == 0) e.line = sg.line;
                throw;
            }
            if (sg.kind == SegKind::kExpr) {
                auto s = std::make_unique<Stmt>();
                s->kind = SK::kOutput;
                s->line = sg.line;
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
        if (!enders.empty()) fail("missing {% " + *enders.begin() + " %} at the end of the template", opened_line_);
        return body;
    }

    // The body of a block tag up to {% `ender` %} (whose tag must be otherwise empty, or name `name`).
    Body closed(const char* ender, int line, int depth, const std::string& name = {}) {
        std::string end;
        int saved = opened_line_;
        opened_line_ = line;
        Body b = block({ender}, &end, depth + 1);
        opened_line_ = saved;
        if (!name.empty() && cur_->peek().kind == Tok::kName && cur_->peek().text == name) cur_->next();
        cur_->expect_end();
        return b;
    }

    // `(a, b=default, ...)` parameters of a macro or call block.
    void params(Parser& p, Stmt& s) {
        p.expect_op("(");
        while (!p.at_op(")")) {
            s.names.push_back(p.expect_name());
            if (p.at_op("=")) { p.next(); s.exprs.push_back(p.expression()); }
            else s.exprs.push_back(nullptr);
            if (!p.at_op(")")) p.expect_op(",");
        }
        p.next();
    }

    std::unique_ptr<Stmt> statement(const std::string& kw, Parser& p, int line, int depth) {
        auto s = std::make_unique<Stmt>();
        s->line = line;
        std::string end;
        if (kw == "if") {
            s->kind = SK::kIf;
            s->exprs.push_back(p.expression());
            p.expect_end();
            int saved = opened_line_;
            opened_line_ = line;
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
            opened_line_ = saved;
        } else if (kw == "for") {
            s->kind = SK::kFor;
            s->names.push_back(p.expect_name());
            while (p.at_op(",")) { p.next(); s->names.push_back(p.expect_name()); }
            if (!p.at_name("in")) p.err("expected 'in'");
            p.next();
            s->exprs.push_back(p.tuple_or_expression(/*plain=*/true));
            s->exprs.push_back(nullptr);
            if (p.at_name("if")) { p.next(); s->exprs.back() = p.or_expr(); }
            if (p.at_name("recursive")) { p.next(); s->recursive = true; }
            p.expect_end();
            int saved = opened_line_;
            opened_line_ = line;
            s->bodies.push_back(block({"else", "endfor"}, &end, depth + 1));
            if (end == "else") {
                cur_->expect_end();
                s->bodies.push_back(block({"endfor"}, &end, depth + 1));
            } else {
                s->bodies.emplace_back();
            }
            opened_line_ = saved;
            cur_->expect_end();
        } else if (kw == "set") {
            std::string target = p.expect_name();
            if (p.at_op(".")) { p.next(); target += "." + p.expect_name(); }
            s->names.push_back(target);
            while (p.at_op(",")) { p.next(); s->names.push_back(p.expect_name()); }
            if (p.at_op("=")) {
                s->kind = SK::kSet;
                p.next();
                s->exprs.push_back(p.tuple_or_expression());
                p.expect_end();
            } else {  // {% set x %}...{% endset %}, optionally {% set x | filter %}
                if (s->names.size() != 1) p.err("a set block assigns one name");
                s->kind = SK::kSetBlock;
                s->exprs.push_back(nullptr);
                if (p.at_op("|")) {
                    p.next();
                    auto hole = p.mk(EK::kName);
                    hole->name = "\x01block";
                    s->exprs[0] = p.filter_chain(std::move(hole));
                }
                p.expect_end();
                s->bodies.push_back(closed("endset", line, depth));
            }
        } else if (kw == "filter") {
            s->kind = SK::kFilterBlock;
            auto hole = p.mk(EK::kName);
            hole->name = "\x01block";
            s->exprs.push_back(p.filter_chain(std::move(hole)));
            p.expect_end();
            s->bodies.push_back(closed("endfilter", line, depth));
        } else if (kw == "macro") {
            s->kind = SK::kMacro;
            s->text = p.expect_name();
            params(p, *s);
            p.expect_end();
            s->bodies.push_back(closed("endmacro", line, depth, s->text));
        } else if (kw == "call") {
            s->kind = SK::kCallBlock;
            if (p.at_op("(")) params(p, *s);
            ExprP c = p.expression();
            if (c->kind != EK::kCall) p.err("{% call %} needs a macro call");
            s->exprs.insert(s->exprs.begin(), std::move(c));
            p.expect_end();
            s->bodies.push_back(closed("endcall", line, depth));
        } else if (kw == "with") {
            s->kind = SK::kWith;
            while (!p.at_end()) {
                s->names.push_back(p.expect_name());
                p.expect_op("=");
                s->exprs.push_back(p.expression());
                if (!p.at_end()) p.expect_op(",");
            }
            s->bodies.push_back(closed("endwith", line, depth));
        } else if (kw == "generation") {  // HF's assistant-mask tag: renders its body
            s->kind = SK::kBlock;
            p.expect_end();
            s->bodies.push_back(closed("endgeneration", line, depth));
        } else if (kw == "break" || kw == "continue") {
            s->kind = kw == "break" ? SK::kBreak : SK::kContinue;
            p.expect_end();
        } else {
            fail("unsupported tag {% " + kw + " %}", line);
        }
        return s;
    }

    std::vector<Segment> segs_;
    size_t i_ = 0;
    int max_depth_;
    int opened_line_ = 0;
    std::unique_ptr<Parser> cur_;
};

}  // namespace

Body parse_template(const std::string& tmpl, int max_depth) {
    TemplateParser tp(lex(tmpl), max_depth);
    return tp.parse_all();
}

}  // namespace kiln::tokenizer::jinja::detail
