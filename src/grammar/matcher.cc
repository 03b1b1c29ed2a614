#include "grammar/matcher.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "core/check.h"
#include "grammar/utf8_ranges.h"

namespace kiln::grammar {
namespace {

using K = Element::Kind;

void set_bit(std::vector<uint64_t>& m, int32_t i) { m[size_t(i) >> 6] |= uint64_t(1) << (i & 63); }
bool get_bit(const std::vector<uint64_t>& m, int32_t i) { return (m[size_t(i) >> 6] >> (i & 63)) & 1; }
void sort_unique(std::vector<int32_t>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

TokenTable::TokenTable(std::vector<std::string> bytes, const std::vector<bool>& excluded,
                       std::vector<std::pair<int32_t, std::string>> first_bytes)
    : bytes_(std::move(bytes)), excluded_(bytes_.size(), false), first_bytes_(std::move(first_bytes)) {
    for (int32_t id = 0; id < int32_t(bytes_.size()); ++id) {
        excluded_[size_t(id)] = size_t(id) < excluded.size() && excluded[size_t(id)];
        if (bytes_[size_t(id)].empty() || excluded_[size_t(id)]) continue;
        sorted_.push_back(id);
    }
    std::sort(first_bytes_.begin(), first_bytes_.end());
    std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
        const int c = bytes_[size_t(a)].compare(bytes_[size_t(b)]);
        return c != 0 ? c < 0 : a < b;
    });
    for (int b = 0, i = 0; b <= 256; ++b) {
        while (i < int(sorted_.size()) && uint8_t(bytes_[size_t(sorted_[size_t(i)])][0]) < b) ++i;
        first_begin_[size_t(b)] = i;
    }
    lcp_.assign(sorted_.size(), 0);
    for (size_t i = 1; i < sorted_.size(); ++i) {
        const std::string& a = bytes_[size_t(sorted_[i - 1])];
        const std::string& b = bytes_[size_t(sorted_[i])];
        size_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        lcp_[i] = int32_t(n);
    }
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
    intern_set({});  // kDead
    size_t longest = 0;
    for (int32_t id : vocab_->sorted()) longest = std::max(longest, vocab_->bytes(id).size());
    const int32_t cap = int32_t(longest) + 2;
    cap_ = cap;
    canon_.resize(g_.elements.size());
    for (size_t p = 0; p < canon_.size(); ++p) canon_[p] = int32_t(p);
    // Chains are made in rank order (R_(k-1) before R_k), so one pass in id order finds each rule's
    // canonical rule from its successor's.
    std::vector<int32_t> canon_rule(g_.rules.size());
    for (size_t r = 0; r < g_.rules.size(); ++r) {
        const bool deep = r < g_.chain_rank.size() && g_.chain_rank[r] > cap;
        canon_rule[r] = deep ? canon_rule[size_t(g_.chain_next[r])] : int32_t(r);
        if (!deep) continue;
        const int32_t c = canon_rule[r];
        for (size_t a = 0; a < g_.rules[r].size(); ++a)
            for (int32_t p = g_.rules[r][a], q = g_.rules[size_t(c)][a]; g_.elements[size_t(p)].kind != K::kEnd; ++p, ++q)
                canon_[size_t(p)] = q;
    }
    pos_rule_.assign(g_.elements.size(), -1);
    pos_alt_.assign(g_.elements.size(), 0);
    pos_off_.assign(g_.elements.size(), 0);
    for (size_t r = 0; r < g_.rules.size(); ++r)
        for (size_t a = 0; a < g_.rules[r].size(); ++a)
            for (int32_t p = g_.rules[r][a], o = 0; g_.elements[size_t(p)].kind != K::kEnd; ++p, ++o)
                pos_rule_[size_t(p)] = int32_t(r), pos_alt_[size_t(p)] = int32_t(a), pos_off_[size_t(p)] = o;
    const std::vector<bool> nullable = nullable_rules(g_);
    chain_up_.assign(g_.rules.size(), -1);
    chain_ok_.assign(g_.rules.size(), false);
    for (size_t r = 0; r < g_.rules.size() && r < g_.chain_rank.size(); ++r) {
        if (g_.chain_rank[r] == 0) continue;
        if (g_.chain_next[r] >= 0) chain_up_[size_t(g_.chain_next[r])] = int32_t(r);
        const Element& unit = g_.elements[size_t(g_.rules[r][0])];
        chain_ok_[r] = unit.kind == K::kBytes || !nullable[size_t(unit.value)];
    }
}

std::shared_ptr<CompiledGrammar> CompiledGrammar::compile(Grammar g, std::shared_ptr<const TokenTable> vocab) {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<CompiledGrammar> c(new CompiledGrammar(std::move(g), std::move(vocab)));
    // The first mask is part of compiling: a request's first token does not wait for it.
    const int32_t start = c->initial_state();
    c->fill_mask(start, c->first_mask_);
    std::lock_guard<std::mutex> lock(c->mu_);
    for (const auto& [id, bytes] : c->vocab_->first_bytes()) {
        // A first token with no bytes (SPM's lone dummy-prefix piece) adds nothing: allowed.
        const bool ok = !c->vocab_->excluded(id) && (bytes.empty() || c->walk(start, bytes) != kDead);
        uint64_t& w = c->first_mask_[size_t(id) >> 6];
        w = ok ? w | (uint64_t(1) << (id & 63)) : w & ~(uint64_t(1) << (id & 63));
    }
    c->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return c;
}

CompiledGrammar::Stats CompiledGrammar::stats() const {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    Stats s;
    s.positions = int64_t(positions_.size());
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
    std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
    auto [it, fresh] = set_ids_.try_emplace(std::move(key), int32_t(sets_.size()));
    if (fresh) {
        sets_.push_back(stacks);
        set_has_context_.push_back(std::binary_search(stacks.begin(), stacks.end(), kContext));
        trans_.emplace_back();
        trans_.back().fill(-1);
    }
    return it->second;
}

int32_t CompiledGrammar::next_set(int32_t set, uint8_t byte) {
    if (int32_t t = trans_[size_t(set)][byte]; t >= 0) return t;
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
    trans_[size_t(set)][byte] = id;
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

constexpr int32_t kMinDerived = 12;

const CompiledGrammar::PositionMask& CompiledGrammar::mask_for(const int32_t* chain, int n, bool done) {
    // Key: the positions, then whether the stack ends there (then nothing depends on a context).
    std::string key(reinterpret_cast<const char*>(chain), size_t(n) * sizeof(int32_t));
    key += done ? 'w' : 'c';
    if (auto it = positions_.find(key); it != positions_.end()) return it->second;
    int32_t start = done ? kDone : kContext;
    for (int i = n - 1; i >= 0; --i) start = intern(start, chain[i]);
    // A frame in a bounded chain R_k with R_(k+1) above it: the same key one rank up classifies every
    // token shorter than k bytes; walk only the rest.
    int frame = -1;
    size_t k = 0;
    // Only where the walk is long: a narrow class (a literal's byte) walks a few tokens anyway.
    const bool broad = g_.byte_sets[size_t(g_.elements[size_t(chain[0])].value)].count() >= 32;
    for (int i = 0; i < n && frame < 0 && broad; ++i) {
        const int32_t r = pos_rule_[size_t(chain[i])];
        // Below cap_ only: ranks above it share R_cap's positions (canon_), which has no distinct rank up.
        // From kMinDerived up: below it most tokens are long enough to need their own walk anyway.
        if (r >= 0 && size_t(r) < g_.chain_rank.size() && g_.chain_rank[size_t(r)] >= kMinDerived &&
            g_.chain_rank[size_t(r)] < cap_ && chain_ok_[size_t(r)] && chain_up_[size_t(r)] >= 0)
            frame = i, k = size_t(g_.chain_rank[size_t(r)]);
    }
    PositionMask pm;
    if (frame < 0) {
        pm = precompute(start);
    } else {
        int32_t up[kFrames];
        std::copy(chain, chain + n, up);
        const int32_t p = chain[frame], r = chain_up_[size_t(pos_rule_[size_t(p)])];
        up[frame] = canon_[size_t(g_.rules[size_t(r)][size_t(pos_alt_[size_t(p)])] + pos_off_[size_t(p)])];
        const PositionMask& base = mask_for(up, n, done);  // may rehash positions_: copy what is needed now
        const TokenTable& vt = *vocab_;
        const std::vector<uint64_t>& shorter = short_bits(k);
        PositionMask longer = precompute(start, k);
        // accepted = base's accepted among the short tokens + the long tokens' walk.
        std::vector<uint64_t> bits(size_t(mask_words()), 0);
        if (!base.bits.empty()) {
            for (size_t w = 0; w < bits.size(); ++w) bits[w] = base.bits[w] & shorter[w];
        } else {
            for (int32_t id : base.ids)
                if (get_bit(shorter, id)) set_bit(bits, id);
        }
        if (!longer.bits.empty()) {
            for (size_t w = 0; w < bits.size(); ++w) bits[w] |= longer.bits[w];
        } else {
            for (int32_t id : longer.ids) set_bit(bits, id);
        }
        for (int32_t id : base.depends)
            if (get_bit(shorter, id)) pm.depends.push_back(id);
        pm.depends.insert(pm.depends.end(), longer.depends.begin(), longer.depends.end());
        int64_t count = 0;
        for (uint64_t w : bits) count += __builtin_popcountll(w);
        if (count * 32 > vt.vocab_size()) {
            pm.bits = std::move(bits);
        } else {
            for (size_t w = 0; w < bits.size(); ++w)
                for (uint64_t m = bits[w]; m; m &= m - 1) pm.ids.push_back(int32_t(w * 64 + size_t(__builtin_ctzll(m))));
        }
    }
    position_bytes_ += pm.bits.size() * 8 + (pm.ids.size() + pm.depends.size()) * 4 + key.size() + 64;
    return positions_.emplace(key, std::move(pm)).first->second;
}

const std::vector<int32_t>& CompiledGrammar::long_tokens(size_t k) {
    auto [it, fresh] = long_tokens_.try_emplace(k);
    if (fresh)
        for (int32_t id : vocab_->sorted())
            if (vocab_->bytes(id).size() >= k) it->second.push_back(id);
    return it->second;
}

const std::vector<uint64_t>& CompiledGrammar::short_bits(size_t k) {
    auto [it, fresh] = short_bits_.try_emplace(k);
    if (fresh) {
        it->second.assign(size_t(mask_words()), 0);
        for (int32_t id : vocab_->sorted())
            if (vocab_->bytes(id).size() < k) set_bit(it->second, id);
    }
    return it->second;
}

CompiledGrammar::PositionMask CompiledGrammar::precompute(int32_t start, size_t min_len) {
    const TokenTable& vt = *vocab_;
    // min_len > 0: only the tokens of at least min_len bytes (their own byte-ordered list).
    const std::vector<int32_t>& order = min_len > 0 ? long_tokens(min_len) : vt.sorted();
    const std::vector<int32_t>& lcp = vt.lcp();
    // sets[d]: the state after the first d bytes of the current token; hit[d]: some state before
    // depth d held kContext (the frames returned with bytes left).
    std::vector<int32_t> sets(1, intern_set({start}));
    std::vector<char> hit(1, 0);
    std::vector<int32_t> accepted;
    PositionMask pm;
    size_t valid = 0;  // sets[0..valid] belong to the current token's prefix
    // Tokens are grouped by first byte: a group whose byte the start refuses is skipped whole (its
    // tokens are rejected: the start holds no context marker). Most positions are narrow literals.
    int b = 0;
    size_t group_end = 0;
    if (min_len > 0) group_end = order.size();  // one list, no first-byte groups
    for (size_t i = 0; i < order.size();) {
        if (i >= group_end) {
            while (b < 256 && (vt.first_begin(b) == vt.first_begin(b + 1) || next_set(sets[0], uint8_t(b)) == kDead)) ++b;
            if (b == 256) break;
            i = size_t(vt.first_begin(b));
            group_end = size_t(vt.first_begin(b + 1));
            valid = 0;
            ++b;
        }
        const std::string& t = vt.bytes(order[i]);
        size_t common = 0;
        if (min_len == 0) {
            common = size_t(lcp[i]);
        } else if (i > 0) {  // lcp is for the whole vocabulary's order
            const std::string& prev = vt.bytes(order[i - 1]);
            while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
        }
        size_t d = std::min(valid, common);
        if (sets.size() < t.size() + 1) sets.resize(t.size() + 1), hit.resize(t.size() + 1);
        bool dead = false;
        while (d < t.size()) {
            hit[d + 1] = hit[d] || set_has_context_[size_t(sets[d])];
            sets[d + 1] = next_set(sets[d], uint8_t(t[d]));
            ++d;
            if (sets[d] == kDead) {
                dead = true;
                break;
            }
        }
        valid = d;
        if (!dead) {
            accepted.push_back(order[i]);
            ++i;
            continue;
        }
        // Every token starting with t[0..d) ends the same way: context-dependent or rejected.
        const std::string_view prefix(t.data(), d);
        const auto end = std::partition_point(order.begin() + ptrdiff_t(i), order.end(), [&](int32_t id) {
            return std::string_view(vt.bytes(id)).substr(0, d) <= prefix;
        });
        const size_t j = size_t(end - order.begin());
        if (hit[d])
            for (size_t k = i; k < j; ++k) pm.depends.push_back(order[k]);
        i = j;
    }
    const int32_t V = vt.vocab_size();
    if (int64_t(accepted.size()) * 32 > V) {
        pm.bits.assign(size_t((V + 63) / 64), 0);
        for (int32_t id : accepted) set_bit(pm.bits, id);
    } else {
        pm.ids = std::move(accepted);
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
