// Jinja2 subset: tree-walking evaluator over the AST built by jinja_parse.cc. See jinja_engine.h
// for the supported subset. Errors are thrown internally as JinjaError and turned into a Status at
// render(); nothing else escapes.
#include "tokenizer/jinja_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "tokenizer/jinja_ast.h"

namespace kiln::tokenizer::jinja {
namespace {

using namespace detail;

// ---------------------------------------------------------------- evaluator

bool truthy(const Value& v) {
    switch (v.type) {
        case Type::kUndefined: case Type::kNone: return false;
        case Type::kBool: return v.b;
        case Type::kInt: return v.i != 0;
        case Type::kFloat: return v.f != 0.0;
        case Type::kString: return !v.s.empty();
        case Type::kList: return !v.list->empty();
        case Type::kDict: return !v.dict->empty();
        case Type::kNamespace: return true;
    }
    return false;
}

std::string fmt_float(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    char buf[64];
    for (int prec = 1; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof(buf), "%.*g", prec, f);
        if (std::strtod(buf, nullptr) == f) break;
    }
    std::string s = buf;
    if (s.find_first_of(".eni") == std::string::npos) s += ".0";
    return s;
}

std::string repr(const Value& v);
std::string to_str(const Value& v) {  // Python str()
    switch (v.type) {
        case Type::kUndefined: return "";
        case Type::kNone: return "None";
        case Type::kBool: return v.b ? "True" : "False";
        case Type::kInt: return std::to_string(v.i);
        case Type::kFloat: return fmt_float(v.f);
        case Type::kString: return v.s;
        default: return repr(v);
    }
}
std::string repr(const Value& v) {  // Python repr(), close enough for lists/dicts of plain values
    if (v.type == Type::kString) {
        std::string q = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos ? "\"" : "'";
        std::string out = q;
        for (char c : v.s) {
            if (c == '\\') out += "\\\\";
            else if (c == '\n') out += "\\n";
            else if (c == '\t') out += "\\t";
            else if (std::string(1, c) == q) out += "\\" + q;
            else out += c;
        }
        return out + q;
    }
    if (v.type == Type::kList) {
        std::string out = "[";
        for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
        return out + "]";
    }
    if (v.type == Type::kDict || v.type == Type::kNamespace) {
        std::string out = v.type == Type::kNamespace ? "<Namespace {" : "{";
        for (size_t k = 0; k < v.dict->size(); ++k)
            out += (k ? ", " : "") + repr(Value::str((*v.dict)[k].first)) + ": " + repr((*v.dict)[k].second);
        return out + (v.type == Type::kNamespace ? "}>" : "}");
    }
    return to_str(v);
}

void json_str(const std::string& s, std::string& out) {  // json.dumps(ensure_ascii=False)
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) { char b[8]; std::snprintf(b, sizeof(b), "\\u%04x", c); out += b; }
                else out += static_cast<char>(c);
        }
    }
    out += '"';
}

void to_json(const Value& v, int indent, int level, std::string& out, int depth) {
    if (depth > 256) fail("tojson: value nested too deeply");
    auto nl = [&](int lv) {
        if (indent >= 0) { out += '\n'; out.append(static_cast<size_t>(indent * lv), ' '); }
    };
    switch (v.type) {
        case Type::kUndefined: case Type::kNone: out += "null"; return;
        case Type::kBool: out += v.b ? "true" : "false"; return;
        case Type::kInt: out += std::to_string(v.i); return;
        case Type::kFloat: out += fmt_float(v.f); return;
        case Type::kString: json_str(v.s, out); return;
        case Type::kList:
            if (v.list->empty()) { out += "[]"; return; }
            out += '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += indent >= 0 ? "," : ", ";
                nl(level + 1);
                to_json((*v.list)[k], indent, level + 1, out, depth + 1);
            }
            nl(level);
            out += ']';
            return;
        case Type::kDict: case Type::kNamespace:
            if (v.dict->empty()) { out += "{}"; return; }
            out += '{';
            for (size_t k = 0; k < v.dict->size(); ++k) {
                if (k) out += indent >= 0 ? "," : ", ";
                nl(level + 1);
                json_str((*v.dict)[k].first, out);
                out += ": ";
                to_json((*v.dict)[k].second, indent, level + 1, out, depth + 1);
            }
            nl(level);
            out += '}';
            return;
    }
}

bool is_num(const Value& v) { return v.type == Type::kInt || v.type == Type::kFloat || v.type == Type::kBool; }
double num(const Value& v) { return v.type == Type::kFloat ? v.f : v.type == Type::kBool ? v.b : static_cast<double>(v.i); }

bool equal(const Value& a, const Value& b) {
    if (is_num(a) && is_num(b)) return num(a) == num(b);
    if (a.type != b.type) return false;
    switch (a.type) {
        case Type::kString: return a.s == b.s;
        case Type::kList:
            if (a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); ++k) if (!equal((*a.list)[k], (*b.list)[k])) return false;
            return true;
        case Type::kDict: case Type::kNamespace:
            if (a.dict->size() != b.dict->size()) return false;
            for (size_t k = 0; k < a.dict->size(); ++k)
                if ((*a.dict)[k].first != (*b.dict)[k].first || !equal((*a.dict)[k].second, (*b.dict)[k].second)) return false;
            return true;
        default: return true;  // undefined == undefined, none == none
    }
}

const Value* dict_get(const Value& d, const std::string& key) {
    for (const auto& [k, v] : *d.dict) if (k == key) return &v;
    return nullptr;
}

std::vector<Value> iterate(const Value& v) {
    if (v.type == Type::kList) return *v.list;
    if (v.type == Type::kDict) {
        std::vector<Value> keys;
        for (const auto& kv : *v.dict) keys.push_back(Value::str(kv.first));
        return keys;
    }
    if (v.type == Type::kString) {
        std::vector<Value> chars;
        for (char c : v.s) chars.push_back(Value::str(std::string(1, c)));
        return chars;
    }
    if (v.type == Type::kUndefined || v.type == Type::kNone) {
        if (v.type == Type::kNone) fail("'NoneType' object is not iterable");
        return {};
    }
    fail("value is not iterable: " + repr(v));
}

int64_t py_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

struct LoopBreak {};
struct LoopContinue {};

class Evaluator {
public:
    Evaluator(const Dict& globals, const RenderLimits& limits) : limits_(limits) {
        scopes_.emplace_back();
        for (const auto& [k, v] : globals) scopes_.back()[k] = v;
    }
    std::string out;

    void run(const Body& body) {
        for (const auto& s : body) exec(*s);
    }

private:
    void emit(const std::string& s) {
        if (out.size() + s.size() > limits_.max_output_bytes) fail("output exceeds the size limit");
        out += s;
    }
    Value lookup(const std::string& name) const {
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
            auto f = it->find(name);
            if (f != it->end()) return f->second;
        }
        return Value{};
    }

    void exec(const Stmt& s) {
        switch (s.kind) {
            case SK::kText: emit(s.text); return;
            case SK::kOutput: emit(to_str(eval(*s.exprs[0]))); return;
            case SK::kIf:
                for (size_t k = 0; k < s.bodies.size(); ++k) {
                    if (k >= s.exprs.size() || truthy(eval(*s.exprs[k]))) { run(s.bodies[k]); return; }
                }
                return;
            case SK::kSet: {
                Value v = eval(*s.exprs[0]);
                if (s.names.size() == 1) { scopes_.back()[s.names[0]] = v; return; }
                Value ns = lookup(s.names[0]);
                if (ns.type != Type::kNamespace) fail("cannot set attribute '" + s.names[1] + "' on non-namespace");
                for (auto& kv : *ns.dict) if (kv.first == s.names[1]) { kv.second = v; return; }
                ns.dict->emplace_back(s.names[1], v);
                return;
            }
            case SK::kFor: exec_for(s); return;
            case SK::kBreak: throw LoopBreak{};
            case SK::kContinue: throw LoopContinue{};
        }
    }

    void bind_loop_vars(const Stmt& s, const Value& item, std::map<std::string, Value>& scope) {
        if (s.names.size() == 1) { scope[s.names[0]] = item; return; }
        if (item.type != Type::kList || item.list->size() != s.names.size()) fail("cannot unpack loop item " + repr(item));
        for (size_t k = 0; k < s.names.size(); ++k) scope[s.names[k]] = (*item.list)[k];
    }

    void exec_for(const Stmt& s) {
        std::vector<Value> items = iterate(eval(*s.exprs[0]));
        if (s.exprs.size() > 1) {
            std::vector<Value> kept;
            for (const auto& it : items) {
                scopes_.emplace_back();
                bind_loop_vars(s, it, scopes_.back());
                bool keep = truthy(eval(*s.exprs[1]));
                scopes_.pop_back();
                if (keep) kept.push_back(it);
            }
            items = std::move(kept);
        }
        if (items.empty()) { run(s.bodies[1]); return; }
        const int64_t n = static_cast<int64_t>(items.size());
        for (int64_t k = 0; k < n; ++k) {
            if (++iterations_ > limits_.max_iterations) fail("loop iteration limit exceeded");
            scopes_.emplace_back();
            auto& scope = scopes_.back();
            bind_loop_vars(s, items[k], scope);
            Dict loop = {{"index", Value::integer(k + 1)}, {"index0", Value::integer(k)},
                         {"revindex", Value::integer(n - k)}, {"revindex0", Value::integer(n - k - 1)},
                         {"first", Value::boolean(k == 0)}, {"last", Value::boolean(k == n - 1)},
                         {"length", Value::integer(n)}};
            if (k > 0) loop.emplace_back("previtem", items[k - 1]);
            if (k + 1 < n) loop.emplace_back("nextitem", items[k + 1]);
            scope["loop"] = Value::make_dict(std::move(loop));
            bool stop = false;
            try {
                run(s.bodies[0]);
            } catch (const LoopBreak&) {
                stop = true;
            } catch (const LoopContinue&) {
            }
            scopes_.pop_back();
            if (stop) break;
        }
    }

    Value attr(const Value& obj, const std::string& name) {
        if (obj.type == Type::kDict || obj.type == Type::kNamespace) {
            const Value* v = dict_get(obj, name);
            return v ? *v : Value{};
        }
        return Value{};
    }

    Value index(const Value& obj, const Value& key) {
        if (obj.type == Type::kDict || obj.type == Type::kNamespace) {
            if (key.type != Type::kString) return Value{};
            return attr(obj, key.s);
        }
        if ((obj.type == Type::kList || obj.type == Type::kString) && key.type == Type::kInt) {
            int64_t n = obj.type == Type::kList ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(obj.s.size());
            int64_t i = py_index(key.i, n);
            if (i < 0 || i >= n) return Value{};
            return obj.type == Type::kList ? (*obj.list)[i] : Value::str(std::string(1, obj.s[i]));
        }
        if (obj.type == Type::kUndefined) fail("cannot index an undefined value");
        return Value{};
    }

    Value slice(const Value& obj, const Expr& e) {
        auto opt = [&](const ExprP& x, bool* has) -> int64_t {
            *has = false;
            if (!x) return 0;
            Value v = eval(*x);
            if (v.type == Type::kNone) return 0;
            if (v.type != Type::kInt) fail("slice indices must be integers");
            *has = true;
            return v.i;
        };
        bool hs, he, hp;
        int64_t start = opt(e.kids[1], &hs), stop = opt(e.kids[2], &he), step = opt(e.kids[3], &hp);
        if (!hp) step = 1;
        if (step == 0) fail("slice step cannot be zero");
        int64_t n;
        if (obj.type == Type::kList) n = static_cast<int64_t>(obj.list->size());
        else if (obj.type == Type::kString) n = static_cast<int64_t>(obj.s.size());
        else fail("cannot slice " + repr(obj));
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
            if (obj.type == Type::kList) l.push_back((*obj.list)[i]);
            else str += obj.s[i];
        }
        return obj.type == Type::kList ? Value::make_list(std::move(l)) : Value::str(str);
    }

    std::vector<Value> args_of(const Expr& e, std::vector<std::string>* kw, size_t first = 1) {
        std::vector<Value> a;
        for (size_t k = first; k < e.kids.size(); ++k) a.push_back(eval(*e.kids[k]));
        *kw = e.kw;
        return a;
    }

    Value eval(const Expr& e);
    Value call(const Expr& e);
    Value method(const Value& obj, const std::string& name, const std::vector<Value>& a);
    Value filter(const Expr& e);
    bool test(const std::string& name, const Value& v, const std::vector<Value>& a);
    Value binary(const std::string& op, const Value& a, const Value& b);

    const RenderLimits& limits_;
    std::vector<std::map<std::string, Value>> scopes_;
    int64_t iterations_ = 0;
};

Value Evaluator::eval(const Expr& e) {
    switch (e.kind) {
        case EK::kLit: return e.lit;
        case EK::kName: return lookup(e.name);
        case EK::kAttr: return attr(eval(*e.kids[0]), e.name);
        case EK::kIndex: return index(eval(*e.kids[0]), eval(*e.kids[1]));
        case EK::kSlice: return slice(eval(*e.kids[0]), e);
        case EK::kCall: return call(e);
        case EK::kFilter: return filter(e);
        case EK::kTest: {
            std::vector<std::string> kw;
            Value v = eval(*e.kids[0]);
            bool r = test(e.name, v, args_of(e, &kw));
            return Value::boolean(r != e.negate);
        }
        case EK::kNot: return Value::boolean(!truthy(eval(*e.kids[0])));
        case EK::kNeg: {
            Value v = eval(*e.kids[0]);
            if (v.type == Type::kInt) return Value::integer(-v.i);
            if (v.type == Type::kFloat) return Value::number(-v.f);
            fail("bad operand for unary -");
        }
        case EK::kAnd: { Value a = eval(*e.kids[0]); return truthy(a) ? eval(*e.kids[1]) : a; }
        case EK::kOr: { Value a = eval(*e.kids[0]); return truthy(a) ? a : eval(*e.kids[1]); }
        case EK::kCond: return truthy(eval(*e.kids[0])) ? eval(*e.kids[1]) : eval(*e.kids[2]);
        case EK::kBin: {
            Value r = binary(e.name, eval(*e.kids[0]), eval(*e.kids[1]));
            if (e.negate) r.b = !r.b;
            return r;
        }
        case EK::kList: {
            List l;
            for (const auto& k : e.kids) l.push_back(eval(*k));
            return Value::make_list(std::move(l));
        }
        case EK::kDict: {
            Dict d;
            for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
                Value key = eval(*e.kids[k]);
                if (key.type != Type::kString) fail("only string dict keys are supported");
                Value v = eval(*e.kids[k + 1]);
                bool found = false;
                for (auto& kv : d) if (kv.first == key.s) { kv.second = v; found = true; }
                if (!found) d.emplace_back(key.s, v);
            }
            return Value::make_dict(std::move(d));
        }
    }
    fail("internal: bad expression");
}

Value Evaluator::binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") return Value::str(to_str(a) + to_str(b));
    if (op == "in") {
        if (b.type == Type::kString) {
            if (a.type != Type::kString) fail("'in <string>' requires a string on the left");
            return Value::boolean(b.s.find(a.s) != std::string::npos);
        }
        if (b.type == Type::kList) {
            for (const auto& x : *b.list) if (equal(a, x)) return Value::boolean(true);
            return Value::boolean(false);
        }
        if (b.type == Type::kDict || b.type == Type::kNamespace)
            return Value::boolean(a.type == Type::kString && dict_get(b, a.s) != nullptr);
        fail("argument of type " + repr(b) + " is not iterable");
    }
    if (op == "+" && a.type == Type::kString && b.type == Type::kString) {
        if (a.s.size() + b.s.size() > limits_.max_output_bytes) fail("string exceeds the size limit");
        return Value::str(a.s + b.s);
    }
    if (op == "+" && a.type == Type::kList && b.type == Type::kList) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(l));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
        int c;
        if (is_num(a) && is_num(b)) c = num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
        else if (a.type == Type::kString && b.type == Type::kString) c = a.s.compare(b.s);
        else fail("cannot compare " + repr(a) + " and " + repr(b));
        bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        return Value::boolean(r);
    }
    if (op == "*" && a.type == Type::kString && b.type == Type::kInt) {
        if (b.i > 0 && a.s.size() * static_cast<uint64_t>(b.i) > limits_.max_output_bytes) fail("string too long");
        std::string r;
        for (int64_t k = 0; k < b.i; ++k) r += a.s;
        return Value::str(r);
    }
    if (!is_num(a) || !is_num(b)) fail("unsupported operands for '" + op + "': " + repr(a) + ", " + repr(b));
    bool ints = a.type != Type::kFloat && b.type != Type::kFloat;
    if (ints && op != "/") {
        int64_t x = a.type == Type::kBool ? a.b : a.i, y = b.type == Type::kBool ? b.b : b.i;
        if ((op == "//" || op == "%") && y == 0) fail("integer division or modulo by zero");
        if (op == "+") return Value::integer(static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y)));
        if (op == "-") return Value::integer(static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y)));
        if (op == "*") return Value::integer(static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)));
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
    fail("unsupported operator " + op);
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    auto in = [&](char c) { return chars.empty() ? is_ws(c) : chars.find(c) != std::string::npos; };
    if (left) while (b < e && in(s[b])) ++b;
    if (right) while (e > b && in(s[e - 1])) --e;
    return s.substr(b, e - b);
}

Value Evaluator::method(const Value& obj, const std::string& name, const std::vector<Value>& a) {
    auto str_arg = [&](size_t k) -> std::string {
        if (k >= a.size() || a[k].type != Type::kString) fail(name + "() expects a string argument");
        return a[k].s;
    };
    if (obj.type == Type::kString) {
        const std::string& s = obj.s;
        std::string chars = !a.empty() && a[0].type == Type::kString ? a[0].s : "";
        if (name == "strip") return Value::str(strip_chars(s, chars, true, true));
        if (name == "lstrip") return Value::str(strip_chars(s, chars, true, false));
        if (name == "rstrip") return Value::str(strip_chars(s, chars, false, true));
        if (name == "upper" || name == "lower") {
            std::string r = s;
            for (char& c : r) c = name == "upper" ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                                                  : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return Value::str(r);
        }
        if (name == "startswith") return Value::boolean(s.rfind(str_arg(0), 0) == 0);
        if (name == "endswith") {
            std::string x = str_arg(0);
            return Value::boolean(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
        }
        if (name == "replace") {
            std::string from = str_arg(0), to = str_arg(1), r;
            if (from.empty()) return obj;
            size_t p = 0, q;
            while ((q = s.find(from, p)) != std::string::npos) {
                r += s.substr(p, q - p) + to;
                if (r.size() > limits_.max_output_bytes) fail("string too long");
                p = q + from.size();
            }
            return Value::str(r + s.substr(p));
        }
        if (name == "split") {
            List parts;
            if (a.empty() || a[0].type == Type::kNone) {
                size_t p = 0;
                while (p < s.size()) {
                    while (p < s.size() && is_ws(s[p])) ++p;
                    size_t q = p;
                    while (q < s.size() && !is_ws(s[q])) ++q;
                    if (q > p) parts.push_back(Value::str(s.substr(p, q - p)));
                    p = q;
                }
            } else {
                std::string sep = str_arg(0);
                if (sep.empty()) fail("empty separator");
                size_t p = 0, q;
                while ((q = s.find(sep, p)) != std::string::npos) { parts.push_back(Value::str(s.substr(p, q - p))); p = q + sep.size(); }
                parts.push_back(Value::str(s.substr(p)));
            }
            return Value::make_list(std::move(parts));
        }
    }
    if (obj.type == Type::kDict) {
        if (name == "items" || name == "keys" || name == "values") {
            List l;
            for (const auto& [k, v] : *obj.dict) {
                if (name == "items") l.push_back(Value::make_list({Value::str(k), v}));
                else l.push_back(name == "keys" ? Value::str(k) : v);
            }
            return Value::make_list(std::move(l));
        }
        if (name == "get") {
            const Value* v = dict_get(obj, str_arg(0));
            return v ? *v : a.size() > 1 ? a[1] : Value::none();
        }
    }
    fail("unsupported method '" + name + "' on " + repr(obj).substr(0, 40));
}

Value Evaluator::call(const Expr& e) {
    std::vector<std::string> kw;
    std::vector<Value> a = args_of(e, &kw);
    const Expr& callee = *e.kids[0];
    if (callee.kind == EK::kAttr) return method(eval(*callee.kids[0]), callee.name, a);
    if (callee.kind != EK::kName) fail("only named functions and methods can be called");
    const std::string& fn = callee.name;
    if (fn == "raise_exception") fail("raise_exception: " + (a.empty() ? std::string() : to_str(a[0])));
    if (fn == "namespace") {
        Value ns = Value::make_dict();
        ns.type = Type::kNamespace;
        for (size_t k = 0; k < a.size(); ++k) {
            if (kw[k].empty()) fail("namespace() takes keyword arguments only");
            ns.dict->emplace_back(kw[k], a[k]);
        }
        return ns;
    }
    if (fn == "range") {
        int64_t start = 0, stop = 0, step = 1;
        for (const auto& v : a) if (v.type != Type::kInt) fail("range() expects integers");
        if (a.size() == 1) stop = a[0].i;
        else if (a.size() >= 2) { start = a[0].i; stop = a[1].i; if (a.size() > 2) step = a[2].i; }
        if (step == 0) fail("range() step must not be zero");
        List l;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (l.size() >= 100000) fail("range() longer than 100000");
            l.push_back(Value::integer(i));
        }
        return Value::make_list(std::move(l));
    }
    Value f = lookup(fn);
    if (f.type == Type::kUndefined) fail("'" + fn + "' is undefined");
    fail("'" + fn + "' is not callable");
}

bool Evaluator::test(const std::string& name, const Value& v, const std::vector<Value>& a) {
    if (name == "defined") return v.type != Type::kUndefined;
    if (name == "undefined") return v.type == Type::kUndefined;
    if (name == "none") return v.type == Type::kNone;
    if (name == "string") return v.type == Type::kString;
    if (name == "number") return v.type == Type::kInt || v.type == Type::kFloat;
    if (name == "integer") return v.type == Type::kInt;
    if (name == "float") return v.type == Type::kFloat;
    if (name == "boolean") return v.type == Type::kBool;
    if (name == "true") return v.type == Type::kBool && v.b;
    if (name == "false") return v.type == Type::kBool && !v.b;
    if (name == "mapping") return v.type == Type::kDict || v.type == Type::kNamespace;
    if (name == "sequence") return v.type == Type::kList || v.type == Type::kString || v.type == Type::kDict;
    if (name == "iterable") return v.type == Type::kList || v.type == Type::kString || v.type == Type::kDict;
    if (name == "callable") return false;
    if (name == "odd" || name == "even") {
        if (v.type != Type::kInt) fail("odd/even test needs an integer");
        return (v.i % 2 != 0) == (name == "odd");
    }
    if (a.empty()) fail("unknown test '" + name + "'");
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, a[0]);
    if (name == "ne" || name == "!=") return !equal(v, a[0]);
    if (name == "in") return truthy(binary("in", v, a[0]));
    fail("unknown test '" + name + "'");
}

Value Evaluator::filter(const Expr& e) {
    std::vector<std::string> kw;
    Value v = eval(*e.kids[0]);
    std::vector<Value> a = args_of(e, &kw);
    const std::string& f = e.name;
    auto named = [&](const std::string& key, size_t pos) -> const Value* {
        for (size_t k = 0; k < a.size(); ++k) if (kw[k] == key) return &a[k];
        size_t p = 0;
        for (size_t k = 0; k < a.size(); ++k) if (kw[k].empty() && p++ == pos) return &a[k];
        return nullptr;
    };
    if (f == "trim") return Value::str(strip_chars(to_str(v), "", true, true));
    if (f == "upper" || f == "lower") return method(Value::str(to_str(v)), f, {});
    if (f == "string") return Value::str(to_str(v));
    if (f == "length" || f == "count") {
        if (v.type == Type::kString) return Value::integer(static_cast<int64_t>(v.s.size()));
        if (v.type == Type::kList) return Value::integer(static_cast<int64_t>(v.list->size()));
        if (v.type == Type::kDict) return Value::integer(static_cast<int64_t>(v.dict->size()));
        if (v.type == Type::kUndefined) return Value::integer(0);
        fail("object has no length: " + repr(v));
    }
    if (f == "default" || f == "d") {
        const Value* dflt = named("default_value", 0);
        const Value* boolean = named("boolean", 1);
        bool use = v.type == Type::kUndefined || (boolean && truthy(*boolean) && !truthy(v));
        return use ? (dflt ? *dflt : Value::str("")) : v;
    }
    if (f == "tojson") {
        const Value* ind = named("indent", 0);
        int indent = ind && ind->type == Type::kInt ? static_cast<int>(std::clamp<int64_t>(ind->i, 0, 64)) : -1;
        std::string out;
        to_json(v, indent, 0, out, 0);
        return Value::str(out);
    }
    if (f == "list") return Value::make_list(iterate(v));
    if (f == "first" || f == "last") {
        std::vector<Value> items = iterate(v);
        if (items.empty()) return Value{};
        return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
        const Value* sep = named("d", 0);
        std::string s;
        std::vector<Value> items = iterate(v);
        for (size_t k = 0; k < items.size(); ++k) s += (k && sep ? to_str(*sep) : "") + to_str(items[k]);
        return Value::str(s);
    }
    if (f == "items") return method(v, "items", {});
    if (f == "reverse") {
        if (v.type == Type::kString) return Value::str(std::string(v.s.rbegin(), v.s.rend()));
        std::vector<Value> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
    }
    if (f == "capitalize") {
        std::string s = to_str(v);
        for (size_t k = 0; k < s.size(); ++k)
            s[k] = static_cast<char>(k ? std::tolower(static_cast<unsigned char>(s[k])) : std::toupper(static_cast<unsigned char>(s[k])));
        return Value::str(s);
    }
    if (f == "int") {
        if (v.type == Type::kInt) return v;
        if (v.type == Type::kFloat) return Value::integer(static_cast<int64_t>(v.f));
        if (v.type == Type::kString) return Value::integer(std::strtoll(v.s.c_str(), nullptr, 10));
        return Value::integer(0);
    }
    if (f == "abs") {
        if (v.type == Type::kInt) return Value::integer(v.i < 0 ? -v.i : v.i);
        return Value::number(std::fabs(num(v)));
    }
    if (f == "selectattr" || f == "rejectattr" || f == "map") {
        if (a.empty() || a[0].type != Type::kString) fail(f + " needs an attribute name");
        List l;
        for (const auto& it : iterate(v)) {
            Value x = it.type == Type::kDict ? attr(it, a[0].s) : Value{};
            if (f == "map") { l.push_back(x); continue; }
            bool ok = a.size() < 2 ? truthy(x) : test(to_str(a[1]), x, std::vector<Value>(a.begin() + 2, a.end()));
            if (ok == (f == "selectattr")) l.push_back(it);
        }
        return Value::make_list(std::move(l));
    }
    fail("unsupported filter '" + f + "'");
}

}  // namespace

core::Result<std::string> render(const std::string& tmpl, const Dict& globals, const RenderLimits& limits) {
    try {
        Body body = parse_template(tmpl, limits.max_depth);
        Evaluator ev(globals, limits);
        ev.run(body);
        return std::move(ev.out);
    } catch (const JinjaError& e) {
        return core::error(core::StatusCode::kInvalidArgument) << "chat template: " << e.msg;
    } catch (const LoopBreak&) {
        return core::error(core::StatusCode::kInvalidArgument) << "chat template: break outside a loop";
    } catch (const LoopContinue&) {
        return core::error(core::StatusCode::kInvalidArgument) << "chat template: continue outside a loop";
    } catch (const std::bad_alloc&) {
        return core::error(core::StatusCode::kOutOfMemory) << "chat template: out of memory";
    }
}

}  // namespace kiln::tokenizer::jinja