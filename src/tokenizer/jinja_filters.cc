// Jinja filters with jinja2 3.x's semantics (HF's tojson, which is json.dumps with ensure_ascii=False).
// map/select/reject/selectattr/rejectattr/unique/items/batch give lazy lists, as jinja2 gives generators.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_value.h"
#include "tokenizer/unicode.h"

namespace kiln::tokenizer::jinja::detail {
namespace {

const Value& arg_or_fail(const Args& a, size_t k) {
    if (k >= a.pos.size()) fail("a filter is missing an argument");
    return a.pos[k];
}

Value lazy(List l) {
    Value v = Value::make_list(std::move(l));
    v.lazy = true;
    return v;
}

// jinja2's make_attrgetter: "a.b.0" walks dict keys and list indices; missing parts are undefined.
Value get_path(const Value& item, const Value& attribute) {
    if (attribute.type == Type::kInt) {
        if (item.type != Type::kList) return Value::undefined("no element " + std::to_string(attribute.i));
        int64_t n = static_cast<int64_t>(item.list->size()), i = attribute.i < 0 ? attribute.i + n : attribute.i;
        return i >= 0 && i < n ? (*item.list)[static_cast<size_t>(i)] : Value::undefined("index out of range");
    }
    std::string path = to_str(attribute);
    Value cur = item;
    size_t p = 0;
    for (;;) {
        size_t dot = path.find('.', p);
        std::string part = path.substr(p, dot == std::string::npos ? std::string::npos : dot - p);
        if (cur.type == Type::kDict || cur.type == Type::kNamespace) {
            const Value* v = dict_find(cur, part);
            cur = v ? *v : Value::undefined(std::string("'") + type_name(cur) + " object' has no attribute '" + part + "'");
        } else if (cur.type == Type::kList && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
            size_t i = std::strtoul(part.c_str(), nullptr, 10);
            cur = i < cur.list->size() ? (*cur.list)[i] : Value::undefined("index out of range");
        } else {
            require_defined(cur);
            cur = Value::undefined(std::string("'") + type_name(cur) + " object' has no attribute '" + part + "'");
        }
        if (dot == std::string::npos) return cur;
        p = dot + 1;
    }
}

Value lower_if_str(const Value& v, bool case_sensitive) {
    if (case_sensitive || v.type != Type::kString) return v;
    std::string r = v.s;
    for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return Value::str(r);
}

std::vector<std::string> split_lines(const std::string& s) {  // str.splitlines()
    std::vector<std::string> lines;
    size_t p = 0;
    while (p < s.size()) {
        size_t q = p;
        while (q < s.size() && std::string("\n\r\v\f\x1c\x1d\x1e").find(s[q]) == std::string::npos) ++q;
        lines.push_back(s.substr(p, q - p));
        if (q >= s.size()) break;
        p = q + (s[q] == '\r' && q + 1 < s.size() && s[q + 1] == '\n' ? 2 : 1);
    }
    return lines;
}

bool flag(const Args& a, const char* key, size_t index, bool dflt = false) {
    const Value* v = a.get(key, index);
    return v ? truthy(*v) : dflt;
}

// Python's round(x, digits): correctly rounded from the exact binary value, ties to even (as printf rounds).
double py_round(double x, int64_t digits) {
    if (!std::isfinite(x) || digits > 300) return x;
    if (digits < 0) {
        double m = std::pow(10.0, static_cast<double>(-digits));
        return std::nearbyint(x / m) * m;
    }
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(digits, 300)), x);
    return std::strtod(buf, nullptr);
}

// jinja2's wordcount counts \w+ runs; letters and digits of any script count, punctuation does not.
int64_t word_count(const std::string& s) {
    int64_t n = 0;
    bool in_word = false;
    for (size_t p = 0; p < s.size();) {
        size_t len = 1;
        int32_t cp = static_cast<unsigned char>(s[p]) < 0x80 ? s[p] : utf8_decode(s, p, &len);
        bool w = cp < 0x80 ? (std::isalnum(cp) || cp == '_')
                           : cp > 0 && !(cp <= 0xBF || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
                                         (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFF00 && cp <= 0xFF0F));
        if (w && !in_word) ++n;
        in_word = w;
        p += len;
    }
    return n;
}

// pprint.pformat for short values: repr with dict keys sorted.
Value sorted_keys(const Value& v) {
    if (v.type == Type::kDict) {
        Dict d = *v.dict;
        std::stable_sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto& kv : d) kv.second = sorted_keys(kv.second);
        return Value::make_dict(std::move(d));
    }
    if (v.type == Type::kList && !v.lazy) {
        Value r = v;
        r.list = std::make_shared<List>();
        for (const auto& x : *v.list) r.list->push_back(sorted_keys(x));
        return r;
    }
    return v;
}

Value select_like(Interp& in, const std::string& f, const Value& v, const Args& a) {
    bool attr_form = f == "selectattr" || f == "rejectattr";
    bool keep_when = f == "select" || f == "selectattr";
    size_t first = 0;
    Value attribute;
    if (attr_form) {
        if (a.pos.empty()) fail(f + " needs an attribute name");
        attribute = a.pos[0];
        first = 1;
    }
    std::string test = a.pos.size() > first ? to_str(a.pos[first]) : "";
    Args targs;
    if (a.pos.size() > first + 1) targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first + 1), a.pos.end());
    List l;
    if (!truthy(v)) return lazy(std::move(l));  // jinja2 skips falsy sequences (None included)
    for (const auto& it : iterate(v)) {
        Value x = attr_form ? get_path(it, attribute) : it;
        bool ok = test.empty() ? truthy(x) : apply_test(in, test, x, targs);
        if (ok == keep_when) l.push_back(it);
    }
    return lazy(std::move(l));
}

Value do_map(Interp& in, const Value& v, const Args& a) {
    List l;
    if (!truthy(v)) return lazy(std::move(l));  // jinja2 skips falsy sequences (None included)
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, x] : a.kw) {
        if (k == "attribute") attribute = &x;
        else if (k == "default") dflt = &x;
    }
    if (attribute) {
        for (const auto& it : iterate(v)) {
            Value x = get_path(it, *attribute);
            l.push_back(x.type == Type::kUndefined && dflt ? *dflt : x);
        }
        return lazy(std::move(l));
    }
    if (a.pos.empty()) fail("map requires a filter argument");
    std::string fname = to_str(a.pos[0]);
    Args fargs;
    fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
    fargs.kw = a.kw;
    for (const auto& it : iterate(v)) l.push_back(apply_filter(in, fname, it, fargs));
    return lazy(std::move(l));
}

std::vector<Value> sorted(const Value& v, bool reverse, bool case_sensitive, const Value* attribute) {
    std::vector<Value> items = iterate(v);
    auto key = [&](const Value& x) { return lower_if_str(attribute ? get_path(x, *attribute) : x, case_sensitive); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        int c = compare(key(x), key(y));
        return reverse ? c > 0 : c < 0;
    });
    return items;
}

}  // namespace

Value apply_filter(Interp& in, const std::string& f, const Value& v, const Args& a) {
    auto too_big = [&](size_t n) { if (n > in.limits().max_output_bytes) fail("string exceeds the size limit"); };
    if (f == "tojson") {
        JsonStyle st;
        const Value* ind = a.get("indent", 1);
        if (ind && ind->type == Type::kInt) st.indent = static_cast<int>(std::clamp<int64_t>(ind->i, 0, 64));
        else if (ind && ind->type == Type::kString) fail("tojson: string indents are not supported");
        if (const Value* sep = a.get("separators", 2); sep && sep->type == Type::kList && sep->list->size() == 2) {
            st.item_sep = to_str((*sep->list)[0]);
            st.key_sep = to_str((*sep->list)[1]);
        }
        st.sort_keys = flag(a, "sort_keys", 3);
        st.ensure_ascii = flag(a, "ensure_ascii", 0);
        std::string out;
        to_json(v, st, out);
        too_big(out.size());
        return Value::str(out);
    }
    if (f == "safe" || f == "pprint" || f == "escape" || f == "e" || f == "forceescape") {
        if (f == "pprint") return Value::str(repr(sorted_keys(v)));
        Value r = Value::str(f == "safe" || (v.markup && f != "forceescape") ? to_str(v) : html_escape(to_str(v)));
        r.markup = true;
        return r;
    }
    if (f == "string") return Value::str(to_str(v));
    if (f == "trim") return call_method(in, Value::str(to_str(v)), "strip", a);
    if (f == "upper" || f == "lower") return Value::str(case_map(to_str(v), f == "upper"));
    if (f == "capitalize") return call_method(in, Value::str(to_str(v)), f, {});
    if (f == "title") {  // jinja2's do_title: words split at whitespace and - ( { [ <
        std::string s = to_str(v), r;
        bool start = true;
        for (char c : s) {
            unsigned char u = static_cast<unsigned char>(c);
            r += static_cast<char>(start ? std::toupper(u) : std::tolower(u));
            start = is_ws(c) || std::string("-({[<").find(c) != std::string::npos;
        }
        return Value::str(r);
    }
    if (f == "replace") {
        Args ra;
        ra.pos = {Value::str(to_str(arg_or_fail(a, 0))), Value::str(to_str(arg_or_fail(a, 1)))};
        if (const Value* c = a.get("count", 2)) ra.pos.push_back(*c);
        return call_method(in, Value::str(to_str(v)), "replace", ra);
    }
    if (f == "length" || f == "count") {
        switch (v.type) {
            case Type::kString: return Value::integer(char_length(v.s));
            case Type::kList:
                if (v.lazy) fail("object of type 'generator' has no len()");
                return Value::integer(static_cast<int64_t>(v.list->size()));
            case Type::kDict: return Value::integer(static_cast<int64_t>(v.dict->size()));
            case Type::kUndefined: return Value::integer(0);
            default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
        }
    }
    if (f == "wordcount") return Value::integer(word_count(to_str(v)));
    if (f == "default" || f == "d") {
        const Value* dflt = a.get("default_value", 0);
        bool use = v.type == Type::kUndefined || (flag(a, "boolean", 1) && !truthy(v));
        return use ? (dflt ? *dflt : Value::str("")) : v;
    }
    if (f == "list") return Value::make_list(iterate(v));
    if (f == "first") {
        std::vector<Value> items = iterate(v);
        return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    }
    if (f == "last") {
        if (v.type == Type::kList && v.lazy) fail("'generator' object is not reversible");
        std::vector<Value> items = iterate(v);
        return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    }
    if (f == "reverse") {
        if (v.type == Type::kString) {
            std::vector<std::string> cps = code_points(v.s);
            std::string r;
            for (auto it = cps.rbegin(); it != cps.rend(); ++it) r += *it;
            return Value::str(r);
        }
        std::vector<Value> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
    }
    if (f == "join") {
        const Value* sep = a.get("d", 0);
        const Value* attribute = a.get("attribute", 1);
        std::string s, sep_s = sep ? to_str(*sep) : "";
        std::vector<Value> items = iterate(v);
        for (size_t k = 0; k < items.size(); ++k) {
            if (k) s += sep_s;
            s += to_str(attribute ? get_path(items[k], *attribute) : items[k]);
            too_big(s.size());
        }
        return Value::str(s);
    }
    if (f == "items") {
        if (v.type == Type::kUndefined) return lazy({});
        if (v.type != Type::kDict) fail("items filter: can only get item pairs from a mapping");
        Value l = call_method(in, v, "items", {});
        l.lazy = true;
        return l;
    }
    if (f == "dictsort") {
        if (v.type != Type::kDict) fail("dictsort: a mapping is required");
        bool cs = flag(a, "case_sensitive", 0);
        const Value* by = a.get("by", 1);
        bool by_value = by && to_str(*by) == "value";
        bool rev = flag(a, "reverse", 2);
        std::vector<Value> pairs = *call_method(in, v, "items", {}).list;
        std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
            int c = compare(lower_if_str((*x.list)[by_value], cs), lower_if_str((*y.list)[by_value], cs));
            return rev ? c > 0 : c < 0;
        });
        return Value::make_list(std::move(pairs));
    }
    if (f == "sort") {
        return Value::make_list(sorted(v, flag(a, "reverse", 0), flag(a, "case_sensitive", 1), a.get("attribute", 2)));
    }
    if (f == "unique") {
        bool cs = flag(a, "case_sensitive", 0);
        const Value* attribute = a.get("attribute", 1);
        List l, seen;
        for (const auto& it : iterate(v)) {
            Value key = lower_if_str(attribute ? get_path(it, *attribute) : it, cs);
            if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
            seen.push_back(key);
            l.push_back(it);
        }
        return lazy(std::move(l));
    }
    if (f == "min" || f == "max") {
        bool cs = flag(a, "case_sensitive", 0);
        const Value* attribute = a.get("attribute", 1);
        std::vector<Value> items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        size_t best = 0;
        for (size_t k = 1; k < items.size(); ++k) {
            auto key = [&](size_t i) { return lower_if_str(attribute ? get_path(items[i], *attribute) : items[i], cs); };
            int c = compare(key(k), key(best));
            if (f == "min" ? c < 0 : c > 0) best = k;
        }
        return items[best];
    }
    if (f == "sum") {
        const Value* attribute = a.get("attribute", 0);
        const Value* start = a.get("start", 1);
        Value total = start ? *start : Value::integer(0);
        for (const auto& it : iterate(v)) total = binary_op(in, "+", total, attribute ? get_path(it, *attribute) : it);
        return total;
    }
    if (f == "map") return do_map(in, v, a);
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") return select_like(in, f, v, a);
    if (f == "batch") {
        const Value* n = a.get("linecount", 0);
        if (!n || n->type != Type::kInt || n->i <= 0) fail("batch needs a positive count");
        const Value* fill = a.get("fill_with", 1);
        List out, cur;
        for (const auto& it : iterate(v)) {
            cur.push_back(it);
            if (static_cast<int64_t>(cur.size()) == n->i) { out.push_back(Value::make_list(std::move(cur))); cur.clear(); }
        }
        if (!cur.empty()) {
            if (fill) while (static_cast<int64_t>(cur.size()) < n->i) cur.push_back(*fill);
            out.push_back(Value::make_list(std::move(cur)));
        }
        return lazy(std::move(out));
    }
    if (f == "int") {
        const Value* dflt = a.get("default", 0);
        Value d = dflt ? *dflt : Value::integer(0);
        if (v.type == Type::kInt) return v;
        if (v.type == Type::kBool) return Value::integer(v.b);
        if (v.type == Type::kFloat) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : d;
        if (v.type == Type::kString) {
            std::string s = call_method(in, v, "strip", {}).s;
            char* end = nullptr;
            errno = 0;
            long long x = std::strtoll(s.c_str(), &end, 10);
            if (!s.empty() && *end == '\0' && !errno) return Value::integer(x);
            double fl = std::strtod(s.c_str(), &end);
            if (!s.empty() && *end == '\0' && std::isfinite(fl)) return Value::integer(static_cast<int64_t>(fl));
        }
        return d;
    }
    if (f == "float") {
        const Value* dflt = a.get("default", 0);
        if (is_num(v)) return Value::number(num(v));
        if (v.type == Type::kString) {
            char* end = nullptr;
            std::string s = call_method(in, v, "strip", {}).s;
            double x = std::strtod(s.c_str(), &end);
            if (!s.empty() && *end == '\0') return Value::number(x);
        }
        return dflt ? *dflt : Value::number(0.0);
    }
    if (f == "abs") {
        if (v.type == Type::kInt) return Value::integer(v.i < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(v.i)) : v.i);
        if (v.type == Type::kBool) return Value::integer(v.b);
        if (v.type == Type::kFloat) return Value::number(std::fabs(v.f));
        require_defined(v);
        fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
    }
    if (f == "round") {
        const Value* prec = a.get("precision", 0);
        const Value* method = a.get("method", 1);
        int64_t digits = prec && prec->type == Type::kInt ? prec->i : 0;
        std::string m = method ? to_str(*method) : "common";
        if (!is_num(v)) fail("round: a number is required");
        double x = num(v), scale = std::pow(10.0, static_cast<double>(digits));
        if (m == "common") return Value::number(py_round(x, digits));
        if (m == "ceil") return Value::number(std::ceil(x * scale) / scale);
        if (m == "floor") return Value::number(std::floor(x * scale) / scale);
        fail("method must be common, ceil or floor");
    }
    if (f == "center") {
        const Value* w = a.get("width", 0);
        Args ca;
        ca.pos.push_back(w ? *w : Value::integer(80));
        return call_method(in, Value::str(to_str(v)), "center", ca);
    }
    if (f == "indent") {
        const Value* w = a.get("width", 0);
        std::string ind = !w ? "    " : w->type == Type::kString ? w->s : std::string(static_cast<size_t>(std::clamp<int64_t>(w->i, 0, 1000)), ' ');
        bool first = flag(a, "first", 1), blank = flag(a, "blank", 2);
        std::string s = to_str(v) + "\n";
        std::vector<std::string> lines = split_lines(s);
        std::string rv;
        if (blank) {
            for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
        } else if (!lines.empty()) {
            rv = lines[0];
            for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
        }
        too_big(rv.size());
        return Value::str(first ? ind + rv : rv);
    }
    if (f == "truncate") {
        const Value* len = a.get("length", 0);
        int64_t length = len && len->type == Type::kInt ? len->i : 255;
        bool killwords = flag(a, "killwords", 1);
        const Value* endv = a.get("end", 2);
        std::string end = endv ? to_str(*endv) : "...";
        const Value* lw = a.get("leeway", 3);
        int64_t leeway = lw && lw->type == Type::kInt ? lw->i : 5;
        std::vector<std::string> cps = code_points(to_str(v));
        int64_t n = static_cast<int64_t>(cps.size());
        if (n <= length + leeway) return Value::str(to_str(v));
        int64_t keep = std::max<int64_t>(length - char_length(end), 0);
        std::string head;
        for (int64_t k = 0; k < keep; ++k) head += cps[static_cast<size_t>(k)];
        if (killwords) return Value::str(head + end);
        size_t sp = head.rfind(' ');
        return Value::str((sp == std::string::npos ? head : head.substr(0, sp)) + end);
    }
    if (f == "format") {
        std::string fmt = to_str(v);
        Value args = a.pos.size() == 1 ? a.pos[0] : Value::make_list(a.pos);
        if (a.pos.size() == 1 && a.pos[0].type == Type::kList) args = Value::make_list({a.pos[0]});
        return binary_op(in, "%", Value::str(fmt), args);
    }
    if (f == "attr") {  // getattr only: a dict's keys are not attributes
        const std::string name = to_str(arg_or_fail(a, 0));
        if (has_method(v, name)) return bound_method(v, name);
        if (v.type == Type::kNamespace)
            if (const Value* x = dict_find(v, name)) return *x;
        return Value::undefined(std::string("'") + type_name(v) + " object' has no attribute '" + name + "'");
    }
    fail("no filter named '" + f + "'");
}

}  // namespace kiln::tokenizer::jinja::detail
