// Jinja value helpers: Python's truthiness, str/repr, json.dumps, equality and ordering, code points.
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/unicode.h"

namespace kiln::tokenizer::jinja::detail {

bool truthy(const Value& v) {
    switch (v.type) {
        case Type::kUndefined: case Type::kNone: return false;
        case Type::kBool: return v.b;
        case Type::kInt: return v.i != 0;
        case Type::kFloat: return v.f != 0.0;
        case Type::kString: return !v.s.empty();
        case Type::kList: return v.lazy || !v.list->empty();
        case Type::kDict: return !v.dict->empty();
        case Type::kNamespace: case Type::kCallable: return true;
    }
    return false;
}

std::string py_float(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf) - 1, f, std::chars_format::scientific);  // shortest, as repr()
    *res.ptr = '\0';
    std::string e = buf;  // [-]d[.ddd]e±XX
    bool neg = e[0] == '-';
    size_t epos = e.find('e');
    std::string digits;
    for (size_t k = neg ? 1 : 0; k < epos; ++k) if (e[k] != '.') digits += e[k];
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    int decpt = std::atoi(e.c_str() + epos + 1) + 1;  // digits d1d2... = 0.d1d2... * 10^decpt
    std::string out = neg ? "-" : "";
    if (decpt > 16 || decpt < -3) {  // Python switches to exponent form outside 1e-4 <= |f| < 1e16
        out += digits[0];
        if (digits.size() > 1) out.append(".").append(digits, 1);
        char ex[16];
        std::snprintf(ex, sizeof(ex), "e%c%02d", decpt - 1 < 0 ? '-' : '+', std::abs(decpt - 1));
        return out.append(ex);
    }
    const size_t point = static_cast<size_t>(std::max(decpt, 0));
    if (decpt <= 0) return out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    if (point >= digits.size()) return out.append(digits).append(point - digits.size(), '0').append(".0");
    return out.append(digits, 0, point).append(".").append(digits, point);
}

const char* type_name(const Value& v) {
    switch (v.type) {
        case Type::kUndefined: return "Undefined";
        case Type::kNone: return "NoneType";
        case Type::kBool: return "bool";
        case Type::kInt: return "int";
        case Type::kFloat: return "float";
        case Type::kString: return "str";
        case Type::kList: return v.lazy ? "generator" : "list";
        case Type::kDict: return "dict";
        case Type::kNamespace: return "Namespace";
        case Type::kCallable: return "function";
    }
    return "object";
}

std::string to_str(const Value& v) {
    switch (v.type) {
        case Type::kUndefined: return "";
        case Type::kNone: return "None";
        case Type::kBool: return v.b ? "True" : "False";
        case Type::kInt: return std::to_string(v.i);
        case Type::kFloat: return py_float(v.f);
        case Type::kString: return v.s;
        default: return repr(v);
    }
}

namespace {

void repr_str(const std::string& s, std::string& out) {
    char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
    out += q;
    for (unsigned char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c == q) { out += '\\'; out += static_cast<char>(c); }
        else if (c < 0x20 || c == 0x7f) { char b[8]; std::snprintf(b, sizeof(b), "\\x%02x", c); out += b; }
        else out += static_cast<char>(c);
    }
    out += q;
}

void repr_into(const Value& v, std::string& out, int depth) {
    if (depth > 256) fail("value nested too deeply to print");
    switch (v.type) {
        case Type::kString: repr_str(v.s, out); return;
        case Type::kList:
            if (v.lazy) { out += "<generator object>"; return; }
            out += v.tuple ? '(' : '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += ", ";
                repr_into((*v.list)[k], out, depth + 1);
            }
            if (v.tuple && v.list->size() == 1) out += ',';
            out += v.tuple ? ')' : ']';
            return;
        case Type::kDict: case Type::kNamespace:
            out += v.type == Type::kNamespace ? "<Namespace {" : "{";
            for (size_t k = 0; k < v.dict->size(); ++k) {
                if (k) out += ", ";
                repr_into(key_value((*v.dict)[k].first), out, depth + 1);
                out += ": ";
                repr_into((*v.dict)[k].second, out, depth + 1);
            }
            out += v.type == Type::kNamespace ? "}>" : "}";
            return;
        case Type::kCallable: out += "<function " + v.fn->name + ">"; return;
        default: out += to_str(v); return;
    }
}

void json_str(const std::string& s, bool ensure_ascii, std::string& out) {
    out += '"';
    for (size_t p = 0; p < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[p]);
        if (c >= 0x80 && ensure_ascii) {
            size_t len = 1;
            int32_t cp = utf8_decode(s, p, &len);
            if (cp < 0) cp = 0xFFFD;
            char b[16];
            if (cp >= 0x10000) {
                uint32_t u = static_cast<uint32_t>(cp) - 0x10000;
                std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
            } else {
                std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned>(cp));
            }
            out += b;
            p += len;
            continue;
        }
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20 || (c == 0x7f && ensure_ascii)) {
                    char b[8];
                    std::snprintf(b, sizeof(b), "\\u%04x", c);
                    out += b;
                } else {
                    out += static_cast<char>(c);
                }
        }
        ++p;
    }
    out += '"';
}

void json_into(const Value& v, const JsonStyle& st, int level, std::string& out) {
    if (level > 256) fail("tojson: value nested too deeply");
    const std::string& item_sep = !st.item_sep.empty() ? st.item_sep : st.indent >= 0 ? "," : ", ";
    const std::string& key_sep = !st.key_sep.empty() ? st.key_sep : ": ";
    auto nl = [&](int lv) {
        if (st.indent >= 0) { out += '\n'; out.append(static_cast<size_t>(st.indent) * static_cast<size_t>(lv), ' '); }
    };
    switch (v.type) {
        case Type::kNone: out += "null"; return;
        case Type::kBool: out += v.b ? "true" : "false"; return;
        case Type::kInt: out += std::to_string(v.i); return;
        case Type::kFloat:
            if (std::isnan(v.f)) out += "NaN";
            else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
            else out += py_float(v.f);
            return;
        case Type::kString: json_str(v.s, st.ensure_ascii, out); return;
        case Type::kList: {
            if (v.lazy) fail("Object of type generator is not JSON serializable");
            if (v.list->empty()) { out += "[]"; return; }
            out += '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += item_sep;
                nl(level + 1);
                json_into((*v.list)[k], st, level + 1, out);
            }
            nl(level);
            out += ']';
            return;
        }
        case Type::kDict: {
            if (v.dict->empty()) { out += "{}"; return; }
            std::vector<const std::pair<std::string, Value>*> items;
            for (const auto& kv : *v.dict) items.push_back(&kv);
            if (st.sort_keys)
                std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
            out += '{';
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) out += item_sep;
                nl(level + 1);
                const std::string& key = items[k]->first;
                if (!key.empty() && key[0] == '\x02') {  // json.dumps writes other keys as their JSON text
                    Value kv = key_value(key);
                    std::string text;
                    if (kv.type == Type::kNone) text = "null";
                    else if (kv.type == Type::kBool) text = kv.b ? "true" : "false";
                    else text = to_str(kv);
                    json_str(text, st.ensure_ascii, out);
                } else {
                    json_str(key, st.ensure_ascii, out);
                }
                out += key_sep;
                json_into(items[k]->second, st, level + 1, out);
            }
            nl(level);
            out += '}';
            return;
        }
        case Type::kUndefined: fail("Object of type Undefined is not JSON serializable");
        case Type::kNamespace: fail("Object of type Namespace is not JSON serializable");
        case Type::kCallable: fail("Object of type function is not JSON serializable");
    }
}

}  // namespace

std::string repr(const Value& v) {
    std::string out;
    repr_into(v, out, 0);
    return out;
}

void to_json(const Value& v, const JsonStyle& style, std::string& out) { json_into(v, style, 0, out); }

Value make_tuple(List items) {
    Value v = Value::make_list(std::move(items));
    v.tuple = true;
    return v;
}

bool is_num(const Value& v) { return v.type == Type::kInt || v.type == Type::kFloat || v.type == Type::kBool; }
double num(const Value& v) {
    return v.type == Type::kFloat ? v.f : v.type == Type::kBool ? v.b : static_cast<double>(v.i);
}

const Value* dict_find(const Value& d, const std::string& key) {
    for (const auto& [k, v] : *d.dict) if (k == key) return &v;
    return nullptr;
}

bool equal(const Value& a, const Value& b) {
    if (is_num(a) && is_num(b)) {
        if (a.type != Type::kFloat && b.type != Type::kFloat)
            return (a.type == Type::kBool ? a.b : a.i) == (b.type == Type::kBool ? b.b : b.i);
        return num(a) == num(b);
    }
    if (a.type != b.type) return false;
    switch (a.type) {
        case Type::kString: return a.s == b.s;
        case Type::kList:
            if (a.lazy || b.lazy) return a.list == b.list;
            if (a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); ++k) if (!equal((*a.list)[k], (*b.list)[k])) return false;
            return true;
        case Type::kDict:  // Python dicts compare without regard to order
            if (a.dict->size() != b.dict->size()) return false;
            for (const auto& [k, v] : *a.dict) {
                const Value* o = dict_find(b, k);
                if (!o || !equal(v, *o)) return false;
            }
            return true;
        case Type::kNamespace: return a.dict == b.dict;
        case Type::kCallable: return a.fn == b.fn;
        default: return true;  // undefined == undefined, none == none
    }
}

int compare(const Value& a, const Value& b) {
    if (is_num(a) && is_num(b)) {
        if (a.type == Type::kInt && b.type == Type::kInt) return a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
        double x = num(a), y = num(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.type == Type::kString && b.type == Type::kString) {
        int c = a.s.compare(b.s);  // UTF-8 byte order is code point order
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.type == Type::kList && b.type == Type::kList && !a.lazy && !b.lazy) {
        size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k) {
            if (equal((*a.list)[k], (*b.list)[k])) continue;
            return compare((*a.list)[k], (*b.list)[k]);
        }
        return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    require_defined(a);
    require_defined(b);
    fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

void require_defined(const Value& v) {
    if (v.type == Type::kUndefined) fail(v.s.empty() ? "a value is undefined" : v.s);
}

std::vector<Value> iterate(const Value& v) {
    switch (v.type) {
        case Type::kList: return *v.list;
        case Type::kDict: {
            std::vector<Value> keys;
            for (const auto& kv : *v.dict) keys.push_back(key_value(kv.first));
            return keys;
        }
        case Type::kString: {
            std::vector<Value> chars;
            for (auto& c : code_points(v.s)) chars.push_back(Value::str(std::move(c)));
            return chars;
        }
        case Type::kUndefined: return {};
        default: fail(std::string("'") + type_name(v) + "' object is not iterable");
    }
}

std::string dict_key(const Value& k) {
    if (k.type == Type::kString) return k.s;
    if (k.type == Type::kInt || k.type == Type::kFloat || k.type == Type::kBool || k.type == Type::kNone)
        return std::string(1, '\x02').append(k.type == Type::kBool ? (k.b ? "1" : "0") : to_str(k));
    fail(std::string("unhashable type: '") + type_name(k) + "'");
}

Value key_value(const std::string& key) {
    if (key.empty() || key[0] != '\x02') return Value::str(key);
    std::string t = key.substr(1);
    if (t == "None") return Value::none();
    if (t.find_first_of(".eEin") != std::string::npos) return Value::number(std::strtod(t.c_str(), nullptr));
    return Value::integer(std::strtoll(t.c_str(), nullptr, 10));
}

bool is_ascii(const std::string& s) {
    for (unsigned char c : s) if (c >= 0x80) return false;
    return true;
}

std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    out.reserve(s.size());
    for (size_t p = 0; p < s.size();) {
        size_t len = 1;
        if (static_cast<unsigned char>(s[p]) >= 0x80) utf8_decode(s, p, &len);
        out.push_back(s.substr(p, len));
        p += len;
    }
    return out;
}

int64_t char_length(const std::string& s) {
    if (is_ascii(s)) return static_cast<int64_t>(s.size());
    int64_t n = 0;
    for (size_t p = 0; p < s.size(); ++n) {
        size_t len = 1;
        if (static_cast<unsigned char>(s[p]) >= 0x80) utf8_decode(s, p, &len);
        p += len;
    }
    return n;
}

}  // namespace kiln::tokenizer::jinja::detail
