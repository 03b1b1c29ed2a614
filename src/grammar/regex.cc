// regex_to_gbnf (see regex.h): a recursive-descent parser over the pattern's code points builds a
// regex_tree.h tree (code point sets, sequences, alternations, repetitions), simplified as it is
// built and printed as one GBNF expression. Character classes become explicit sorted range lists over
// U+0000..U+10FFFF (surrogates left out: UTF-8 text cannot hold them), printed as a positive class
// or, when that is shorter, as the negation of the complement; so \W inside a negated class, '.',
// [\s\S] and the like need no special cases. Syntax follows Python's re where ECMAScript differs
// ("[]a]" is a class of ']' and 'a', "a{" and "x{}" are literals, "{,n}" is "{0,n}").
#include "grammar/regex.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "grammar/regex_tree.h"
#include "tokenizer/unicode.h"

namespace kiln::grammar {
namespace {

using core::StatusCode;
using namespace regex_tree;

constexpr int kMaxRepeat = 10000;  // gbnf.h's parser refuses larger bounds
constexpr int kMaxDepth = 200;     // nested groups, so that a hostile pattern cannot exhaust the stack

// ---- Parsing ----

bool is_hex(uint32_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }
uint32_t hex_value(uint32_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

class Parser {
public:
    explicit Parser(std::string_view pattern) : pattern_(pattern) {}

    core::Result<Node> parse() {
        KILN_RETURN_IF_ERROR(decode());
        Node root;
        KILN_RETURN_IF_ERROR(parse_alt(0, &root));
        if (i_ < cps_.size())  // only a ')' stops parse_alt early
            return invalid("unbalanced parenthesis ')'", i_);
        return root;
    }

private:
    std::string_view pattern_;
    std::vector<uint32_t> cps_;  // the pattern's code points
    std::vector<size_t> offs_;   // their byte offsets (offs_[cps_.size()] == pattern size)
    size_t i_ = 0;               // the next code point

    core::Status fail(StatusCode code, const std::string& what, size_t at) const {
        return core::error(code) << "regex: " << what << " at offset " << offs_[std::min(at, cps_.size())]
                                 << (code == StatusCode::kUnsupported ? " is not supported" : "");
    }
    core::Status invalid(const std::string& what, size_t at) const { return fail(StatusCode::kInvalidArgument, what, at); }
    core::Status unsupported(const std::string& what, size_t at) const { return fail(StatusCode::kUnsupported, what, at); }

    bool at(size_t i, uint32_t c) const { return i < cps_.size() && cps_[i] == c; }

    core::Status decode() {
        for (size_t p = 0; p < pattern_.size();) {
            size_t len = 1;
            const int32_t cp = tokenizer::utf8_decode(pattern_, p, &len);
            if (cp < 0) return core::error(StatusCode::kInvalidArgument) << "regex: invalid UTF-8 at offset " << p;
            cps_.push_back(uint32_t(cp));
            offs_.push_back(p);
            p += len;
        }
        offs_.push_back(pattern_.size());
        return core::Status::ok();
    }

    core::Status parse_alt(int depth, Node* out) {
        std::vector<Node> alts(1);
        KILN_RETURN_IF_ERROR(parse_seq(depth, &alts.back()));
        while (at(i_, '|')) {
            ++i_;
            alts.emplace_back();
            KILN_RETURN_IF_ERROR(parse_seq(depth, &alts.back()));
        }
        *out = make_alt(std::move(alts));
        return core::Status::ok();
    }

    core::Status parse_seq(int depth, Node* out) {
        std::vector<Node> parts;
        while (i_ < cps_.size() && cps_[i_] != '|' && cps_[i_] != ')') {
            size_t start = i_;
            bool anchor = false;
            Node atom;
            KILN_RETURN_IF_ERROR(parse_atom(depth, &atom, &anchor));
            int min = 0, max = 0;
            bool quantified = false;
            for (size_t q = i_; parse_quantifier(&min, &max); q = i_) {
                if (anchor) return invalid("nothing to repeat", start);
                if (quantified) return invalid("multiple repeat", q);
                quantified = true;
                KILN_RETURN_IF_ERROR(take_quantifier(min, max, q));
                atom = make_repeat(std::move(atom), min, max);
            }
            parts.push_back(std::move(atom));
        }
        *out = make_seq(std::move(parts));
        return core::Status::ok();
    }

    // A {m}, {m,}, {,n}, {m,n} or {,} at `i` (Python's forms): its bounds and the index after it.
    bool braces(size_t i, int* min, int* max, size_t* end) const {
        if (!at(i, '{')) return false;
        auto number = [&](size_t* k, int* v) {
            size_t begin = *k;
            long long x = 0;
            for (; *k < cps_.size() && is_digit(cps_[*k]); ++*k) x = std::min(x * 10 + (cps_[*k] - '0'), 1LL << 40);
            *v = x > kMaxRepeat ? kMaxRepeat + 1 : int(x);  // above the cap: refused by the caller
            return *k > begin;
        };
        size_t k = i + 1;
        bool has_min = number(&k, min);
        if (!has_min) *min = 0;
        if (at(k, '}')) {
            if (!has_min) return false;  // "{}" is a literal
            *max = *min;
        } else if (at(k, ',')) {
            ++k;
            if (!number(&k, max)) *max = kUnbounded;
            if (!at(k, '}')) return false;
        } else {
            return false;
        }
        *end = k + 1;
        return true;
    }

    bool parse_quantifier(int* min, int* max) {
        if (i_ >= cps_.size()) return false;
        uint32_t c = cps_[i_];
        size_t end = 0;
        if (c == '*' || c == '+' || c == '?') {
            *min = c == '+' ? 1 : 0;
            *max = c == '?' ? 1 : kUnbounded;
            ++i_;
            return true;
        }
        if (!braces(i_, min, max, &end)) return false;
        i_ = end;
        return true;
    }

    // Checks the bounds of the quantifier read at `where`, then consumes a lazy '?' (ignored) or
    // refuses a possessive '+'.
    core::Status take_quantifier(int min, int max, size_t where) {
        if (min > kMaxRepeat || max > kMaxRepeat)
            return unsupported("repetition bound above " + std::to_string(kMaxRepeat), where);
        if (max != kUnbounded && min > max) return invalid("{n,m} with n > m", where);
        if (at(i_, '?'))
            ++i_;
        else if (at(i_, '+'))
            return unsupported("possessive quantifier", i_);
        return core::Status::ok();
    }

    core::Status parse_atom(int depth, Node* out, bool* anchor) {
        size_t start = i_;
        uint32_t c = cps_[i_++];
        int min = 0, max = 0;
        size_t end = 0;
        switch (c) {
            case '(': return parse_group(depth, start, out);
            case '[': return parse_class(start, out);
            case '.': *out = make_set(complement({{'\n', '\n'}})); return core::Status::ok();
            case '^':
                if (start != 0) return unsupported("anchor '^' (only a leading ^ is accepted)", start);
                *anchor = true;
                return core::Status::ok();
            case '$':
                if (start + 1 != cps_.size()) return unsupported("anchor '$' (only a trailing $ is accepted)", start);
                *anchor = true;
                return core::Status::ok();
            case '*':
            case '+':
            case '?': return invalid("nothing to repeat", start);
            case '{':
                if (braces(start, &min, &max, &end)) return invalid("nothing to repeat", start);
                break;
            case '\\': {
                CharSet set;
                bool is_class = false;
                KILN_RETURN_IF_ERROR(parse_escape(false, start, &set, &is_class));
                *out = make_set(std::move(set));
                return core::Status::ok();
            }
            default: break;
        }
        *out = make_set({{c, c}});
        return core::Status::ok();
    }

    core::Status parse_group(int depth, size_t start, Node* out) {
        if (depth >= kMaxDepth) return unsupported("groups nested deeper than " + std::to_string(kMaxDepth), start);
        if (at(i_, '?')) {
            size_t q = i_ + 1;
            uint32_t c = q < cps_.size() ? cps_[q] : 0;
            uint32_t d = q + 1 < cps_.size() ? cps_[q + 1] : 0;
            if (c == ':') {
                i_ = q + 1;
            } else if ((c == 'P' && d == '<') || (c == '<' && d != '=' && d != '!')) {
                size_t k = c == 'P' ? q + 2 : q + 1;
                size_t name = k;
                for (; k < cps_.size() && cps_[k] != '>'; ++k) {
                    uint32_t n = cps_[k];
                    bool ok = n == '_' || ((n | 0x20) >= 'a' && (n | 0x20) <= 'z') || (k > name && is_digit(n));
                    if (!ok) return invalid("bad group name", name);
                }
                if (k == name || k >= cps_.size()) return invalid("bad group name", name);
                i_ = k + 1;
            } else if (c == 'P' && d == '=') {
                return unsupported("backreference '(?P='", start);
            } else if (c == '=' || c == '!') {
                return unsupported(std::string("lookahead '(?") + char(c) + "'", start);
            } else if (c == '<') {
                return unsupported(std::string("lookbehind '(?<") + char(d) + "'", start);
            } else if (c == '#') {
                return unsupported("comment group '(?#'", start);
            } else if (c == '(') {
                return unsupported("conditional group '(?('", start);
            } else if (c == '>') {
                return unsupported("atomic group '(?>'", start);
            } else if (c == '-' || (c < 0x80 && std::string_view("aiLmsux").find(char(c)) != std::string_view::npos)) {
                return unsupported("inline flags '(?" + std::string(1, char(c)) + "'", start);
            } else {
                return invalid("unknown group extension '(?'", start);
            }
        }
        KILN_RETURN_IF_ERROR(parse_alt(depth + 1, out));
        if (!at(i_, ')')) return invalid("missing ')' for the group opened", start);
        ++i_;
        return core::Status::ok();
    }

    core::Status parse_class(size_t start, Node* out) {
        bool negate = at(i_, '^');
        if (negate) ++i_;
        CharSet set;
        for (bool first = true;; first = false) {
            if (i_ >= cps_.size()) return invalid("unterminated character class", start);
            if (cps_[i_] == ']' && !first) break;
            size_t item = i_;
            CharSet lo;
            bool lo_class = false;
            KILN_RETURN_IF_ERROR(class_item(&lo, &lo_class));
            if (at(i_, '-') && i_ + 1 < cps_.size() && cps_[i_ + 1] != ']') {
                ++i_;
                CharSet hi;
                bool hi_class = false;
                KILN_RETURN_IF_ERROR(class_item(&hi, &hi_class));
                if (lo_class || hi_class || lo[0].lo > hi[0].lo) return invalid("bad character range", item);
                set.push_back({lo[0].lo, hi[0].lo});
            } else {
                set.insert(set.end(), lo.begin(), lo.end());
            }
        }
        ++i_;  // the closing ']'
        set = normalize(std::move(set));
        *out = make_set(negate ? complement(set) : set);
        return core::Status::ok();
    }

    core::Status class_item(CharSet* set, bool* is_class) {
        size_t start = i_;
        uint32_t c = cps_[i_++];
        if (c == '\\') return parse_escape(true, start, set, is_class);
        *set = {{c, c}};
        *is_class = false;
        return core::Status::ok();
    }

    // The escape whose backslash is at `start` (i_ is just past it): one code point or a class.
    core::Status parse_escape(bool in_class, size_t start, CharSet* set, bool* is_class) {
        if (i_ >= cps_.size()) return invalid("trailing backslash", start);
        uint32_t c = cps_[i_++];
        *is_class = false;
        auto one = [&](uint32_t cp) {
            *set = {{cp, cp}};
            return core::Status::ok();
        };
        auto hex = [&](size_t n, uint32_t* cp) {
            *cp = 0;
            for (size_t k = 0; k < n; ++k, ++i_) {
                if (i_ >= cps_.size() || !is_hex(cps_[i_])) return false;
                *cp = *cp * 16 + hex_value(cps_[i_]);
            }
            return *cp <= kMaxCodePoint;
        };
        std::string name = "'\\" + std::string(1, c < 0x80 ? char(c) : '?') + "'";
        uint32_t cp = 0;
        switch (c) {
            case 'n': return one('\n');
            case 't': return one('\t');
            case 'r': return one('\r');
            case 'f': return one('\f');
            case 'v': return one('\v');
            case 'a': return one('\a');
            case '0':
                if (i_ < cps_.size() && is_digit(cps_[i_])) return unsupported("octal escape", start);
                return one(0);
            case 'x':
                if (!hex(2, &cp)) return invalid("incomplete escape '\\x'", start);
                return one(cp);
            case 'U':
                if (!hex(8, &cp)) return invalid("bad escape '\\U'", start);
                return one(cp);
            case 'u':
                if (at(i_, '{')) {  // ECMAScript's \u{H...}
                    size_t k = ++i_;
                    for (; i_ < cps_.size() && is_hex(cps_[i_]) && i_ - k < 6; ++i_) cp = cp * 16 + hex_value(cps_[i_]);
                    if (i_ == k || !at(i_, '}') || cp > kMaxCodePoint) return invalid("bad escape '\\u{'", start);
                    ++i_;
                    return one(cp);
                }
                if (!hex(4, &cp)) return invalid("incomplete escape '\\u'", start);
                return one(cp);
            case 'd':
            case 'D':
            case 'w':
            case 'W':
            case 's':
            case 'S':
                *set = class_escape_set(c);
                *is_class = true;
                return core::Status::ok();
            case 'b':
                if (in_class) return one('\b');
                return unsupported("word boundary '\\b'", start);
            case 'B': return unsupported("word boundary '\\B'", start);
            case 'A':
            case 'Z':
            case 'z':
            case 'G': return unsupported("anchor " + name, start);
            case 'k': return unsupported("backreference '\\k'", start);
            case 'p':
            case 'P': return unsupported("Unicode property escape " + name, start);
            case 'c': return unsupported("control escape '\\c'", start);
            default: break;
        }
        if (is_digit(c)) return unsupported(in_class ? "octal escape" : "backreference " + name, start);
        if (c < 0x80 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return invalid("bad escape " + name, start);
        return one(c);  // an escaped metacharacter, punctuation or any non-ASCII character
    }
};

}  // namespace

core::Result<std::string> regex_to_gbnf(std::string_view pattern) {
    Parser parser(pattern);
    KILN_ASSIGN_OR_RETURN(Node root, parser.parse());
    if (root.kind == Node::Kind::kNothing)
        return core::error(StatusCode::kUnsupported) << "regex: the pattern matches nothing (an empty character class)";
    return print_expression(root);
}

}  // namespace kiln::grammar
