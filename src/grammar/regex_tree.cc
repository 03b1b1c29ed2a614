// regex_tree.h: simplifying constructors and the printer.
//
// Repetitions of sub-expressions that can match the empty string are rewritten onto parts that cannot
// ((a?)* => a*, (a|)+ => a*, (a?b?)* => (a|b)*): the same language, but no rule of the compiled
// grammar can call itself without consuming a byte, which gbnf.h's parser refuses as left recursion.
#include "grammar/regex_tree.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "tokenizer/unicode.h"

namespace kiln::grammar::regex_tree {
namespace {

Node make_nothing() {
    Node n;
    n.kind = Node::Kind::kNothing;
    return n;
}

bool same(const Node& a, const Node& b) {
    if (a.kind != b.kind || a.min != b.min || a.max != b.max || a.set.size() != b.set.size() ||
        a.kids.size() != b.kids.size())
        return false;
    for (size_t i = 0; i < a.set.size(); ++i)
        if (a.set[i].lo != b.set[i].lo || a.set[i].hi != b.set[i].hi) return false;
    for (size_t i = 0; i < a.kids.size(); ++i)
        if (!same(a.kids[i], b.kids[i])) return false;
    return true;
}

bool nullable(const Node& n) {
    switch (n.kind) {
        case Node::Kind::kEmpty: return true;
        case Node::Kind::kNothing:
        case Node::Kind::kSet: return false;
        case Node::Kind::kSeq: return std::all_of(n.kids.begin(), n.kids.end(), nullable);
        case Node::Kind::kAlt: return std::any_of(n.kids.begin(), n.kids.end(), nullable);
        case Node::Kind::kRepeat: return n.min == 0 || nullable(n.kids[0]);
    }
    return false;
}

size_t node_count(const Node& n) {
    size_t c = 1;
    for (const Node& k : n.kids) c += node_count(k);
    return c;
}

// The same language less the empty string. Quadratic in a sequence's length, so make_repeat only
// asks it of small parts.
Node non_empty(const Node& n) {
    switch (n.kind) {
        case Node::Kind::kEmpty:
        case Node::Kind::kNothing: return make_nothing();
        case Node::Kind::kSet: return n;
        case Node::Kind::kAlt: {
            std::vector<Node> parts;
            for (const Node& k : n.kids) parts.push_back(non_empty(k));
            return make_alt(std::move(parts));
        }
        case Node::Kind::kSeq: {
            if (!nullable(n)) return n;
            // Every part can be empty: a non-empty match has a first non-empty part i.
            std::vector<Node> alts;
            for (size_t i = 0; i < n.kids.size(); ++i) {
                std::vector<Node> seq{non_empty(n.kids[i])};
                seq.insert(seq.end(), n.kids.begin() + i + 1, n.kids.end());
                alts.push_back(make_seq(std::move(seq)));
            }
            return make_alt(std::move(alts));
        }
        case Node::Kind::kRepeat:
            if (!nullable(n)) return n;
            if (!nullable(n.kids[0])) return make_repeat(n.kids[0], 1, n.max);
            return make_repeat(non_empty(n.kids[0]), 1, n.max);
    }
    return n;
}

// For a part x that can be empty: a y that cannot, with y* == x* (linear in x's size):
// (a|b)* == (a'|b')*, and when every part of a sequence can be empty, (a b)* == (a|b)*.
Node star_body(const Node& n) {
    switch (n.kind) {
        case Node::Kind::kEmpty:
        case Node::Kind::kNothing: return make_nothing();
        case Node::Kind::kSet: return n;
        case Node::Kind::kSeq:
        case Node::Kind::kAlt: {
            if (n.kind == Node::Kind::kSeq && !nullable(n)) return n;
            std::vector<Node> parts;
            for (const Node& k : n.kids) parts.push_back(star_body(k));
            return make_alt(std::move(parts));
        }
        case Node::Kind::kRepeat: return nullable(n) ? star_body(n.kids[0]) : n;
    }
    return n;
}

// One code point inside a GBNF literal ("...") or class ([...]). Printable ASCII and the letters
// and CJK of the BMP are written as themselves; controls, separators, format characters and
// everything astral as \xHH / \uHHHH / \UHHHHHHHH.
void append_char(std::string& out, uint32_t cp, bool in_class) {
    char buf[16];
    bool special = in_class && (cp == ']' || cp == '^' || cp == '-' || cp == '[');
    if (cp == '\\') {
        out += "\\\\";
    } else if (cp == '"' && !in_class) {
        out += "\\\"";
    } else if (cp == '\n') {
        out += "\\n";
    } else if (cp == '\r') {
        out += "\\r";
    } else if (cp == '\t') {
        out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || special) {
        std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(cp));
        out += buf;
    } else if (cp < 0x7F || (cp >= 0xA1 && cp <= 0x1FFF && cp != 0xAD) || (cp >= 0x2E80 && cp <= 0xD7A3) ||
               (cp >= 0xF900 && cp <= 0xFDCF)) {
        tokenizer::utf8_append(out, cp);
    } else if (cp <= 0xFFFF) {
        std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(cp));
        out += buf;
    } else {
        std::snprintf(buf, sizeof buf, "\\U%08X", unsigned(cp));
        out += buf;
    }
}

std::string print_class(const CharSet& set) {
    CharSet comp = complement(set);
    bool negate = !comp.empty() && comp.size() < set.size();
    std::string out = negate ? "[^" : "[";
    for (Range r : negate ? comp : set) {
        append_char(out, r.lo, true);
        if (r.hi == r.lo) continue;
        if (r.hi > r.lo + 1) out += '-';
        append_char(out, r.hi, true);
    }
    return out + "]";
}

// prec: 0 = an alternative, 1 = an element of a sequence, 2 = the operand of a quantifier.
std::string print(const Node& n, int prec) {
    auto wrap = [](const std::string& s) { return "(" + s + ")"; };
    switch (n.kind) {
        case Node::Kind::kEmpty:
        case Node::Kind::kNothing: return "\"\"";  // kNothing never reaches here (regex_to_gbnf)
        case Node::Kind::kSet: {
            if (!n.single()) return print_class(n.set);
            std::string lit = "\"";
            append_char(lit, n.set[0].lo, false);
            return lit + "\"";
        }
        case Node::Kind::kSeq: {
            std::string out;
            for (size_t i = 0; i < n.kids.size();) {
                if (!out.empty()) out += ' ';
                if (n.kids[i].single()) {  // a run of single code points is one literal
                    out += '"';
                    for (; i < n.kids.size() && n.kids[i].single(); ++i) append_char(out, n.kids[i].set[0].lo, false);
                    out += '"';
                } else {
                    out += print(n.kids[i++], 1);
                }
            }
            return prec >= 2 ? wrap(out) : out;
        }
        case Node::Kind::kAlt: {
            std::string out;
            for (const Node& k : n.kids) out += (out.empty() ? "" : " | ") + print(k, 0);
            return prec >= 1 ? wrap(out) : out;
        }
        case Node::Kind::kRepeat: {
            std::string out = print(n.kids[0], 2);
            if (n.min == 0 && n.max == 1)
                out += "?";
            else if (n.min == 0 && n.max == kUnbounded)
                out += "*";
            else if (n.min == 1 && n.max == kUnbounded)
                out += "+";
            else if (n.min == n.max)
                out += "{" + std::to_string(n.min) + "}";
            else
                out += "{" + std::to_string(n.min) + "," + (n.max == kUnbounded ? "" : std::to_string(n.max)) + "}";
            return prec >= 2 ? wrap(out) : out;
        }
    }
    return "\"\"";
}

}  // namespace

CharSet normalize(CharSet s) {
    CharSet split;
    for (Range r : s) {  // cut the surrogates out
        if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
            split.push_back(r);
            continue;
        }
        if (r.lo < kSurrogateLo) split.push_back({r.lo, kSurrogateLo - 1});
        if (r.hi > kSurrogateHi) split.push_back({kSurrogateHi + 1, r.hi});
    }
    std::sort(split.begin(), split.end(), [](Range a, Range b) { return a.lo < b.lo; });
    CharSet out;
    for (Range r : split) {
        if (!out.empty() && r.lo <= out.back().hi + 1)
            out.back().hi = std::max(out.back().hi, r.hi);
        else
            out.push_back(r);
    }
    return out;
}

CharSet complement(const CharSet& s) {
    CharSet out;
    uint32_t next = 0;
    for (Range r : s) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return normalize(std::move(out));
}

CharSet class_escape_set(uint32_t letter) {  // \d \w \s (ASCII) and their negations
    CharSet s;
    switch (letter | 0x20) {
        case 'd': s = {{'0', '9'}}; break;
        case 'w': s = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
        default: s = {{'\t', '\r'}, {' ', ' '}}; break;  // \t \n \v \f \r and space
    }
    return (letter >= 'a') ? s : complement(s);
}

Node make_set(CharSet s) {
    Node n;
    n.set = normalize(std::move(s));
    n.kind = n.set.empty() ? Node::Kind::kNothing : Node::Kind::kSet;
    return n;
}

Node make_seq(std::vector<Node> parts) {
    Node n;
    n.kind = Node::Kind::kSeq;
    for (Node& p : parts) {
        if (p.kind == Node::Kind::kNothing) return make_nothing();
        if (p.kind == Node::Kind::kEmpty) continue;
        if (p.kind == Node::Kind::kSeq)
            for (Node& k : p.kids) n.kids.push_back(std::move(k));
        else
            n.kids.push_back(std::move(p));
    }
    if (n.kids.empty()) return Node{};
    if (n.kids.size() == 1) return std::move(n.kids[0]);
    return n;
}

// Alternatives are flattened, code point sets merge into one class (a|[bc] => [a-c]) and repeats
// are dropped: fewer parallel parses for the matcher.
Node make_alt(std::vector<Node> parts) {
    std::vector<Node> flat;
    for (Node& p : parts) {
        if (p.kind == Node::Kind::kAlt)
            for (Node& k : p.kids) flat.push_back(std::move(k));
        else if (p.kind != Node::Kind::kNothing)
            flat.push_back(std::move(p));
    }
    Node n;
    n.kind = Node::Kind::kAlt;
    size_t set_at = SIZE_MAX;  // the alternative that collects every code point set
    for (Node& p : flat) {
        if (p.kind == Node::Kind::kSet && set_at != SIZE_MAX) {
            CharSet& s = n.kids[set_at].set;
            s.insert(s.end(), p.set.begin(), p.set.end());
            continue;
        }
        if (p.kind == Node::Kind::kSet) set_at = n.kids.size();
        if (std::none_of(n.kids.begin(), n.kids.end(), [&](const Node& k) { return same(k, p); }))
            n.kids.push_back(std::move(p));
    }
    if (set_at != SIZE_MAX) n.kids[set_at].set = normalize(std::move(n.kids[set_at].set));
    if (n.kids.empty()) return make_nothing();
    if (n.kids.size() == 1) return std::move(n.kids[0]);
    return n;
}

// x{min,max}. A part that can be empty is replaced by one that cannot, so that no rule of the
// compiled grammar recurses without consuming input (and fewer parses are ambiguous): x* == y*
// (star_body), x{m,n} == x'{0,n} (non_empty; a large x stays as it is: bounded repetitions compile
// to nested optionals, which are not recursive).
Node make_repeat(Node x, int min, int max) {
    constexpr size_t kMaxRewrite = 64;  // nodes; non_empty can square that
    if (x.kind == Node::Kind::kNothing) return min == 0 ? Node{} : make_nothing();
    if (x.kind == Node::Kind::kEmpty || max == 0) return Node{};
    if (nullable(x) && (max == kUnbounded || node_count(x) <= kMaxRewrite)) {
        x = max == kUnbounded ? star_body(x) : non_empty(x);
        min = 0;
        if (x.kind == Node::Kind::kNothing) return Node{};
    }
    if (min == 1 && max == 1) return x;
    Node n;
    n.kind = Node::Kind::kRepeat;
    n.min = min;
    n.max = max;
    n.kids.push_back(std::move(x));
    return n;
}

std::string print_expression(const Node& n) { return print(n, 2); }

}  // namespace kiln::grammar::regex_tree
