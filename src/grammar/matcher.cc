#include "grammar/matcher.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <tuple>
#include <unordered_set>

#include "core/check.h"
#include "grammar/utf8_ranges.h"

namespace kiln::grammar {
namespace {

using K = Element::Kind;

void set_bit(std::vector<uint64_t>& m, int32_t i) { m[size_t(i) >> 6] |= uint64_t(1) << (i & 63); }
bool get_bit(const std::vector<uint64_t>& m, int32_t i) { return (m[size_t(i) >> 6] >> (i & 63)) & 1; }
int64_t count_bits(const std::vector<uint64_t>& m) {
    int64_t n = 0;
    for (uint64_t w : m) n += __builtin_popcountll(w);
    return n;
}
void sort_unique(std::vector<int32_t>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

TokenTable::TokenTable(std::vector<std::string> bytes, const std::vector<bool>& excluded,
                       std::vector<std::pair<int32_t, std::string>> first_bytes)
    : bytes_(std::move(bytes)), excluded_(bytes_.size(), false), first_bytes_(std::move(first_bytes)) {
    for (int32_t id = 0; id < int32_t(bytes_.size()); ++id) {
        excluded_[size_t(id)] = (size_t(id) < excluded.size() && excluded[size_t(id)]) ||
                                bytes_[size_t(id)].size() > kMaxTokenBytes || size_t(id) >= kMaxTokens;
        if (bytes_[size_t(id)].empty() || excluded_[size_t(id)]) continue;
        sorted_.push_back(id);
    }
    std::sort(first_bytes_.begin(), first_bytes_.end());
    std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
        const int c = bytes_[size_t(a)].compare(bytes_[size_t(b)]);
        return c != 0 ? c < 0 : a < b;
    });
    // Byte order is the trie's preorder: token j adds a node for each of its prefixes longer than the
    // prefix it shares with token j - 1 (none when it equals it), and closes the deeper ones before.
    std::vector<int32_t> path;  // the nodes of the current token's prefixes
    int32_t longest = 0;
    for (size_t j = 0; j < sorted_.size(); ++j) {
        const std::string& t = bytes_[size_t(sorted_[j])];
        size_t common = 0;
        if (j > 0) {
            const std::string& prev = bytes_[size_t(sorted_[j - 1])];
            while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
        }
        for (; path.size() > common; path.pop_back()) trie_[size_t(path.back())].end = int32_t(trie_.size());
        for (size_t d = path.size() + 1; d <= t.size(); ++d) {
            path.push_back(int32_t(trie_.size()));
            trie_.push_back({-1, uint32_t(j) << 8 | uint8_t(t[d - 1]), uint16_t(d), 0});
        }
        for (int32_t n : path) trie_[size_t(n)].longest = std::max(trie_[size_t(n)].longest, uint16_t(t.size()));
        longest = std::max(longest, int32_t(t.size()));
    }
    for (; !path.empty(); path.pop_back()) trie_[size_t(path.back())].end = int32_t(trie_.size());
    trie_.push_back({int32_t(trie_.size()), uint32_t(sorted_.size()) << 8, 0, uint16_t(longest)});
    length_.assign(bytes_.size(), 0);
    for (int32_t id : sorted_) length_[size_t(id)] = int32_t(bytes_[size_t(id)].size());
    root_child_.fill(-1);
    for (int32_t i = 0; i < num_nodes(); i = trie_[size_t(i)].end) root_child_[trie_[size_t(i)].byte()] = i;
    by_length_ = sorted_;
    std::stable_sort(by_length_.begin(), by_length_.end(),
                     [&](int32_t a, int32_t b) { return length_[size_t(a)] < length_[size_t(b)]; });
}

const std::vector<uint64_t>& TokenTable::shorter_than(size_t k) const {
    std::lock_guard<std::mutex> lock(short_mu_);
    auto [it, fresh] = short_.try_emplace(k);
    if (fresh) {
        it->second.assign((bytes_.size() + 63) / 64, 0);
        for (int32_t id : by_length_) {
            if (size_t(length_[size_t(id)]) >= k) break;
            it->second[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
        }
    }
    return it->second;
}

std::shared_ptr<TokenTable> token_table(const tokenizer::Tokenizer& tok, int32_t vocab_size) {
    const int32_t n = vocab_size > 0 ? vocab_size : tok.vocab_size();
    std::vector<std::string> bytes(static_cast<size_t>(n));
    std::vector<bool> excluded(static_cast<size_t>(n), true);
    std::vector<std::pair<int32_t, std::string>> first;
    for (int32_t id = 0; id < std::min(n, tok.vocab_size()); ++id) {
        excluded[size_t(id)] = tok.is_special(id);
        bytes[size_t(id)] = tok.piece(id, /*skip_special=*/false, /*first=*/false);
        std::string f = tok.piece(id, /*skip_special=*/false, /*first=*/true);
        if (f != bytes[size_t(id)]) first.emplace_back(id, std::move(f));
    }
    return std::make_shared<TokenTable>(std::move(bytes), excluded, std::move(first));
}

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenTable> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)) {
    nodes_.push_back({-1, -1});  // kDone
    nodes_.push_back({-1, -1});  // kContext
    closure_of_.assign(2, -1);
    succ_of_.assign(2, -1);
    single_set_.assign(2, -1);
    intern_set({});  // kDead
    const int32_t cap = vocab_->longest() + 2;
    canon_.resize(g_.elements.size());
    for (size_t p = 0; p < canon_.size(); ++p) canon_[p] = int32_t(p);
    // Chains are made in rank order (R_(k-1) before R_k): one pass in id order finds each chain
    // rule's bottom (R_1), and each chain's top rank.
    const size_t num_chain_rules = std::min(g_.rules.size(), g_.chain_rank.size());
    std::vector<int32_t> bottom(g_.rules.size(), -1), up(g_.rules.size(), -1), top_rank(g_.rules.size(), 0);
    for (size_t r = 0; r < num_chain_rules; ++r) {
        if (g_.chain_rank[r] == 0) continue;
        const int32_t next = g_.chain_next[r];
        bottom[r] = next >= 0 ? bottom[size_t(next)] : int32_t(r);
        if (next >= 0) up[size_t(next)] = int32_t(r);
        top_rank[size_t(bottom[r])] = std::max(top_rank[size_t(bottom[r])], g_.chain_rank[r]);
    }
    // Every chain over the same unit (a string's character, say) classifies tokens alike at the same
    // rank: the frames a key holds are the chain's own rules, all of one shape, and what lies below
    // them is the context marker. So each rank maps to that rank of the longest such chain (capped:
    // past the longest token + 2 no token reaches a chain's end, so those ranks are one), and the
    // strings of a schema share their walks.
    std::map<std::pair<int, int32_t>, int32_t> longest_chain;  // unit (kind, value) -> its bottom
    for (size_t b = 0; b < num_chain_rules; ++b) {
        if (g_.chain_rank[b] != 1) continue;
        const Element& unit = g_.elements[size_t(g_.rules[b][0])];
        auto [it, fresh] = longest_chain.try_emplace({int(unit.kind), unit.value}, int32_t(b));
        if (!fresh && top_rank[b] > top_rank[size_t(it->second)]) it->second = int32_t(b);
    }
    std::map<int32_t, std::vector<int32_t>> ranks;  // a longest chain's bottom -> its rules by rank - 1
    for (const auto& [unit, b] : longest_chain)
        for (int32_t r = b; r >= 0; r = up[size_t(r)]) ranks[b].push_back(r);
    std::vector<int32_t> canon_rule(g_.rules.size());
    for (size_t r = 0; r < g_.rules.size(); ++r) canon_rule[r] = int32_t(r);
    for (size_t r = 0; r < num_chain_rules; ++r) {
        if (g_.chain_rank[r] == 0) continue;
        const Element& unit = g_.elements[size_t(g_.rules[size_t(bottom[r])][0])];
        const std::vector<int32_t>& to = ranks[longest_chain[{int(unit.kind), unit.value}]];
        canon_rule[r] = to[size_t(std::min(g_.chain_rank[r], cap)) - 1];
    }
    // Then any two positions whose alternatives go on alike to their ends (the same elements, calls
    // to the same canonical rules) in rules of the same rank (0: not a chain) are one: the closing
    // quote after one string's characters is the closing quote after another's. Each position is
    // (its element, the rest's canonical position), made from an alternative's end backwards.
    std::map<std::tuple<int32_t, int, int32_t, int32_t>, int32_t> same;  // (rank, kind, value, next) -> position
    for (size_t r = 0; r < g_.rules.size(); ++r) {
        const int32_t rank = r < g_.chain_rank.size() ? std::min(g_.chain_rank[r], cap) : 0;
        for (int32_t start : g_.rules[r]) {
            int32_t end = start;
            while (g_.elements[size_t(end)].kind != K::kEnd) ++end;
            int32_t next = -1;  // the canonical position after this one (-1: the alternative's end)
            for (int32_t p = end - 1; p >= start; --p) {
                const Element& e = g_.elements[size_t(p)];
                const int32_t value = e.kind == K::kRule ? canon_rule[size_t(e.value)] : e.value;
                next = canon_[size_t(p)] = same.try_emplace({rank, int(e.kind), value, next}, p).first->second;
            }
        }
    }
    pos_rule_.assign(g_.elements.size(), -1);
    pos_alt_.assign(g_.elements.size(), 0);
    pos_off_.assign(g_.elements.size(), 0);
    for (size_t r = 0; r < g_.rules.size(); ++r)
        for (size_t a = 0; a < g_.rules[r].size(); ++a)
            for (int32_t p = g_.rules[r][a], o = 0; g_.elements[size_t(p)].kind != K::kEnd; ++p, ++o)
                pos_rule_[size_t(p)] = int32_t(r), pos_alt_[size_t(p)] = int32_t(a), pos_off_[size_t(p)] = o;
    const std::vector<bool> nullable = nullable_rules(g_);
    chain_top_.assign(g_.rules.size(), -1);
    chain_ok_.assign(g_.rules.size(), false);
    for (size_t r = 0; r < num_chain_rules; ++r) {
        if (g_.chain_rank[r] == 0) continue;
        const Element& unit = g_.elements[size_t(g_.rules[r][0])];
        chain_ok_[r] = unit.kind == K::kBytes || !nullable[size_t(unit.value)];
    }
    // A chain's ranks are made in order (R_(k+1) after R_k): from the last rule down, each takes its
    // successor's top while that is within the cap.
    for (size_t r = num_chain_rules; r-- > 0;) {
        if (g_.chain_rank[r] == 0) continue;
        const int32_t u = up[r];
        chain_top_[r] = u >= 0 && g_.chain_rank[size_t(u)] <= cap ? chain_top_[size_t(u)] : int32_t(r);
    }
}

std::shared_ptr<CompiledGrammar> CompiledGrammar::compile(Grammar g, std::shared_ptr<const TokenTable> vocab,
                                                          int warm_up_tokens, double warm_up_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<CompiledGrammar> c(new CompiledGrammar(std::move(g), std::move(vocab)));
    // The first mask is part of compiling: a request's first token does not wait for it.
    const int32_t start = c->initial_state();
    c->fill_mask(start, c->first_mask_);
    {
        std::lock_guard<std::mutex> lock(c->mu_);
        for (const auto& [id, bytes] : c->vocab_->first_bytes()) {
            // A first token with no bytes (SPM's lone dummy-prefix piece) adds nothing: allowed.
            const bool ok = !c->vocab_->excluded(id) && (bytes.empty() || c->walk(start, bytes) != kDead);
            uint64_t& w = c->first_mask_[size_t(id) >> 6];
            w = ok ? w | (uint64_t(1) << (id & 63)) : w & ~(uint64_t(1) << (id & 63));
        }
    }
    warm_up(c, t0, warm_up_tokens, warm_up_seconds);
    c->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return c;
}

void CompiledGrammar::warm_up(const std::shared_ptr<CompiledGrammar>& c, std::chrono::steady_clock::time_point t0,
                              int max_tokens, double max_seconds) {
    auto spent = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    std::mt19937_64 rng(kWarmUpSeed);
    std::vector<uint64_t> mask;
    int tokens = 0;
    while (tokens < max_tokens && spent() < max_seconds) {
        Matcher m(c);
        const int before = tokens;
        while (tokens < max_tokens && spent() < max_seconds && !m.must_end()) {
            m.fill_mask(mask);
            const int64_t count = count_bits(mask);
            if (count == 0) break;
            // The pick-th allowed token, uniformly.
            int64_t pick = int64_t(rng() % uint64_t(count));
            size_t w = 0;
            for (; pick >= __builtin_popcountll(mask[w]); ++w) pick -= __builtin_popcountll(mask[w]);
            uint64_t bits = mask[w];
            for (; pick > 0; --pick) bits &= bits - 1;
            ++tokens;
            if (!m.accept_token(int32_t(w * 64 + size_t(__builtin_ctzll(bits))))) break;
        }
        if (tokens == before) break;  // no text to walk (a grammar of the empty string alone)
    }
    // The states of random texts are not the ones a model's text meets (their masks are cheap to
    // make again from the positions' classes): only the positions' classes are kept.
    std::lock_guard<std::mutex> lock(c->mu_);
    c->masks_.clear();
}

CompiledGrammar::Stats CompiledGrammar::stats() const {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    Stats s;
    s.positions = int64_t(positions_.size());
    s.table_bytes = int64_t(position_bytes_ + masks_.size() * size_t(mask_words()) * 8);
    s.stacks = int64_t(nodes_.size());
    s.sets = int64_t(sets_.size());
    for (const auto& [pos, pm] : positions_) s.context_dependent += int64_t(pm.depends.size());
    s.cached_masks = int64_t(masks_.size());
    s.compile_seconds = compile_seconds_;
    return s;
}

int32_t CompiledGrammar::intern(int32_t parent, int32_t pos) {
    const uint64_t key = (uint64_t(uint32_t(parent)) << 32) | uint32_t(pos);
    auto [it, fresh] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
    if (fresh) {
        nodes_.push_back({parent, pos});
        closure_of_.push_back(-1);
        succ_of_.push_back(-1);
        single_set_.push_back(-1);
    }
    return it->second;
}

// Every stack reachable from `stack` by expanding calls (no byte consumed) whose top is a byte class,
// plus kDone / kContext when the calls can return all the way down. Loops through rules that match
// the empty string revisit a stack and stop there (check_grammar refuses the ones that would grow).
const std::vector<int32_t>& CompiledGrammar::closure(int32_t stack) {
    if (int32_t c = closure_of_[size_t(stack)]; c >= 0) return results_[size_t(c)];
    std::vector<int32_t> out, todo = {stack};
    std::unordered_set<int32_t> seen;
    while (!todo.empty()) {
        const int32_t s = todo.back();
        todo.pop_back();
        if (!seen.insert(s).second) continue;
        if (s == kDone || s == kContext) {
            out.push_back(s);
            continue;
        }
        const Node n = nodes_[size_t(s)];
        const Element& e = g_.elements[size_t(n.pos)];
        if (e.kind == K::kBytes) {
            out.push_back(s);
            continue;
        }
        // A call: the caller continues after it (nothing pushed when the call ends its alternative).
        const int32_t base = g_.elements[size_t(n.pos) + 1].kind == K::kEnd ? n.parent : intern(n.parent, n.pos + 1);
        for (int32_t start : g_.rules[size_t(e.value)])
            todo.push_back(g_.elements[size_t(start)].kind == K::kEnd ? base : intern(base, start));
    }
    sort_unique(out);
    closure_of_[size_t(stack)] = int32_t(results_.size());
    results_.push_back(std::move(out));
    return results_.back();
}

// A stack whose top is a byte class moves the same way on every byte of the class: one successor
// set per stack, kept beside it (no hashing on this path: the vocabulary walks live here).
const std::vector<int32_t>& CompiledGrammar::step(int32_t stack, uint8_t byte) {
    static const std::vector<int32_t> kNone;
    const Node n = nodes_[size_t(stack)];
    if (!g_.byte_sets[size_t(g_.elements[size_t(n.pos)].value)][byte]) return kNone;
    if (int32_t c = succ_of_[size_t(stack)]; c >= 0) return results_[size_t(c)];
    const bool last = g_.elements[size_t(n.pos) + 1].kind == K::kEnd;
    const int32_t target = last ? n.parent : intern(n.parent, n.pos + 1);
    const std::vector<int32_t>& next = closure(target);
    succ_of_[size_t(stack)] = closure_of_[size_t(target)];
    return next;
}

int32_t CompiledGrammar::intern_set(const std::vector<int32_t>& stacks) {
    // Most sets hold one stack (a walk from one position rarely forks): those are found by index.
    int32_t* single = stacks.size() == 1 ? &single_set_[size_t(stacks[0])] : nullptr;
    if (single && *single >= 0) return *single;
    const std::string_view key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
    int32_t id = -1;
    if (single) {
        id = *single = int32_t(sets_.size());
    } else if (auto it = set_ids_.find(key); it != set_ids_.end()) {
        return it->second;
    } else {
        id = set_ids_.emplace(std::string(key), int32_t(sets_.size())).first->second;
    }
    sets_.push_back(stacks);
    set_has_context_.push_back(std::binary_search(stacks.begin(), stacks.end(), kContext));
    const bool byte_top = single && stacks[0] != kDone && stacks[0] != kContext;
    set_class_.push_back(byte_top ? g_.elements[size_t(nodes_[size_t(stacks[0])].pos)].value : -1);
    set_next_.push_back(-1);
    set_table_.push_back(-1);
    return id;
}

int32_t CompiledGrammar::new_transition(int32_t set, uint8_t byte) {
    if (set_class_[size_t(set)] >= 0) {  // one stack; the byte is in its class (next_set checked)
        const int32_t id = intern_set(step(sets_[size_t(set)][0], byte));
        set_next_[size_t(set)] = id;
        return id;
    }
    std::vector<int32_t>& to = scratch_;
    to.clear();
    int matched = 0;
    for (int32_t s : sets_[size_t(set)]) {
        if (s == kDone || s == kContext) continue;
        const std::vector<int32_t>& next = step(s, byte);
        if (next.empty()) continue;
        ++matched;
        to.insert(to.end(), next.begin(), next.end());
    }
    if (matched > 1) sort_unique(to);
    const int32_t id = intern_set(to);
    if (set_table_[size_t(set)] < 0) {
        set_table_[size_t(set)] = int32_t(trans_.size());
        trans_.emplace_back().fill(-1);
    }
    trans_[size_t(set_table_[size_t(set)])][byte] = id;
    return id;
}

int32_t CompiledGrammar::walk(int32_t set, std::string_view bytes) {
    for (unsigned char b : bytes) {
        set = next_set(set, b);
        if (set == kDead) return kDead;
    }
    return set;
}

const CompiledGrammar::PositionMask& CompiledGrammar::position_mask(int32_t stack) {
    int32_t chain[kFrames];
    int n = 0;
    int32_t below = stack;
    for (; n < kFrames && below != kDone; below = nodes_[size_t(below)].parent)
        chain[n++] = canon_[size_t(nodes_[size_t(below)].pos)];
    return mask_for(chain, n, below == kDone);
}

constexpr int32_t kMinDerived = 8;

const CompiledGrammar::PositionMask& CompiledGrammar::mask_for(const int32_t* chain, int n, bool done) {
    // Key: the positions, then whether the stack ends there (then nothing depends on a context).
    std::string key(reinterpret_cast<const char*>(chain), size_t(n) * sizeof(int32_t));
    key += done ? 'w' : 'c';
    if (auto it = positions_.find(key); it != positions_.end()) return it->second;
    int32_t start = done ? kDone : kContext;
    for (int i = n - 1; i >= 0; --i) start = intern(start, chain[i]);
    // A frame in a bounded chain R_k below the chain's top rank: the same key at the top classifies
    // every token shorter than k bytes; walk only the rest.
    int frame = -1;
    size_t k = 0;
    const ByteSet& first = g_.byte_sets[size_t(g_.elements[size_t(chain[0])].value)];
    // A broad class from kMinDerived up: below it most tokens are long enough to need their own
    // walk anyway. A narrow one (a UTF-8 lead byte, a literal) from rank 2: its tokens are few, and
    // often all shorter than k (then the top's classes are the whole answer).
    const int32_t min_rank = first.count() >= 32 ? kMinDerived : 2;
    for (int i = 0; i < n && frame < 0; ++i) {
        const int32_t r = pos_rule_[size_t(chain[i])];
        // (Ranks past the cap are R_cap's positions already, by canon_: the top itself.)
        if (r >= 0 && size_t(r) < g_.chain_rank.size() && g_.chain_rank[size_t(r)] >= min_rank &&
            chain_ok_[size_t(r)] && chain_top_[size_t(r)] != r)
            frame = i, k = size_t(g_.chain_rank[size_t(r)]);
    }
    PositionMask pm;
    if (frame < 0) {
        pm = precompute(start);
    } else {
        int32_t up[kFrames];
        std::copy(chain, chain + n, up);
        const int32_t p = chain[frame], r = chain_top_[size_t(pos_rule_[size_t(p)])];
        up[frame] = canon_[size_t(g_.rules[size_t(r)][size_t(pos_alt_[size_t(p)])] + pos_off_[size_t(p)])];
        const PositionMask& base = mask_for(up, n, done);  // a reference into positions_ (stable)
        const TokenTable& vt = *vocab_;
        // The tokens the start can take begin with a byte of `first`: the longest of them.
        int32_t longest = 0;
        for (int b = 0; b < 256; ++b)
            if (first[size_t(b)] && vt.root_child(b) >= 0)
                longest = std::max(longest, int32_t(vt.trie()[size_t(vt.root_child(b))].longest));
        if (size_t(longest) < k) {
            pm = base;
        } else {
            derive(base, precompute(start, k), k, pm);
        }
    }
    position_bytes_ += pm.bits.size() * 8 + (pm.ids.size() + pm.depends.size()) * 4 + key.size() + 64;
    return positions_.emplace(key, std::move(pm)).first->second;
}

// The classes from R_k: the base's (the chain's top) for the tokens shorter than k bytes, the walk's
// (`longer`, the tokens of at least k bytes from R_k) for the rest.
void CompiledGrammar::derive(const PositionMask& base, const PositionMask& longer, size_t k, PositionMask& pm) {
    const TokenTable& vt = *vocab_;
    auto is_short = [&](int32_t id) { return size_t(vt.length(id)) < k; };
    for (int32_t id : base.depends)
        if (is_short(id)) pm.depends.push_back(id);
    pm.depends.insert(pm.depends.end(), longer.depends.begin(), longer.depends.end());
    if (base.bits.empty() && longer.bits.empty()) {  // both lists (narrow classes): no bitmap needed
        for (int32_t id : base.ids)
            if (is_short(id)) pm.ids.push_back(id);
        pm.ids.insert(pm.ids.end(), longer.ids.begin(), longer.ids.end());
        return;
    }
    const std::vector<uint64_t>& shorter = vt.shorter_than(k);
    std::vector<uint64_t> bits(size_t(mask_words()), 0);
    if (!base.bits.empty()) {
        for (size_t w = 0; w < bits.size(); ++w) bits[w] = base.bits[w] & shorter[w];
    } else {
        for (int32_t id : base.ids)
            if (is_short(id)) set_bit(bits, id);
    }
    if (!longer.bits.empty()) {
        for (size_t w = 0; w < bits.size(); ++w) bits[w] |= longer.bits[w];
    } else {
        for (int32_t id : longer.ids) set_bit(bits, id);
    }
    if (count_bits(bits) * 32 > vt.vocab_size()) {
        pm.bits = std::move(bits);
    } else {
        for (size_t w = 0; w < bits.size(); ++w)
            for (uint64_t m = bits[w]; m; m &= m - 1) pm.ids.push_back(int32_t(w * 64 + size_t(__builtin_ctzll(m))));
    }
}

// A walk of the vocabulary's trie from `start`: a node's state is its parent's stepped by its byte
// (one table lookup once the transition is known); a dead node's whole subtree is skipped, its
// tokens context-dependent when some state on the way held the context marker (the frames returned
// with bytes left), rejected otherwise. min_len > 0: only the tokens of at least min_len bytes
// (subtrees with none are skipped too).
CompiledGrammar::PositionMask CompiledGrammar::precompute(int32_t start, size_t min_len) {
    const TokenTable& vt = *vocab_;
    const std::vector<TokenTable::TrieNode>& trie = vt.trie();
    const std::vector<int32_t>& sorted = vt.sorted();
    // walk_sets_[d] / walk_hit_[d]: the state after the current node's first d bytes, and whether a
    // state before it held kContext.
    walk_sets_.assign(size_t(vt.longest()) + 1, kDead);
    walk_hit_.assign(size_t(vt.longest()) + 1, 0);
    walk_sets_[0] = intern_set({start});
    // Accepted tokens as a list while few (most walks), as a bitmap once many.
    PositionMask pm;
    const size_t many = size_t(vt.vocab_size() / 32);
    auto accept = [&](int32_t id) {
        if (!pm.bits.empty()) return set_bit(pm.bits, id);
        pm.ids.push_back(id);
        if (pm.ids.size() <= many) return;
        pm.bits.assign(size_t(mask_words()), 0);
        for (int32_t x : pm.ids) set_bit(pm.bits, x);
        pm.ids = {};
    };
    const int32_t min = int32_t(min_len);
    // First bytes the start refuses are skipped without reading their nodes (most positions are a
    // literal's byte); the subtrees of the others are walked node by node. Their tokens are rejected:
    // the start is a real position over the marker, not the marker itself.
    KILN_CHECK(!set_has_context_[size_t(walk_sets_[0])]);
    int b = 0, i = 0, subtree_end = 0;
    while (true) {
        if (i >= subtree_end) {
            while (b < 256 && (vt.root_child(b) < 0 || next_set(walk_sets_[0], uint8_t(b)) == kDead)) ++b;
            if (b == 256) break;
            i = vt.root_child(b++);
            subtree_end = trie[size_t(i)].end;
        }
        const TokenTable::TrieNode& node = trie[size_t(i)];
        if (node.longest < min) {
            i = node.end;
            continue;
        }
        const int32_t parent = walk_sets_[size_t(node.depth - 1)];
        const char hit = walk_hit_[size_t(node.depth - 1)] | set_has_context_[size_t(parent)];
        const int32_t set = next_set(parent, node.byte());
        if (set == kDead) {
            if (hit)
                for (int32_t k = node.tok(), e = trie[size_t(node.end)].tok(); k < e; ++k)
                    if (vt.length(sorted[size_t(k)]) >= min) pm.depends.push_back(sorted[size_t(k)]);
            i = node.end;
            continue;
        }
        walk_sets_[size_t(node.depth)] = set;
        walk_hit_[size_t(node.depth)] = hit;
        if (node.depth >= min)
            for (int32_t k = node.tok(), e = trie[size_t(i) + 1].tok(); k < e; ++k) accept(sorted[size_t(k)]);
        ++i;
    }
    return pm;
}

int32_t CompiledGrammar::initial_state() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t> state;
    for (int32_t start : g_.rules[size_t(g_.root)]) {
        if (g_.elements[size_t(start)].kind == K::kEnd) {
            state.push_back(kDone);
            continue;
        }
        const std::vector<int32_t>& c = closure(intern(kDone, start));
        state.insert(state.end(), c.begin(), c.end());
    }
    sort_unique(state);
    return intern_set(state);
}

void CompiledGrammar::fill_mask(int32_t set, std::vector<uint64_t>& mask) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = masks_.find(set); it != masks_.end()) {
        mask = it->second;
        return;
    }
    // Bounded memory: the caches start over rather than grow past kCacheBytes each (the position
    // tables are only referred to within this call, so dropping them here is safe).
    const size_t mask_bytes = size_t(mask_words()) * 8;
    if (position_bytes_ > kCacheBytes) positions_.clear(), position_bytes_ = 0;
    if (masks_.size() * mask_bytes > kCacheBytes) masks_.clear();
    mask.assign(size_t(mask_words()), 0);
    const std::vector<int32_t> stacks = sets_[size_t(set)];  // a copy: interning below may grow sets_
    std::vector<const PositionMask*> pms;
    for (int32_t s : stacks) {
        if (s == kDone) continue;
        const PositionMask& pm = position_mask(s);
        pms.push_back(&pm);
        if (!pm.bits.empty())
            for (size_t w = 0; w < mask.size(); ++w) mask[w] |= pm.bits[w];
        for (int32_t id : pm.ids) set_bit(mask, id);
    }
    size_t k = 0;
    for (int32_t s : stacks) {
        if (s == kDone) continue;
        const int32_t alone = intern_set({s});
        for (int32_t id : pms[k]->depends)
            if (!get_bit(mask, id) && walk(alone, vocab_->bytes(id)) != kDead) set_bit(mask, id);
        ++k;
    }
    masks_.emplace(set, mask);
}

Matcher::Matcher(std::shared_ptr<CompiledGrammar> grammar) : g_(std::move(grammar)), state_(g_->initial_state()) {}

void Matcher::fill_mask(std::vector<uint64_t>& mask) const {
    if (first_) mask = g_->first_mask_;
    else g_->fill_mask(state_, mask);
}

bool Matcher::accept_token(int32_t id) {
    const TokenTable& vt = g_->vocab();
    if (id < 0 || id >= vt.vocab_size() || vt.excluded(id)) return false;
    const std::string* bytes = &vt.bytes(id);
    if (first_) {
        const auto& fb = vt.first_bytes();
        auto it = std::lower_bound(fb.begin(), fb.end(), std::make_pair(id, std::string()));
        if (it != fb.end() && it->first == id) {
            if (it->second.empty()) {  // nothing added; the next token is no longer the first
                first_ = false;
                return true;
            }
            bytes = &it->second;
        }
    }
    return !bytes->empty() && accept_bytes(*bytes);
}

bool Matcher::accept_bytes(std::string_view bytes) {
    std::lock_guard<std::mutex> lock(g_->mu_);
    const int32_t next = g_->walk(state_, bytes);
    if (next == CompiledGrammar::kDead) return false;
    state_ = next;
    first_ = false;
    return true;
}

bool Matcher::can_end() const {
    std::lock_guard<std::mutex> lock(g_->mu_);
    const std::vector<int32_t>& s = g_->sets_[size_t(state_)];
    return !s.empty() && s.front() == CompiledGrammar::kDone;
}

bool Matcher::must_end() const {
    std::lock_guard<std::mutex> lock(g_->mu_);
    const std::vector<int32_t>& s = g_->sets_[size_t(state_)];
    return s.size() == 1 && s.front() == CompiledGrammar::kDone;
}

}  // namespace kiln::grammar
