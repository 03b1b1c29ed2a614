// Jinja built-ins other than filters: operators, `in`, slicing, tests, str/dict/list methods and the global
// functions, with Python's and jinja2's semantics (and their error messages where templates rely on failing).
#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "tokenizer/jinja_value.h"
#include "tokenizer/unicode.h"

namespace kiln::tokenizer::jinja::detail {

Value make_builtin(std::string name, std::function<Value(Interp&, const Args&)> fn) {
    Value v;
    v.type = Type::kCallable;
    v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

namespace {

const Value& arg(const Args& a, size_t k, const char* fn) {
    if (k >= a.pos.size()) fail(std::string(fn) + "() is missing an argument");
    return a.pos[k];
}
const std::string& str_arg(const Args& a, size_t k, const char* fn) {
    const Value& v = arg(a, k, fn);
    if (v.type != Type::kString) fail(std::string(fn) + "() expects a string argument, got " + type_name(v));
    return v.s;
}

void check_size(Interp& in, size_t n) {
    if (n > in.limits().max_output_bytes) fail("string exceeds the size limit");
}

// Python's printf-style `fmt % args` for %s %r %d %i %f %e %g %x %c and %%, with flags, width and precision.
std::string percent_format(Interp& in, const std::string& fmt, const Value& args) {
    std::vector<Value> items = args.type == Type::kList && !args.lazy ? *args.list : std::vector<Value>{args};
    size_t next = 0;
    std::string out;
    for (size_t p = 0; p < fmt.size(); ++p) {
        if (fmt[p] != '%') { out += fmt[p]; continue; }
        size_t q = p + 1;
        while (q < fmt.size() && std::string("-+ #0").find(fmt[q]) != std::string::npos) ++q;
        while (q < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[q])) || fmt[q] == '.')) ++q;
        if (q >= fmt.size()) fail("incomplete format");
        char conv = fmt[q];
        std::string spec = fmt.substr(p, q - p);
        if (spec.size() > 8) fail("format width or precision too large");
        p = q;
        if (conv == '%') { out += '%'; continue; }
        if (next >= items.size()) fail("not enough arguments for format string");
        const Value& v = items[next++];
        char buf[512];
        if (conv == 's' || conv == 'r') {
            std::string s = conv == 's' ? to_str(v) : repr(v);
            if (spec.size() > 1) {
                std::string f = spec + "s";
                int n = std::snprintf(nullptr, 0, f.c_str(), s.c_str());
                std::string r(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
                std::snprintf(r.data(), r.size(), f.c_str(), s.c_str());
                r.resize(static_cast<size_t>(std::max(n, 0)));
                out += r;
            } else {
                out += s;
            }
        } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o' || conv == 'c') {
            if (!is_num(v)) fail(std::string("%") + conv + " format: a number is required, not " + type_name(v));
            long long x = v.type == Type::kFloat ? static_cast<long long>(v.f) : v.type == Type::kBool ? v.b : v.i;
            std::snprintf(buf, sizeof(buf), (spec + (conv == 'i' ? std::string("lld") : conv == 'c' ? "c" : std::string("ll") + conv)).c_str(), x);
            out += buf;
        } else if (std::string("feEgG").find(conv) != std::string::npos) {
            if (!is_num(v)) fail(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
            std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), num(v));
            out += buf;
        } else {
            fail(std::string("unsupported format character '") + conv + "'");
        }
        check_size(in, out.size());
    }
    if (next < items.size() && args.type == Type::kList) fail("not all arguments converted during string formatting");
    return out;
}

// Python's str.format for {}, {0}, {name} and {{ }} (no format specs or conversions).
std::string brace_format(const std::string& fmt, const Args& a) {
    std::string out;
    size_t auto_idx = 0;
    for (size_t p = 0; p < fmt.size(); ++p) {
        char c = fmt[p];
        if (c == '}' && p + 1 < fmt.size() && fmt[p + 1] == '}') { out += '}'; ++p; continue; }
        if (c != '{') { out += c; continue; }
        if (p + 1 < fmt.size() && fmt[p + 1] == '{') { out += '{'; ++p; continue; }
        size_t close = fmt.find('}', p);
        if (close == std::string::npos) fail("Single '{' encountered in format string");
        std::string field = fmt.substr(p + 1, close - p - 1);
        if (field.find_first_of(":!") != std::string::npos) fail("format specs in str.format are not supported");
        const Value* v = nullptr;
        if (field.empty()) v = auto_idx < a.pos.size() ? &a.pos[auto_idx++] : nullptr;
        else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
            size_t k = std::strtoul(field.c_str(), nullptr, 10);
            v = k < a.pos.size() ? &a.pos[k] : nullptr;
        } else {
            for (const auto& [kn, kv] : a.kw) if (kn == field) v = &kv;
        }
        if (!v) fail("str.format: no argument for {" + field + "}");
        out += to_str(*v);
        p = close;
    }
    return out;
}

}  // namespace

std::string html_escape(const std::string& s) {  // markupsafe.escape
    std::string r;
    for (char c : s) {
        switch (c) {
            case '&': r += "&amp;"; break;
            case '<': r += "&lt;"; break;
            case '>': r += "&gt;"; break;
            case '"': r += "&#34;"; break;
            case '\'': r += "&#39;"; break;
            default: r += c;
        }
    }
    return r;
}

namespace {

std::string strip_set(const std::string& s, const Value* chars, bool left, bool right) {
    static const std::string kWs = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
    const std::string& set = chars && chars->type == Type::kString ? chars->s : kWs;
    // Multi-byte characters in `chars`: strip whole code points.
    std::vector<std::string> cps = code_points(s), strip = code_points(set);
    auto in = [&](const std::string& c) { return std::find(strip.begin(), strip.end(), c) != strip.end(); };
    size_t b = 0, e = cps.size();
    if (left) while (b < e && in(cps[b])) ++b;
    if (right) while (e > b && in(cps[e - 1])) --e;
    std::string out;
    for (size_t k = b; k < e; ++k) out += cps[k];
    return out;
}

std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit) {
    std::vector<std::string> parts;
    size_t p = 0;
    while (p < s.size()) {
        while (p < s.size() && is_ws(s[p])) ++p;
        if (p >= s.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
            size_t e = s.size();
            parts.push_back(s.substr(p, e - p));
            break;
        }
        size_t q = p;
        while (q < s.size() && !is_ws(s[q])) ++q;
        parts.push_back(s.substr(p, q - p));
        p = q;
    }
    return parts;
}

Value str_list(const std::vector<std::string>& parts) {
    List l;
    for (const auto& p : parts) l.push_back(Value::str(p));
    return Value::make_list(std::move(l));
}

Value as_tuple(Value v) {
    v.tuple = true;
    return v;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
    auto one = [&](const std::string& x) {
        if (x.size() > s.size()) return false;
        return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (what.type == Type::kString) return one(what.s);
    if (what.type == Type::kList) {
        for (const auto& w : *what.list) if (w.type == Type::kString && one(w.s)) return true;
        return false;
    }
    fail(std::string(start ? "startswith" : "endswith") + " first arg must be str or a tuple of str");
}

}  // namespace

// Simple case mapping of one code point: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what chat
// templates meet); other code points are left alone.
uint32_t map_case(uint32_t c, bool upper) {
    if (c < 0x80) return static_cast<uint32_t>(upper ? std::toupper(static_cast<int>(c)) : std::tolower(static_cast<int>(c)));
    if (upper) {
        if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F)) return c - 0x20;
        if (c == 0xFF) return 0x178;
        if (c >= 0x450 && c <= 0x45F) return c - 0x50;
        if (c == 0x3C2) return 0x3A3;
        if (((c >= 0x101 && c <= 0x137) || (c >= 0x14B && c <= 0x177)) && (c & 1)) return c - 1;
        if (((c >= 0x13A && c <= 0x148) || (c >= 0x17A && c <= 0x17E)) && !(c & 1)) return c - 1;
        return c;
    }
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    if (((c >= 0x100 && c <= 0x136) || (c >= 0x14A && c <= 0x176)) && !(c & 1)) return c + 1;
    if (((c >= 0x139 && c <= 0x147) || (c >= 0x179 && c <= 0x17D)) && (c & 1)) return c + 1;
    return c;
}

std::string case_map(const std::string& s, bool upper) {
    if (is_ascii(s)) {
        std::string r = s;
        for (char& c : r)
            c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        return r;
    }
    std::string r;
    for (size_t p = 0; p < s.size();) {
        size_t len = 1;
        int32_t cp = utf8_decode(s, p, &len);
        if (cp < 0) { r += s[p]; ++p; continue; }
        if (upper && cp == 0xDF) r += "SS";  // ß
        else utf8_append(r, map_case(static_cast<uint32_t>(cp), upper));
        p += len;
    }
    return r;
}

namespace {

const char* const kStrMethods[] = {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize",
                                   "startswith", "endswith", "replace", "split", "rsplit", "splitlines", "find",
                                   "rfind", "index", "rindex", "count", "join", "format", "isdigit", "isalpha",
                                   "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal",
                                   "removeprefix", "removesuffix", "zfill", "center", "ljust", "rjust", "swapcase",
                                   "partition", "rpartition", "casefold"};
const char* const kDictMethods[] = {"get", "items", "keys", "values", "copy", "update", "pop", "popitem",
                                    "setdefault", "clear", "fromkeys"};
const char* const kListMethods[] = {"index", "count", "copy", "append", "extend", "insert", "pop", "remove",
                                    "reverse", "sort", "clear"};

template <size_t N>
bool in_list(const char* const (&names)[N], const std::string& name) {
    for (const char* n : names) if (name == n) return true;
    return false;
}

std::string python_title(const std::string& s) {  // str.title(): a letter after a non-letter starts a word
    std::string r = s;
    bool prev_letter = false;
    for (char& c : r) {
        unsigned char u = static_cast<unsigned char>(c);
        bool letter = std::isalpha(u) != 0;
        if (letter) c = static_cast<char>(prev_letter ? std::tolower(u) : std::toupper(u));
        prev_letter = letter || u >= 0x80;
    }
    return r;
}

Value str_method(Interp& in, const std::string& s, const std::string& name, const Args& a) {
    if (name == "strip") return Value::str(strip_set(s, a.get("chars", 0), true, true));
    if (name == "lstrip") return Value::str(strip_set(s, a.get("chars", 0), true, false));
    if (name == "rstrip") return Value::str(strip_set(s, a.get("chars", 0), false, true));
    if (name == "upper" || name == "lower" || name == "casefold") return Value::str(case_map(s, name == "upper"));
    if (name == "swapcase") {
        std::string r = s;
        for (char& c : r) {
            unsigned char u = static_cast<unsigned char>(c);
            c = static_cast<char>(std::isupper(u) ? std::tolower(u) : std::toupper(u));
        }
        return Value::str(r);
    }
    if (name == "title") return Value::str(python_title(s));
    if (name == "capitalize") {
        std::string r = case_map(s, false);
        if (r.empty()) return Value::str(r);
        size_t len = utf8_len(static_cast<uint8_t>(r[0]));
        return Value::str(case_map(r.substr(0, len), true) + r.substr(len));
    }
    if (name == "startswith" || name == "endswith") return Value::boolean(starts_or_ends(s, arg(a, 0, name.c_str()), name == "startswith"));
    if (name == "removeprefix" || name == "removesuffix") {
        const std::string& x = str_arg(a, 0, name.c_str());
        bool pre = name == "removeprefix";
        if (starts_or_ends(s, Value::str(x), pre)) return Value::str(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
        return Value::str(s);
    }
    if (name == "replace") {
        const std::string& from = str_arg(a, 0, "replace");
        const std::string& to = str_arg(a, 1, "replace");
        const Value* cnt = a.get("count", 2);
        int64_t limit = cnt && cnt->type == Type::kInt ? cnt->i : -1;
        std::string r;
        if (from.empty()) {  // Python inserts `to` between every character
            std::vector<std::string> cps = code_points(s);
            int64_t n = 0;
            for (const auto& c : cps) {
                if (limit < 0 || n++ < limit) r += to;
                r += c;
                check_size(in, r.size());
            }
            if (limit < 0 || n < limit) r += to;
            return Value::str(r);
        }
        size_t p = 0, q;
        int64_t n = 0;
        while ((limit < 0 || n < limit) && (q = s.find(from, p)) != std::string::npos) {
            r.append(s, p, q - p);
            r += to;
            check_size(in, r.size());
            p = q + from.size();
            ++n;
        }
        return Value::str(r + s.substr(p));
    }
    if (name == "split" || name == "rsplit") {
        const Value* sep = a.get("sep", 0);
        const Value* ms = a.get("maxsplit", 1);
        int64_t maxsplit = ms && ms->type == Type::kInt ? ms->i : -1;
        if (!sep || sep->type == Type::kNone) {
            if (name == "rsplit" && maxsplit >= 0) fail("rsplit with maxsplit and no separator is not supported");
            return str_list(split_ws(s, maxsplit));
        }
        if (sep->type != Type::kString) fail("split() separator must be a string");
        if (sep->s.empty()) fail("empty separator");
        std::vector<std::string> parts;
        if (name == "split") {
            size_t p = 0, q;
            while ((maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) && (q = s.find(sep->s, p)) != std::string::npos) {
                parts.push_back(s.substr(p, q - p));
                p = q + sep->s.size();
            }
            parts.push_back(s.substr(p));
        } else {
            size_t end = s.size();
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
                if (end < sep->s.size()) break;
                size_t q = s.rfind(sep->s, end - sep->s.size());
                if (q == std::string::npos) break;
                parts.insert(parts.begin(), s.substr(q + sep->s.size(), end - q - sep->s.size()));
                end = q;
            }
            parts.insert(parts.begin(), s.substr(0, end));
        }
        return str_list(parts);
    }
    if (name == "splitlines") {
        const Value* keep = a.get("keepends", 0);
        bool keepends = keep && truthy(*keep);
        std::vector<std::string> parts;
        size_t p = 0;
        while (p < s.size()) {
            size_t q = p;
            while (q < s.size() && std::string("\n\r\v\f\x1c\x1d\x1e").find(s[q]) == std::string::npos) ++q;
            size_t eol = q < s.size() ? (s[q] == '\r' && q + 1 < s.size() && s[q + 1] == '\n' ? 2 : 1) : 0;
            parts.push_back(s.substr(p, q - p + (keepends ? eol : 0)));
            p = q + eol;
        }
        return str_list(parts);
    }
    if (name == "partition" || name == "rpartition") {
        const std::string& sep = str_arg(a, 0, name.c_str());
        if (sep.empty()) fail("empty separator");
        size_t q = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (q == std::string::npos)
            return as_tuple(name == "partition" ? str_list({s, "", ""}) : str_list({"", "", s}));
        return as_tuple(str_list({s.substr(0, q), sep, s.substr(q + sep.size())}));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
        const std::string& x = str_arg(a, 0, name.c_str());
        size_t q = name[0] == 'r' ? s.rfind(x) : s.find(x);
        if (q == std::string::npos) {
            if (name == "index" || name == "rindex") fail("substring not found");
            return Value::integer(-1);
        }
        return Value::integer(char_length(s.substr(0, q)));
    }
    if (name == "count") {
        const std::string& x = str_arg(a, 0, "count");
        if (x.empty()) return Value::integer(char_length(s) + 1);
        int64_t n = 0;
        for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
        return Value::integer(n);
    }
    if (name == "join") {
        std::string r;
        std::vector<Value> items = iterate(arg(a, 0, "join"));
        for (size_t k = 0; k < items.size(); ++k) {
            if (items[k].type != Type::kString)
                fail(std::string("sequence item ") + std::to_string(k) + ": expected str instance, " + type_name(items[k]) + " found");
            if (k) r += s;
            r += items[k].s;
            check_size(in, r.size());
        }
        return Value::str(r);
    }
    if (name == "format") return Value::str(brace_format(s, a));
    if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
        const Value& w = arg(a, 0, name.c_str());
        if (w.type != Type::kInt) fail(name + "() width must be an integer");
        int64_t len = char_length(s);
        if (w.i <= len) return Value::str(s);
        if (w.i > static_cast<int64_t>(in.limits().max_output_bytes)) fail("string exceeds the size limit");
        size_t pad = static_cast<size_t>(w.i - len);
        std::string fill = name == "zfill" ? "0" : a.pos.size() > 1 && a.pos[1].type == Type::kString ? a.pos[1].s : " ";
        auto rep = [&](size_t n) { std::string r; for (size_t k = 0; k < n; ++k) r += fill; return r; };
        if (name == "zfill") {
            if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value::str(s.substr(0, 1) + rep(pad) + s.substr(1));
            return Value::str(rep(pad) + s);
        }
        if (name == "ljust") return Value::str(s + rep(pad));
        if (name == "rjust") return Value::str(rep(pad) + s);
        size_t left = pad / 2 + (pad & static_cast<size_t>(w.i) & 1);  // CPython's centering
        return Value::str(rep(left) + s + rep(pad - left));
    }
    auto all_of = [&](auto pred) {
        if (s.empty()) return Value::boolean(false);
        for (unsigned char c : s) if (!pred(c)) return Value::boolean(false);
        return Value::boolean(true);
    };
    if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all_of([](unsigned char c) { return std::isdigit(c) != 0; });
    if (name == "isalpha") return all_of([](unsigned char c) { return std::isalpha(c) != 0; });
    if (name == "isalnum") return all_of([](unsigned char c) { return std::isalnum(c) != 0; });
    if (name == "isspace") return all_of([](unsigned char c) { return is_ws(static_cast<char>(c)); });
    if (name == "isupper" || name == "islower") {
        bool cased = false;
        for (unsigned char c : s) {
            if (std::isalpha(c)) {
                cased = true;
                if ((name == "isupper") != (std::isupper(c) != 0)) return Value::boolean(false);
            }
        }
        return Value::boolean(cased);
    }
    fail("'str object' has no attribute '" + name + "'");
}

}  // namespace

bool is_dict_method(const std::string& name) { return in_list(kDictMethods, name); }

bool has_method(const Value& obj, const std::string& name) {
    if (obj.type == Type::kString) return in_list(kStrMethods, name);
    if (obj.type == Type::kList && !obj.lazy) return in_list(kListMethods, name);
    if (obj.type == Type::kDict) return in_list(kDictMethods, name);
    return false;
}

Value bound_method(const Value& obj, const std::string& name) {
    return make_builtin(std::string(type_name(obj)) + "." + name,
                        [obj, name](Interp& in, const Args& a) { return call_method(in, obj, name, a); });
}

Value call_method(Interp& in, const Value& obj, const std::string& name, const Args& a) {
    if (obj.type == Type::kString) return str_method(in, obj.s, name, a);
    if (obj.type == Type::kDict) {
        if (name == "items" || name == "keys" || name == "values") {
            List l;
            for (const auto& [k, v] : *obj.dict) {
                if (name == "items") l.push_back(make_tuple({key_value(k), v}));
                else l.push_back(name == "keys" ? key_value(k) : v);
            }
            return Value::make_list(std::move(l));
        }
        if (name == "get") {
            const Value& key = arg(a, 0, "get");
            const Value* v = dict_find(obj, dict_key(key));
            return v ? *v : a.pos.size() > 1 ? a.pos[1] : Value::none();
        }
        if (name == "copy") return Value::make_dict(*obj.dict);
        if (is_dict_method(name)) fail("access to attribute '" + name + "' of 'dict' object is unsafe.");
    }
    if (obj.type == Type::kList && !obj.lazy) {
        if (name == "index") {
            const Value& x = arg(a, 0, "index");
            for (size_t k = 0; k < obj.list->size(); ++k) if (equal((*obj.list)[k], x)) return Value::integer(static_cast<int64_t>(k));
            fail(repr(x) + " is not in list");
        }
        if (name == "count") {
            int64_t n = 0;
            for (const auto& x : *obj.list) n += equal(x, arg(a, 0, "count"));
            return Value::integer(n);
        }
        if (name == "copy") return Value::make_list(*obj.list);
        if (in_list(kListMethods, name)) fail("access to attribute '" + name + "' of 'list' object is unsafe.");
    }
    if (obj.type == Type::kNamespace) {
        if (const Value* v = dict_find(obj, name)) return in.call(*v, a);
    }
    fail(std::string("'") + type_name(obj) + " object' has no attribute '" + name + "'");
}

Value binary_op(Interp& in, const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
        std::string r = to_str(a) + to_str(b);
        check_size(in, r.size());
        return Value::str(std::move(r));
    }
    require_defined(a);
    require_defined(b);
    if (op == "+") {
        if (a.type == Type::kString || b.type == Type::kString) {
            if (a.type != Type::kString) fail(std::string("unsupported operand type(s) for +: '") + type_name(a) + "' and 'str'");
            if (b.type != Type::kString) fail(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
            check_size(in, a.s.size() + b.s.size());
            if (a.markup == b.markup) {
                Value r = Value::str(a.s + b.s);
                r.markup = a.markup;
                return r;
            }
            Value r = Value::str((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s)));
            r.markup = true;
            return r;
        }
        if (a.type == Type::kList || b.type == Type::kList) {
            if (a.type != Type::kList || b.type != Type::kList || a.lazy || b.lazy)
                fail(std::string("can only concatenate list (not \"") + type_name(b) + "\") to list");
            List l = *a.list;
            l.insert(l.end(), b.list->begin(), b.list->end());
            return Value::make_list(std::move(l));
        }
    }
    if (op == "*") {
        const Value* seq = a.type == Type::kString || a.type == Type::kList ? &a : b.type == Type::kString || b.type == Type::kList ? &b : nullptr;
        const Value* cnt = seq == &a ? &b : &a;
        if (seq && (cnt->type == Type::kInt || cnt->type == Type::kBool) && !seq->lazy) {
            int64_t n = std::max<int64_t>(cnt->type == Type::kBool ? cnt->b : cnt->i, 0);
            size_t unit = seq->type == Type::kString ? seq->s.size() : seq->list->size() * 16;
            if (unit && static_cast<uint64_t>(n) > in.limits().max_output_bytes / unit) fail("sequence repetition exceeds the size limit");
            if (seq->type == Type::kString) {
                std::string r;
                for (int64_t k = 0; k < n; ++k) r += seq->s;
                return Value::str(r);
            }
            List l;
            for (int64_t k = 0; k < n; ++k) l.insert(l.end(), seq->list->begin(), seq->list->end());
            return Value::make_list(std::move(l));
        }
    }
    if (op == "%" && a.type == Type::kString) return Value::str(percent_format(in, a.s, b));
    if (!is_num(a) || !is_num(b))
        fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    bool ints = a.type != Type::kFloat && b.type != Type::kFloat;
    if (ints && op != "/") {
        int64_t x = a.type == Type::kBool ? a.b : a.i, y = b.type == Type::kBool ? b.b : b.i;
        auto wrap = [](uint64_t v) { return Value::integer(static_cast<int64_t>(v)); };
        if (op == "+") return wrap(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
        if (op == "-") return wrap(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
        if (op == "*") return wrap(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
        if (op == "**") {
            if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
            int64_t r = 1;
            for (int64_t k = 0; k < y; ++k) {
                if (__builtin_mul_overflow(r, x, &r)) fail("integer power overflows 64 bits");
                if (r == 0 || r == 1) break;
            }
            return Value::integer(r);
        }
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("integer overflow");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) { --q; r += y; }
        return Value::integer(op == "//" ? q : r);
    }
    double x = num(a), y = num(b);
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail("division by zero");
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(x - std::floor(x / y) * y);
    if (op == "**") return Value::number(std::pow(x, y));
    fail("unsupported operator " + op);
}

bool contains(const Value& c, const Value& item) {
    switch (c.type) {
        case Type::kString:
            if (item.type != Type::kString)
                fail(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
            return c.s.find(item.s) != std::string::npos;
        case Type::kList:
            for (const auto& x : *c.list) if (equal(item, x)) return true;
            return false;
        case Type::kDict: case Type::kNamespace:
            return item.type != Type::kList && item.type != Type::kDict && dict_find(c, dict_key(item)) != nullptr;
        case Type::kUndefined: return false;
        default: fail(std::string("argument of type '") + type_name(c) + "' is not iterable");
    }
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
    auto opt = [](const Value& v, bool* has) -> int64_t {
        *has = v.type != Type::kNone && v.type != Type::kUndefined;
        if (!*has) return 0;
        if (v.type != Type::kInt) fail("slice indices must be integers or None");
        return v.i;
    };
    bool hs, he, hp;
    int64_t start = opt(start_v, &hs), stop = opt(stop_v, &he), step = opt(step_v, &hp);
    if (!hp) step = 1;
    if (step == 0) fail("slice step cannot be zero");
    if (obj.type == Type::kList && obj.lazy) fail("'generator' object is not subscriptable");
    std::vector<std::string> cps;
    int64_t n;
    if (obj.type == Type::kList) {
        n = static_cast<int64_t>(obj.list->size());
    } else if (obj.type == Type::kString) {
        cps = code_points(obj.s);
        n = static_cast<int64_t>(cps.size());
    } else {
        fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
    }
    auto clamp = [&](int64_t i, bool has, int64_t dflt) {
        if (!has) return dflt;
        if (i < 0) i += n;
        if (step > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    start = clamp(start, hs, step > 0 ? 0 : n - 1);
    stop = clamp(stop, he, step > 0 ? n : -1);
    List l;
    std::string str;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (obj.type == Type::kList) l.push_back((*obj.list)[static_cast<size_t>(i)]);
        else str += cps[static_cast<size_t>(i)];
    }
    return obj.type == Type::kList ? Value::make_list(std::move(l)) : Value::str(str);
}

bool apply_test(Interp& in, const std::string& name, const Value& v, const Args& a) {
    if (name == "defined") return v.type != Type::kUndefined;
    if (name == "undefined") return v.type == Type::kUndefined;
    if (name == "none") return v.type == Type::kNone;
    if (name == "string") return v.type == Type::kString;
    if (name == "number") return is_num(v);
    if (name == "integer") return v.type == Type::kInt;
    if (name == "float") return v.type == Type::kFloat;
    if (name == "boolean") return v.type == Type::kBool;
    if (name == "true") return v.type == Type::kBool && v.b;
    if (name == "false") return v.type == Type::kBool && !v.b;
    if (name == "mapping") return v.type == Type::kDict;
    if (name == "sequence") return (v.type == Type::kList && !v.lazy) || v.type == Type::kString || v.type == Type::kDict;
    if (name == "iterable")
        return v.type == Type::kList || v.type == Type::kString || v.type == Type::kDict || v.type == Type::kUndefined;
    if (name == "callable") return v.type == Type::kCallable;
    if (name == "escaped") return false;
    if (name == "lower" || name == "upper") {
        std::string s = to_str(v);
        return str_method(in, s, name == "lower" ? "islower" : "isupper", {}).b;
    }
    if (name == "odd" || name == "even") {
        if (v.type != Type::kInt && v.type != Type::kBool) {
            require_defined(v);
            fail(std::string("unsupported operand type(s) for %: '") + type_name(v) + "' and 'int'");
        }
        int64_t x = v.type == Type::kBool ? v.b : v.i;
        return ((x % 2) != 0) == (name == "odd");
    }
    if (name == "filter" || name == "test") return v.type == Type::kString;  // approximate: names only
    const Value& o = arg(a, 0, ("test '" + name + "'").c_str());
    if (name == "divisibleby") {
        if (!is_num(v) || !is_num(o)) fail("divisibleby needs numbers");
        if (num(o) == 0) fail("integer division or modulo by zero");
        return std::fmod(num(v), num(o)) == 0;
    }
    if (name == "equalto" || name == "eq" || name == "==") return equal(v, o);
    if (name == "sameas") return equal(v, o) && v.type == o.type;
    if (name == "ne" || name == "!=") return !equal(v, o);
    if (name == "in") return contains(o, v);
    if (name == "lt" || name == "lessthan" || name == "<") return compare(v, o) < 0;
    if (name == "le" || name == "<=") return compare(v, o) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, o) > 0;
    if (name == "ge" || name == ">=") return compare(v, o) >= 0;
    fail("no test named '" + name + "'");
}

Value builtin_global(const std::string& name) {
    if (name == "raise_exception")
        return make_builtin(name, [](Interp&, const Args& a) -> Value { fail(a.pos.empty() ? std::string() : to_str(a.pos[0])); });
    if (name == "namespace" || name == "dict")
        return make_builtin(name, [name](Interp& in, const Args& a) {
            Dict d;
            for (const auto& p : a.pos) {
                if (p.type != Type::kDict && p.type != Type::kNamespace) fail(name + "() takes a mapping or keyword arguments");
                for (const auto& kv : *p.dict) d.push_back(kv);
            }
            for (const auto& [k, v] : a.kw) {
                if (name == "namespace" && !k.empty() && k[0] == '_') fail("namespace attributes cannot start with '_'");
                bool found = false;
                for (auto& kv : d) if (kv.first == k) { kv.second = v; found = true; }
                if (!found) d.emplace_back(k, v);
            }
            Value r = Value::make_dict(std::move(d));
            if (name == "namespace") {
                r.type = Type::kNamespace;
                in.track_namespace(r.dict);
            }
            return r;
        });
    if (name == "range")
        return make_builtin(name, [](Interp&, const Args& a) {
            int64_t start = 0, stop = 0, step = 1;
            for (const auto& v : a.pos) if (v.type != Type::kInt) fail("range() expects integers");
            if (a.pos.size() == 1) stop = a.pos[0].i;
            else if (a.pos.size() >= 2) { start = a.pos[0].i; stop = a.pos[1].i; if (a.pos.size() > 2) step = a.pos[2].i; }
            else fail("range expected at least 1 argument");
            if (step == 0) fail("range() arg 3 must not be zero");
            List l;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                if (l.size() >= 100000) fail("range() longer than 100000");
                l.push_back(Value::integer(i));
            }
            return Value::make_list(std::move(l));
        });
    if (name == "strftime_now")
        return make_builtin(name, [](Interp& in, const Args& a) {
            std::string fmt = str_arg(a, 0, "strftime_now");
            std::time_t t = in.limits().now >= 0 ? static_cast<std::time_t>(in.limits().now) : std::time(nullptr);
            std::tm tm{};
            if (in.limits().now >= 0) gmtime_r(&t, &tm);
            else localtime_r(&t, &tm);
            char buf[512];
            size_t n = fmt.size() < 200 ? std::strftime(buf, sizeof(buf), fmt.c_str(), &tm) : 0;
            if (n == 0 && !fmt.empty()) fail("strftime_now: format too long or empty result");
            return Value::str(std::string(buf, n));
        });
    if (name == "joiner")
        return make_builtin(name, [](Interp&, const Args& a) {
            std::string sep = a.pos.empty() ? ", " : to_str(a.pos[0]);
            auto used = std::make_shared<bool>(false);
            return make_builtin("joiner", [sep, used](Interp&, const Args&) {
                if (!*used) { *used = true; return Value::str(""); }
                return Value::str(sep);
            });
        });
    return Value::undefined();
}

}  // namespace kiln::tokenizer::jinja::detail
