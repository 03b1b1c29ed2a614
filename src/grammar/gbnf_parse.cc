// GBNF text -> Grammar (gbnf.h): a recursive-descent parser that lowers as it goes. Literals become
// one byte-class element per byte; code point classes become a helper rule with one alternative per
// UTF-8 byte-range sequence (shared between identical classes); groups and repetitions become helper
// rules (x* => R ::= x R | "", x{m,n} => m copies then n - m nested optionals).
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "grammar/gbnf.h"
#include "grammar/utf8_ranges.h"
#include "tokenizer/unicode.h"

namespace kiln::grammar {
namespace {

constexpr int64_t kMaxRepeat = 10000;
// Budgets that keep a hostile grammar (or a schema that expands into one) from exhausting the stack
// or memory: group nesting, and the size of the lowered grammar.
constexpr int kMaxNesting = 200;
constexpr size_t kMaxElements = 2'000'000, kMaxRules = 500'000;

using core::StatusCode;
using Seq = std::vector<Element>;

class Parser {
public:
    explicit Parser(std::string_view text) : s_(text) {}

    core::Result<Grammar> run() {
        // Pass 1: every rule name gets its id, so rules may be used before they are defined.
        for (size_t p = 0; p < s_.size();) {
            p_ = p;
            skip_space();
            if (p_ >= s_.size()) break;
            const size_t name_at = p_;
            const std::string name = read_name();
            if (name.empty()) return fail("expected a rule name");
            skip_space();
            if (s_.compare(p_, 3, "::=") != 0) return fail("expected '::=' after rule name '" + name + "'");
            if (named_.count(name)) return fail("rule '" + name + "' is defined twice");
            named_[name] = new_rule(name);
            rule_starts_.insert(name_at);
            p_ += 3;
            p = next_rule_start(p_);
        }
        if (!named_.count("root")) return core::error(StatusCode::kInvalidArgument) << "grammar has no 'root' rule";
        // Pass 2: bodies.
        p_ = 0;
        while (true) {
            skip_space();
            if (p_ >= s_.size()) break;
            const std::string name = read_name();
            skip_space();
            p_ += 3;
            const int32_t id = named_.at(name);
            std::vector<Seq> alts;
            if (!parse_alternatives(name, alts, /*nested=*/false)) return error_;
            set_rule(id, alts);
        }
        g_.root = named_.at("root");
        return std::move(g_);
    }

private:
    // Where the next `name ::=` starts after position p (or the end).
    size_t next_rule_start(size_t p) const {
        bool in_str = false, in_class = false;
        char quote = 0;
        for (; p < s_.size(); ++p) {
            const char c = s_[p];
            if (in_str || in_class) {
                if (c == '\\') ++p;
                else if (in_str && c == quote) in_str = false;
                else if (in_class && c == ']') in_class = false;
                continue;
            }
            if (c == '"' || c == '\'') in_str = true, quote = c;
            else if (c == '[') in_class = true;
            else if (c == '#') { while (p < s_.size() && s_[p] != '\n') ++p; }
            else if (is_name_char(c) && (p == 0 || !is_name_char(s_[p - 1]))) {
                size_t q = p;
                while (q < s_.size() && is_name_char(s_[q])) ++q;
                size_t r = q;
                while (r < s_.size() && (s_[r] == ' ' || s_[r] == '\t' || s_[r] == '\n' || s_[r] == '\r')) ++r;
                if (s_.compare(r, 3, "::=") == 0) return p;
                p = q - 1;
            }
        }
        return s_.size();
    }

    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    }
    void skip_space() {
        while (p_ < s_.size()) {
            const char c = s_[p_];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++p_;
            else if (c == '#') { while (p_ < s_.size() && s_[p_] != '\n') ++p_; }
            else break;
        }
    }
    std::string read_name() {
        const size_t b = p_;
        while (p_ < s_.size() && is_name_char(s_[p_])) ++p_;
        return std::string(s_.substr(b, p_ - b));
    }
    std::pair<int, int> line_col(size_t p) const {
        int line = 1, col = 1;
        for (size_t i = 0; i < p && i < s_.size(); ++i) {
            if (s_[i] == '\n') ++line, col = 1;
            else ++col;
        }
        return {line, col};
    }
    core::Status fail(const std::string& what) {
        const auto [line, col] = line_col(p_);
        error_ = core::error(StatusCode::kInvalidArgument) << "grammar line " << line << ", column " << col << ": " << what;
        return error_;
    }
    bool failed(const std::string& what) {
        (void)fail(what);
        return false;
    }
    bool at_rule_end() {
        skip_space();
        return p_ >= s_.size() || rule_starts_.count(p_) > 0;
    }

    int32_t new_rule(const std::string& name) {
        g_.rules.emplace_back();
        g_.rule_names.push_back(name);
        g_.chain_rank.push_back(0);
        g_.chain_next.push_back(-1);
        return int32_t(g_.rules.size() - 1);
    }
    bool too_big() const { return g_.elements.size() > kMaxElements || g_.rules.size() > kMaxRules; }
    void set_rule(int32_t id, const std::vector<Seq>& alts) {
        for (const Seq& seq : alts) {
            g_.rules[size_t(id)].push_back(int32_t(g_.elements.size()));
            g_.elements.insert(g_.elements.end(), seq.begin(), seq.end());
            g_.elements.push_back({Element::Kind::kEnd, 0});
        }
    }
    int32_t helper(const std::string& parent, const std::vector<Seq>& alts) {
        const int32_t id = new_rule(parent + "_" + std::to_string(++helpers_));
        set_rule(id, alts);
        return id;
    }
    Element bytes(const ByteSet& set) {
        auto [it, fresh] = set_ids_.try_emplace(set.to_string(), int32_t(g_.byte_sets.size()));
        if (fresh) g_.byte_sets.push_back(set);
        return {Element::Kind::kBytes, it->second};
    }
    Element byte(uint8_t b) {
        ByteSet s;
        s.set(b);
        return bytes(s);
    }

    // alternatives := sequence ('|' sequence)*
    bool parse_alternatives(const std::string& rule, std::vector<Seq>& alts, bool nested) {
        while (true) {
            Seq seq;
            if (!parse_sequence(rule, seq, nested)) return false;
            alts.push_back(std::move(seq));
            skip_space();
            if (p_ < s_.size() && s_[p_] == '|') {
                ++p_;
                continue;
            }
            return true;
        }
    }

    bool parse_sequence(const std::string& rule, Seq& seq, bool nested) {
        while (true) {
            skip_space();
            if (p_ >= s_.size() || s_[p_] == '|' || (nested && s_[p_] == ')')) return true;
            if (!nested && at_rule_end()) return true;
            if (s_[p_] == ')') return failed("unbalanced ')'");
            // One atom as a sequence of elements (a literal is several), then its repetition.
            Seq atom;
            const char c = s_[p_];
            if (c == '"' || c == '\'') {
                std::string lit;
                if (!parse_literal(lit)) return false;
                for (unsigned char b : lit) atom.push_back(byte(b));
            } else if (c == '[') {
                std::vector<CodeRange> ranges;
                if (!parse_class(ranges)) return false;
                atom.push_back(class_element(rule, ranges));
            } else if (c == '.') {
                ++p_;
                atom.push_back(class_element(rule, {{0, 0x10FFFF}}));
            } else if (c == '(') {
                ++p_;
                if (++depth_ > kMaxNesting) return failed("groups nested deeper than 200");
                std::vector<Seq> inner;
                const bool ok = parse_alternatives(rule, inner, true);
                --depth_;
                if (!ok) return false;
                skip_space();
                if (p_ >= s_.size() || s_[p_] != ')') return failed("expected ')'");
                ++p_;
                if (inner.size() == 1) atom = std::move(inner[0]);
                else atom.push_back({Element::Kind::kRule, helper(rule, inner)});
            } else if (is_name_char(c)) {
                const size_t at = p_;
                const std::string name = read_name();
                auto it = named_.find(name);
                if (it == named_.end()) {
                    p_ = at;
                    return failed("undefined rule '" + name + "'");
                }
                atom.push_back({Element::Kind::kRule, it->second});
            } else {
                return failed(std::string("unexpected character '") + c + "'");
            }
            int64_t lo = 1, hi = 1;
            if (!parse_repeat(lo, hi)) return false;
            append_repeat(rule, seq, atom, lo, hi);
            if (too_big() || seq.size() > kMaxElements)
                return failed("the grammar is too large (over 2,000,000 elements or 500,000 rules once repetitions are expanded)");
        }
    }

    // After an atom: * + ? {m} {m,} {m,n}. hi = -1: unbounded.
    bool parse_repeat(int64_t& lo, int64_t& hi) {
        if (p_ >= s_.size()) return true;
        const char c = s_[p_];
        if (c == '*') lo = 0, hi = -1, ++p_;
        else if (c == '+') lo = 1, hi = -1, ++p_;
        else if (c == '?') lo = 0, hi = 1, ++p_;
        else if (c == '{') {
            ++p_;
            auto number = [&](int64_t& v) {
                skip_space();
                const size_t b = p_;
                v = 0;
                while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
                    v = v * 10 + (s_[p_++] - '0');
                    if (v > kMaxRepeat) return false;
                }
                return p_ > b;
            };
            if (!number(lo)) return failed("bad repetition bound (a number up to 10000 expected)");
            skip_space();
            hi = lo;
            if (p_ < s_.size() && s_[p_] == ',') {
                ++p_;
                skip_space();
                if (p_ < s_.size() && s_[p_] == '}') hi = -1;
                else if (!number(hi)) return failed("bad repetition bound (a number up to 10000 expected)");
            }
            skip_space();
            if (p_ >= s_.size() || s_[p_] != '}') return failed("expected '}'");
            ++p_;
            if (hi >= 0 && hi < lo) return failed("repetition {m,n} with n < m");
        }
        return true;
    }

    void append_repeat(const std::string& rule, Seq& seq, const Seq& atom, int64_t lo, int64_t hi) {
        if (lo == 1 && hi == 1) {
            seq.insert(seq.end(), atom.begin(), atom.end());
            return;
        }
        // The repeated thing as one element: itself when it is one, else a helper rule.
        Element unit = atom.size() == 1 ? atom[0] : Element{Element::Kind::kRule, helper(rule, {atom})};
        for (int64_t i = 0; i < lo; ++i) seq.push_back(unit);
        if (hi < 0) {  // R ::= unit R | ""
            const int32_t r = new_rule(rule + "_" + std::to_string(++helpers_));
            set_rule(r, {{unit, {Element::Kind::kRule, r}}, {}});
            seq.push_back({Element::Kind::kRule, r});
        } else if (hi > lo) {  // R1 ::= unit | "", Rk ::= unit R(k-1) | ""
            int32_t r = helper(rule, {{unit}, {}});
            g_.chain_rank[size_t(r)] = 1;
            for (int64_t k = 2; k <= hi - lo; ++k) {
                const int32_t next = helper(rule, {{unit, {Element::Kind::kRule, r}}, {}});
                g_.chain_rank[size_t(next)] = int32_t(k);
                g_.chain_next[size_t(next)] = r;
                r = next;
            }
            seq.push_back({Element::Kind::kRule, r});
        }
    }

    // One code point class as an element: a byte class when it is all ASCII, else a (shared) helper
    // rule with one alternative per UTF-8 byte-range sequence.
    Element class_element(const std::string& rule, std::vector<CodeRange> ranges) {
        ranges = normalize_ranges(std::move(ranges));
        if (!ranges.empty() && ranges.back().hi < 0x80) {
            ByteSet s;
            for (const CodeRange& r : ranges)
                for (uint32_t c = r.lo; c <= r.hi; ++c) s.set(c);
            return bytes(s);
        }
        std::string key;
        for (const CodeRange& r : ranges) key += std::to_string(r.lo) + "-" + std::to_string(r.hi) + ",";
        auto it = class_rules_.find(key);
        if (it != class_rules_.end()) return {Element::Kind::kRule, it->second};
        std::vector<Seq> alts;
        ByteSet ascii;
        for (const ByteRangeSeq& brs : utf8_sequences(ranges)) {
            if (brs.size() == 1) {
                for (uint32_t b = brs[0].first; b <= brs[0].second; ++b) ascii.set(b);
                continue;
            }
            Seq seq;
            for (const auto& [lo, hi] : brs) {
                ByteSet s;
                for (uint32_t b = lo; b <= hi; ++b) s.set(b);
                seq.push_back(bytes(s));
            }
            alts.push_back(std::move(seq));
        }
        if (ascii.any()) alts.insert(alts.begin(), Seq{bytes(ascii)});
        const int32_t id = helper(rule, alts);
        class_rules_[key] = id;
        return {Element::Kind::kRule, id};
    }

    // Escapes shared by literals and classes; p_ at the backslash.
    bool parse_escape(uint32_t& cp) {
        ++p_;
        if (p_ >= s_.size()) return failed("unfinished escape");
        const char c = s_[p_++];
        auto hex = [&](int n) {
            cp = 0;
            for (int i = 0; i < n; ++i) {
                if (p_ >= s_.size()) return false;
                const char h = s_[p_++];
                int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (v < 0) return false;
                cp = cp * 16 + uint32_t(v);
            }
            return true;
        };
        switch (c) {
            case 'n': cp = '\n'; return true;
            case 'r': cp = '\r'; return true;
            case 't': cp = '\t'; return true;
            case 'f': cp = '\f'; return true;
            case 'v': cp = '\v'; return true;
            case '0': cp = 0; return true;
            case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
                cp = uint32_t(c);
                return true;
            case 'x': if (hex(2)) return true; break;
            case 'u': if (hex(4)) return true; break;
            case 'U': if (hex(8)) return true; break;
            default: break;
        }
        p_ -= 1;
        return failed(std::string("bad escape '\\") + c + "'");
    }

    // One code point of UTF-8 text at p_ (or an escape).
    bool next_code_point(uint32_t& cp, bool& escaped) {
        escaped = s_[p_] == '\\';
        if (escaped) {
            if (!parse_escape(cp)) return false;
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return failed("escape outside Unicode scalar values");
            return true;
        }
        size_t n = 0;
        const int32_t c = tokenizer::utf8_decode(s_, p_, &n);
        if (c < 0) return failed("invalid UTF-8");
        cp = uint32_t(c);
        p_ += n;
        return true;
    }

    bool parse_literal(std::string& out) {
        const char quote = s_[p_++];
        while (true) {
            if (p_ >= s_.size()) return failed("unterminated string literal");
            if (s_[p_] == quote) {
                ++p_;
                return true;
            }
            uint32_t cp = 0;
            bool escaped = false;
            if (!next_code_point(cp, escaped)) return false;
            tokenizer::utf8_append(out, cp);
        }
    }

    bool parse_class(std::vector<CodeRange>& ranges) {
        ++p_;
        bool negate = false;
        if (p_ < s_.size() && s_[p_] == '^') negate = true, ++p_;
        std::vector<CodeRange> got;
        while (true) {
            if (p_ >= s_.size()) return failed("unterminated character class");
            if (s_[p_] == ']') {
                ++p_;
                break;
            }
            uint32_t lo = 0, hi = 0;
            bool esc = false;
            if (!next_code_point(lo, esc)) return false;
            hi = lo;
            if (p_ + 1 < s_.size() && s_[p_] == '-' && s_[p_ + 1] != ']') {
                ++p_;
                if (!next_code_point(hi, esc)) return false;
                if (hi < lo) return failed("character range out of order");
            }
            got.push_back({lo, hi});
        }
        ranges = negate ? complement_ranges(normalize_ranges(std::move(got))) : std::move(got);
        if (normalize_ranges(ranges).empty()) return failed("character class matches nothing");
        return true;
    }

    std::string_view s_;
    size_t p_ = 0;
    Grammar g_;
    std::map<std::string, int32_t> named_;
    std::set<size_t> rule_starts_;
    std::unordered_map<std::string, int32_t> set_ids_, class_rules_;
    int helpers_ = 0;
    int depth_ = 0;
    core::Status error_;
};

}  // namespace

core::Result<Grammar> parse_gbnf(std::string_view text) {
    Parser parser(text);
    core::Result<Grammar> g = parser.run();
    if (!g.is_ok()) return g;
    KILN_RETURN_IF_ERROR(check_grammar(*g));
    return g;
}

std::string gbnf_literal(std::string_view bytes) {
    static const char* const kHex = "0123456789ABCDEF";
    std::string out = "\"";
    for (unsigned char c : bytes) {
        if (c == '"' || c == '\\') out += '\\', out += char(c);
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7F) out += "\\x", out += kHex[c >> 4], out += kHex[c & 15];
        else out += char(c);  // UTF-8 passes through (text must be valid UTF-8)
    }
    return out + "\"";
}

}  // namespace kiln::grammar
