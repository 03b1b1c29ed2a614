// Jinja evaluator: runs the AST of jinja_parse.cc with jinja2's scoping (a scope per loop iteration, macro
// and with block; macros see their defining scope as it is when they run), undefined values, macros,
// call blocks and loop controls. Filters, tests, methods and global functions live in jinja_builtins.cc.
// Errors are thrown internally as JinjaError and turned into a Status at render(); nothing else escapes.
#include "tokenizer/jinja_engine.h"

#include <algorithm>
#include <unordered_map>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_value.h"

namespace kiln::tokenizer::jinja {
namespace {

using namespace detail;

struct LoopBreak {};
struct LoopContinue {};

struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
};
using ScopeP = std::shared_ptr<Scope>;

class Evaluator final : public Interp {
public:
    Evaluator(const Dict& globals, const RenderLimits& limits) : limits_(limits) {
        root_ = std::make_shared<Scope>();
        for (const auto& [k, v] : globals) root_->vars[k] = v;
        scope_ = root_;
    }

    ~Evaluator() override {
        for (const auto& w : namespaces_)
            if (auto d = w.lock()) d->clear();  // breaks any cycle a namespace closed (ns.me = ns, ...)
        for (const auto& w : closures_)
            if (auto sc = w.lock()) sc->vars.clear();  // and the ones macros close over their scopes
    }

    void track_namespace(const std::shared_ptr<Dict>& d) override { namespaces_.push_back(d); }

    std::string render(const Body& body) {
        std::string result;
        out_ = &result;
        run(body);
        return result;
    }
    int line() const { return line_; }

    Value call(const Value& fn, const Args& a) override {
        if (fn.type != Type::kCallable) {
            require_defined(fn);
            fail(std::string("'") + type_name(fn) + "' object is not callable");
        }
        if (++depth_ > limits_.max_depth) fail("calls nested too deeply");
        Value r = fn.fn->call(*this, a);
        --depth_;
        return r;
    }
    const RenderLimits& limits() const override { return limits_; }

private:
    // Runs `fn` with a fresh output buffer and a child scope of `parent`; returns what it wrote.
    template <typename F>
    std::string capture(ScopeP parent, F&& fn) {  // by value: callers pass scope_, which this replaces
        std::string buf;
        std::string* saved_out = out_;
        ScopeP saved_scope = scope_;
        out_ = &buf;
        scope_ = std::make_shared<Scope>();
        scope_->parent = parent;
        try {
            fn();
        } catch (...) {
            out_ = saved_out;
            scope_ = saved_scope;
            throw;
        }
        out_ = saved_out;
        scope_ = saved_scope;
        return buf;
    }

    void emit(const std::string& s) {
        if (out_->size() + s.size() > limits_.max_output_bytes) fail("output exceeds the size limit");
        *out_ += s;
    }
    void run(const Body& body) {
        for (const auto& s : body) exec(*s);
    }
    Value lookup(const std::string& name) const {
        for (const Scope* sc = scope_.get(); sc; sc = sc->parent.get()) {
            auto f = sc->vars.find(name);
            if (f != sc->vars.end()) return f->second;
        }
        if (Value g = builtin_global(name); g.type == Type::kCallable) return g;
        return Value::undefined("'" + name + "' is undefined");
    }
    void assign(const std::string& name, const Value& v) { scope_->vars[name] = v; }

    void exec(const Stmt& s) {
        line_ = s.line;
        switch (s.kind) {
            case SK::kText: emit(s.text); return;
            case SK::kOutput: emit(to_str(eval(*s.exprs[0]))); return;
            case SK::kIf:
                for (size_t k = 0; k < s.bodies.size(); ++k) {
                    if (k >= s.exprs.size() || truthy(eval(*s.exprs[k]))) { run(s.bodies[k]); return; }
                }
                return;
            case SK::kSet: exec_set(s, eval(*s.exprs[0])); return;
            case SK::kSetBlock: {
                std::string text = capture(scope_, [&] { run(s.bodies[0]); });
                exec_set(s, s.exprs[0] ? apply_block_filter(*s.exprs[0], text) : Value::str(text));
                return;
            }
            case SK::kFilterBlock: {
                std::string text = capture(scope_, [&] { run(s.bodies[0]); });
                emit(to_str(apply_block_filter(*s.exprs[0], text)));
                return;
            }
            case SK::kFor: exec_for(s, iterable_of(*s.exprs[0]), 0); return;
            case SK::kBreak: throw LoopBreak{};
            case SK::kContinue: throw LoopContinue{};
            case SK::kMacro: assign(s.text, make_macro(s, 0, s.text)); return;
            case SK::kCallBlock: exec_call_block(s); return;
            case SK::kWith: {
                auto inner = std::make_shared<Scope>();
                inner->parent = scope_;
                for (size_t k = 0; k < s.names.size(); ++k) inner->vars[s.names[k]] = eval(*s.exprs[k]);
                ScopeP saved = scope_;
                scope_ = inner;
                try { run(s.bodies[0]); } catch (...) { scope_ = saved; throw; }
                scope_ = saved;
                return;
            }
            case SK::kBlock: run(s.bodies[0]); return;
        }
    }

    void exec_set(const Stmt& s, const Value& v) {
        if (s.names.size() > 1) {  // {% set a, b = pair %}
            std::vector<Value> items = iterate(v);
            if (items.size() != s.names.size())
                fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(s.names.size()));
            for (size_t k = 0; k < items.size(); ++k) assign(s.names[k], items[k]);
            return;
        }
        const std::string& target = s.names[0];
        size_t dot = target.find('.');
        if (dot == std::string::npos) { assign(target, v); return; }
        Value ns = lookup(target.substr(0, dot));
        std::string attr = target.substr(dot + 1);
        if (ns.type != Type::kNamespace) fail("cannot assign attribute on non-namespace object");
        for (auto& kv : *ns.dict) if (kv.first == attr) { kv.second = v; return; }
        ns.dict->emplace_back(attr, v);
    }

    Value apply_block_filter(const Expr& chain, const std::string& text) {
        auto hole = std::make_shared<Scope>();
        hole->parent = scope_;
        hole->vars["\x01block"] = Value::str(text);
        ScopeP saved = scope_;
        scope_ = hole;
        Value r;
        try { r = eval(chain); } catch (...) { scope_ = saved; throw; }
        scope_ = saved;
        return r;
    }

    std::vector<Value> iterable_of(const Expr& e) {
        Value v = eval(e);
        if (v.type == Type::kNone) fail("'NoneType' object is not iterable");
        return iterate(v);
    }

    void bind_targets(const Stmt& s, const Value& item, Scope& scope) {
        if (s.names.size() == 1) { scope.vars[s.names[0]] = item; return; }
        std::vector<Value> parts = iterate(item);
        if (parts.size() != s.names.size())
            fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.names.size()));
        for (size_t k = 0; k < s.names.size(); ++k) scope.vars[s.names[k]] = parts[k];
    }

    void exec_for(const Stmt& s, std::vector<Value> items, int depth) {
        if (depth > limits_.max_depth) fail("recursive loop nested too deeply");
        if (s.exprs[1]) {  // {% for x in xs if cond %}: filtered before loop.* is computed
            std::vector<Value> kept;
            for (const auto& it : items) {
                auto probe = std::make_shared<Scope>();
                probe->parent = scope_;
                bind_targets(s, it, *probe);
                ScopeP saved = scope_;
                scope_ = probe;
                bool keep;
                try { keep = truthy(eval(*s.exprs[1])); } catch (...) { scope_ = saved; throw; }
                scope_ = saved;
                if (keep) kept.push_back(it);
            }
            items = std::move(kept);
        }
        if (items.empty()) { run(s.bodies[1]); return; }
        const int64_t n = static_cast<int64_t>(items.size());
        auto last_changed = std::make_shared<std::vector<Value>>();
        struct Clear {  // it may hold the loop object, which holds it: no cycle outlives the loop
            std::shared_ptr<std::vector<Value>> v;
            ~Clear() { v->clear(); }
        } clear_changed{last_changed};
        auto has_changed = std::make_shared<bool>(false);
        ScopeP outer = scope_;
        // One loop object, updated in place as jinja2's LoopContext is (loop.changed(loop) sees the same one).
        auto cycle_index = std::make_shared<int64_t>(0);
        Value loop_value = Value::make_dict(
            {{"index", {}}, {"index0", {}}, {"revindex", {}}, {"revindex0", {}}, {"first", {}}, {"last", {}},
             {"length", Value::integer(n)}, {"depth", Value::integer(depth + 1)}, {"depth0", Value::integer(depth)},
             {"previtem", {}}, {"nextitem", {}}});
        loop_value.dict->emplace_back("cycle", make_builtin("loop.cycle", [cycle_index](Interp&, const Args& a) {
            if (a.pos.empty()) fail("no items for cycling given");
            return a.pos[static_cast<size_t>(*cycle_index) % a.pos.size()];
        }));
        loop_value.dict->emplace_back("changed", make_builtin("loop.changed", [last_changed, has_changed](Interp&, const Args& a) {
            bool same = *has_changed && last_changed->size() == a.pos.size();
            for (size_t j = 0; same && j < a.pos.size(); ++j) same = equal((*last_changed)[j], a.pos[j]);
            *last_changed = a.pos;
            *has_changed = true;
            return Value::boolean(!same);
        }));
        if (s.recursive) {  // loop(children) renders the loop body over `children`, one level deeper
            const Stmt* sp = &s;
            loop_value.dict->emplace_back("\x01recurse", make_builtin("loop", [this, sp, depth](Interp&, const Args& a) {
                if (a.pos.size() != 1) fail("loop() takes one iterable");
                Value arg = a.pos[0];
                if (arg.type == Type::kNone) fail("'NoneType' object is not iterable");
                return Value::str(capture(scope_, [&] { exec_for(*sp, iterate(arg), depth + 1); }));
            }));
        }
        for (int64_t k = 0; k < n; ++k) {
            if (++iterations_ > limits_.max_iterations) fail("loop iteration limit exceeded");
            auto iter = std::make_shared<Scope>();
            iter->parent = outer;
            bind_targets(s, items[k], *iter);
            Dict& loop = *loop_value.dict;
            auto set = [&loop](size_t slot, Value v) { loop[slot].second = std::move(v); };
            set(0, Value::integer(k + 1));
            set(1, Value::integer(k));
            set(2, Value::integer(n - k));
            set(3, Value::integer(n - k - 1));
            set(4, Value::boolean(k == 0));
            set(5, Value::boolean(k == n - 1));
            set(9, k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
            set(10, k + 1 < n ? items[k + 1] : Value::undefined("there is no next item"));
            *cycle_index = k;
            iter->vars["loop"] = loop_value;
            ScopeP saved = scope_;
            scope_ = iter;
            bool stop = false;
            try {
                run(s.bodies[0]);
            } catch (const LoopBreak&) {
                stop = true;
            } catch (const LoopContinue&) {
            } catch (...) {
                scope_ = saved;
                throw;
            }
            scope_ = saved;
            if (stop) break;
        }
    }

    // A macro (or a call block's caller when `first_default` is 1) as a callable closing over the scope it
    // was defined in.
    Value make_macro(const Stmt& s, size_t first_default, const std::string& name) {
        const Stmt* sp = &s;
        // The macro is usually stored in the scope it closes over: a cycle, broken when the render ends.
        ScopeP defined_in = scope_;
        closures_.push_back(scope_);
        const Body* body = &s.bodies[0];
        return make_builtin(name, [this, sp, defined_in, body, first_default](Interp&, const Args& a) {
            return Value::str(capture(defined_in, [&] {
                const auto& params = sp->names;
                for (size_t k = 0; k < params.size(); ++k) {
                    const Value* v = nullptr;
                    for (const auto& [kn, kv] : a.kw) if (kn == params[k]) v = &kv;
                    if (!v && k < a.pos.size()) v = &a.pos[k];
                    if (v) {
                        assign(params[k], *v);
                    } else if (sp->exprs.size() > first_default + k && sp->exprs[first_default + k]) {
                        assign(params[k], eval(*sp->exprs[first_default + k]));
                    } else {
                        assign(params[k], Value::undefined("parameter '" + params[k] + "' was not provided"));
                    }
                }
                List varargs(a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(a.pos.size(), params.size())), a.pos.end());
                assign("varargs", make_tuple(std::move(varargs)));
                Dict kwargs;
                for (const auto& [kn, kv] : a.kw) {
                    if (kn == "caller") { assign("caller", kv); continue; }
                    if (std::find(params.begin(), params.end(), kn) == params.end()) kwargs.emplace_back(kn, kv);
                }
                assign("kwargs", Value::make_dict(std::move(kwargs)));
                run(*body);
            }));
        });
    }

    void exec_call_block(const Stmt& s) {
        const Expr& c = *s.exprs[0];
        Value caller = make_macro(s, 1, "caller");
        Args a = eval_args(c, 1);
        a.kw.emplace_back("caller", caller);
        emit(to_str(call(eval(*c.kids[0]), a)));
    }

    Args eval_args(const Expr& e, size_t first) {
        Args a;
        for (size_t k = first; k < e.kids.size(); ++k) {
            Value v = eval(*e.kids[k]);
            const std::string& key = e.kw[k - first];
            if (key.empty()) a.pos.push_back(std::move(v));
            else a.kw.emplace_back(key, std::move(v));
        }
        return a;
    }

    Value eval(const Expr& e);
    Value eval_call(const Expr& e);
    Value eval_compare(const Expr& e);
    Value attr(const Value& obj, const std::string& name);
    Value index(const Value& obj, const Value& key);
    Value slice(const Value& obj, const Expr& e);

    const RenderLimits& limits_;
    ScopeP root_, scope_;
    std::string* out_ = nullptr;
    int depth_ = 0;
    int line_ = 0;
    int64_t iterations_ = 0;
    std::vector<std::weak_ptr<Dict>> namespaces_;
    std::vector<std::weak_ptr<Scope>> closures_;  // scopes a macro closes over
};

Value Evaluator::eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
        case EK::kLit: return e.lit;
        case EK::kName: return lookup(e.name);
        case EK::kAttr: return attr(eval(*e.kids[0]), e.name);
        case EK::kIndex: return index(eval(*e.kids[0]), eval(*e.kids[1]));
        case EK::kSlice: return slice(eval(*e.kids[0]), e);
        case EK::kCall: return eval_call(e);
        case EK::kFilter: {
            Value v = eval(*e.kids[0]);
            return apply_filter(*this, e.name, v, eval_args(e, 1));
        }
        case EK::kTest: {
            Value v = eval(*e.kids[0]);
            bool r = apply_test(*this, e.name, v, eval_args(e, 1));
            return Value::boolean(e.negate ? !r : r);
        }
        case EK::kNot: return Value::boolean(!truthy(eval(*e.kids[0])));
        case EK::kNeg: {
            Value v = eval(*e.kids[0]);
            if (v.type == Type::kInt) return Value::integer(static_cast<int64_t>(0 - static_cast<uint64_t>(v.i)));
            if (v.type == Type::kFloat) return Value::number(-v.f);
            if (v.type == Type::kBool) return Value::integer(-static_cast<int64_t>(v.b));
            require_defined(v);
            fail(std::string("bad operand type for unary -: '") + type_name(v) + "'");
        }
        case EK::kAnd: {
            Value a = eval(*e.kids[0]);
            return truthy(a) ? eval(*e.kids[1]) : a;
        }
        case EK::kOr: {
            Value a = eval(*e.kids[0]);
            return truthy(a) ? a : eval(*e.kids[1]);
        }
        case EK::kCond:
            if (truthy(eval(*e.kids[0]))) return eval(*e.kids[1]);
            if (e.kids[2]->kind == EK::kLit && e.kids[2]->lit.type == Type::kUndefined)
                return Value::undefined("the inline if expression evaluated to false and no else section was defined");
            return eval(*e.kids[2]);
        case EK::kBin: return binary_op(*this, e.name, eval(*e.kids[0]), eval(*e.kids[1]));
        case EK::kCompare: return eval_compare(e);
        case EK::kList: case EK::kTuple: {
            List l;
            for (const auto& k : e.kids) l.push_back(eval(*k));
            return e.kind == EK::kTuple ? make_tuple(std::move(l)) : Value::make_list(std::move(l));
        }
        case EK::kDict: {
            Dict d;
            for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
                std::string key = dict_key(eval(*e.kids[k]));
                Value v = eval(*e.kids[k + 1]);
                bool found = false;
                for (auto& kv : d) if (kv.first == key) { kv.second = v; found = true; }
                if (!found) d.emplace_back(key, std::move(v));
            }
            return Value::make_dict(std::move(d));
        }
    }
    fail("unknown expression");
}

Value Evaluator::eval_compare(const Expr& e) {
    Value left = eval(*e.kids[0]);
    for (size_t k = 0; k < e.kw.size(); ++k) {
        Value right = eval(*e.kids[k + 1]);
        const std::string& op = e.kw[k];
        bool r;
        if (op == "==") r = equal(left, right);
        else if (op == "!=") r = !equal(left, right);
        else if (op == "in" || op == "notin") r = contains(right, left) == (op == "in");
        else {
            int c = compare(left, right);
            r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
    }
    return Value::boolean(true);
}

Value Evaluator::eval_call(const Expr& e) {
    const Expr& callee = *e.kids[0];
    if (callee.kind == EK::kAttr) {  // obj.method(...)
        Value obj = eval(*callee.kids[0]);
        Value member = (obj.type == Type::kDict || obj.type == Type::kNamespace) ? attr(obj, callee.name) : Value{};
        Args a = eval_args(e, 1);
        if (member.type == Type::kCallable) return call(member, a);
        require_defined(obj);
        return call_method(*this, obj, callee.name, a);
    }
    if (callee.kind == EK::kName && callee.name == "loop") {  // loop(children) in a recursive loop
        Value loop = lookup("loop");
        if (loop.type == Type::kDict)
            if (const Value* r = dict_find(loop, "\x01recurse")) return call(*r, eval_args(e, 1));
    }
    Value fn = eval(callee);
    Args a = eval_args(e, 1);
    return call(fn, a);
}

Value Evaluator::attr(const Value& obj, const std::string& name) {
    switch (obj.type) {
        case Type::kDict: case Type::kNamespace:
            if (obj.type == Type::kDict && is_dict_method(name)) return bound_method(obj, name);
            if (const Value* v = dict_find(obj, name)) return *v;
            return Value::undefined(std::string("'") + type_name(obj) + " object' has no attribute '" + name + "'");
        case Type::kUndefined: require_defined(obj); return obj;
        case Type::kNone: return Value::undefined("'None' has no attribute '" + name + "'");
        default:
            if (has_method(obj, name)) return bound_method(obj, name);
            return Value::undefined(std::string("'") + type_name(obj) + " object' has no attribute '" + name + "'");
    }
}

Value Evaluator::index(const Value& obj, const Value& key) {
    switch (obj.type) {
        case Type::kDict: case Type::kNamespace:
            if (key.type != Type::kList && key.type != Type::kDict && key.type != Type::kUndefined) {
                if (const Value* v = dict_find(obj, dict_key(key))) return *v;
                if (key.type == Type::kString && obj.type == Type::kDict && is_dict_method(key.s))
                    return bound_method(obj, key.s);
            }
            return Value::undefined(std::string("'") + type_name(obj) + " object' has no attribute '" + to_str(key) + "'");
        case Type::kList: case Type::kString: {
            if (key.type == Type::kString) return attr(obj, key.s);
            if (key.type != Type::kInt && key.type != Type::kBool) break;
            if (obj.lazy) fail("'generator' object is not subscriptable");
            int64_t i = key.type == Type::kBool ? key.b : key.i;
            if (obj.type == Type::kList) {
                int64_t n = static_cast<int64_t>(obj.list->size());
                if (i < 0) i += n;
                if (i < 0 || i >= n) return Value::undefined(std::string("'") + type_name(obj) + " object' has no element " + std::to_string(key.i));
                return (*obj.list)[static_cast<size_t>(i)];
            }
            if (is_ascii(obj.s)) {
                int64_t n = static_cast<int64_t>(obj.s.size());
                if (i < 0) i += n;
                if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + std::to_string(key.i));
                return Value::str(std::string(1, obj.s[static_cast<size_t>(i)]));
            }
            std::vector<std::string> cps = code_points(obj.s);
            int64_t n = static_cast<int64_t>(cps.size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + std::to_string(key.i));
            return Value::str(cps[static_cast<size_t>(i)]);
        }
        case Type::kUndefined: require_defined(obj); break;
        case Type::kNone: return Value::undefined("'None' has no element " + to_str(key));
        default: break;
    }
    return Value::undefined(std::string("'") + type_name(obj) + " object' has no attribute '" + to_str(key) + "'");
}

Value Evaluator::slice(const Value& obj, const Expr& e) {
    Value bounds[3];
    for (int k = 0; k < 3; ++k) bounds[k] = e.kids[1 + k] ? eval(*e.kids[1 + k]) : Value::none();
    require_defined(obj);
    return slice_value(obj, bounds[0], bounds[1], bounds[2]);
}

}  // namespace

core::Result<std::string> render(const std::string& tmpl, const Dict& globals, const RenderLimits& limits) {
    int line = 0;
    try {
        Body body = parse_template(tmpl, limits.max_depth);
        Evaluator ev(globals, limits);
        try {
            return ev.render(body);
        } catch (...) {
            line = ev.line();
            throw;
        }
    } catch (const JinjaError& e) {
        int l = e.line ? e.line : line;
        return core::error(core::StatusCode::kInvalidArgument)
               << "chat template" << (l ? " line " + std::to_string(l) : std::string()) << ": " << e.msg;
    } catch (const LoopBreak&) {
        return core::error(core::StatusCode::kInvalidArgument) << "chat template: break outside a loop";
    } catch (const LoopContinue&) {
        return core::error(core::StatusCode::kInvalidArgument) << "chat template: continue outside a loop";
    } catch (const std::bad_alloc&) {
        return core::error(core::StatusCode::kOutOfMemory) << "chat template: out of memory";
    }
}

}  // namespace kiln::tokenizer::jinja
