// check_grammar (utf8_ranges.h) and full_match (gbnf.h): the static checks a top-down matcher needs,
// and the plain reference matcher the fast one (matcher.h) is tested against.
#include <functional>
#include <set>

#include "grammar/gbnf.h"
#include "grammar/utf8_ranges.h"

namespace kiln::grammar {
namespace {

using K = Element::Kind;

// Rules r for which some alternative has every element satisfying `ok` (a fixpoint).
std::vector<bool> fixpoint(const Grammar& g, const std::function<bool(const Element&, const std::vector<bool>&)>& ok) {
    std::vector<bool> yes(g.rules.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g.rules.size(); ++r) {
            if (yes[r]) continue;
            for (int32_t start : g.rules[r]) {
                bool all = true;
                for (int32_t p = start; g.elements[size_t(p)].kind != K::kEnd && all; ++p) all = ok(g.elements[size_t(p)], yes);
                if (all) {
                    yes[r] = changed = true;
                    break;
                }
            }
        }
    }
    return yes;
}

}  // namespace

std::vector<bool> nullable_rules(const Grammar& g) {
    return fixpoint(g, [](const Element& e, const std::vector<bool>& y) { return e.kind == K::kRule && y[size_t(e.value)]; });
}

core::Status check_grammar(const Grammar& g) {
    const std::vector<bool> nullable = nullable_rules(g);
    const std::vector<bool> productive =
        fixpoint(g, [](const Element& e, const std::vector<bool>& y) { return e.kind == K::kBytes || y[size_t(e.value)]; });
    // Rules reachable from root; calls made before any byte is consumed ("left calls"), and whether
    // something is left to do after them (a left call that leaves work grows the stack when it cycles).
    std::vector<bool> reached(g.rules.size(), false);
    std::vector<std::vector<std::pair<int32_t, bool>>> left(g.rules.size());
    std::vector<int32_t> todo = {g.root};
    reached[size_t(g.root)] = true;
    while (!todo.empty()) {
        const int32_t r = todo.back();
        todo.pop_back();
        for (int32_t start : g.rules[size_t(r)]) {
            bool prefix_nullable = true;
            for (int32_t p = start; g.elements[size_t(p)].kind != K::kEnd; ++p) {
                const Element& e = g.elements[size_t(p)];
                if (e.kind != K::kRule) {
                    prefix_nullable = false;
                    continue;
                }
                if (!reached[size_t(e.value)]) reached[size_t(e.value)] = true, todo.push_back(e.value);
                if (prefix_nullable) left[size_t(r)].emplace_back(e.value, g.elements[size_t(p) + 1].kind != K::kEnd);
                prefix_nullable = prefix_nullable && nullable[size_t(e.value)];
            }
        }
    }
    // x{m,n} over an x that can match nothing: the chain's stacks all lie one empty step apart, so
    // every state holds n - m of them, and nested such repetitions multiply.
    constexpr int32_t kMaxNullableChain = 32;
    for (size_t r = 0; r < g.rules.size() && r < g.chain_rank.size(); ++r) {
        if (!reached[r] || g.chain_rank[r] <= kMaxNullableChain) continue;
        const Element& unit = g.elements[size_t(g.rules[r][0])];
        if (unit.kind == K::kRule && nullable[size_t(unit.value)])
            return core::error(core::StatusCode::kInvalidArgument)
                   << "grammar rule '" << g.rule_names[r] << "' repeats something that can be empty more than "
                   << kMaxNullableChain << " times: make the repeated part non-empty, or use * instead of {m,n}";
    }
    for (size_t r = 0; r < g.rules.size(); ++r) {
        if (reached[r] && !productive[r])
            return core::error(core::StatusCode::kInvalidArgument)
                   << "grammar rule '" << g.rule_names[r] << "' can never finish (every alternative needs itself again)";
    }
    // A left call r -> s with work left after it is left recursion when s can left-call back to r.
    for (size_t r = 0; r < g.rules.size(); ++r) {
        for (const auto& [callee, leaves_work] : left[r]) {
            if (!leaves_work) continue;
            std::vector<bool> seen(g.rules.size(), false);
            std::vector<int32_t> stack = {callee};
            while (!stack.empty()) {
                const int32_t x = stack.back();
                stack.pop_back();
                if (size_t(x) == r)
                    return core::error(core::StatusCode::kInvalidArgument)
                           << "grammar rule '" << g.rule_names[r] << "' is left-recursive (not supported: rewrite it with repetition)";
                if (seen[size_t(x)]) continue;
                seen[size_t(x)] = true;
                for (const auto& edge : left[size_t(x)]) stack.push_back(edge.first);
            }
        }
    }
    return core::Status::ok();
}

namespace {

using Stack = std::vector<int32_t>;  // element offsets, top last

// Every stack reachable from `s` without consuming a byte whose top is a byte class (or empty: done).
void closure(const Grammar& g, Stack s, std::set<Stack>& out) {
    std::set<Stack> seen;
    std::vector<Stack> todo = {std::move(s)};
    while (!todo.empty()) {
        Stack st = std::move(todo.back());
        todo.pop_back();
        if (!seen.insert(st).second) continue;
        if (st.empty() || g.elements[size_t(st.back())].kind == K::kBytes) {
            out.insert(st);
            continue;
        }
        const int32_t pos = st.back();
        st.pop_back();
        const Element& e = g.elements[size_t(pos)];
        if (e.kind == K::kEnd) {
            todo.push_back(st);
            continue;
        }
        if (g.elements[size_t(pos) + 1].kind != K::kEnd) st.push_back(pos + 1);
        for (int32_t start : g.rules[size_t(e.value)]) {
            Stack next = st;
            if (g.elements[size_t(start)].kind != K::kEnd) next.push_back(start);
            todo.push_back(std::move(next));
        }
    }
}

}  // namespace

bool full_match(const Grammar& g, std::string_view text) {
    std::set<Stack> states;
    for (int32_t start : g.rules[size_t(g.root)]) closure(g, g.elements[size_t(start)].kind == K::kEnd ? Stack{} : Stack{start}, states);
    for (unsigned char b : text) {
        std::set<Stack> next;
        for (const Stack& st : states) {
            if (st.empty() || !g.byte_sets[size_t(g.elements[size_t(st.back())].value)][b]) continue;
            Stack s = st;
            const int32_t pos = s.back();
            s.pop_back();
            if (g.elements[size_t(pos) + 1].kind != K::kEnd) s.push_back(pos + 1);
            closure(g, std::move(s), next);
        }
        if (next.empty()) return false;
        states = std::move(next);
    }
    return states.count(Stack{}) > 0;
}

}  // namespace kiln::grammar
