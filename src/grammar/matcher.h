// Token masks for constrained decoding: which tokens keep the text a prefix of a grammar's sentence.
//
// The matcher is a pushdown automaton over bytes. A stack is a chain of positions in the grammar's
// element array (gbnf.h), interned so that equal stacks are one id; the state after some text is
// the set of stacks whose top is a byte class (plus the empty stack once the text is a whole
// sentence). State sets are interned too, each with a 256-entry table of the set a byte leads to,
// filled as bytes are seen: once warm, a byte is one table lookup.
//
// Token masks follow the approach xgrammar published (Dong et al. 2024): for every byte-class
// position p of the grammar, compile() walks the vocabulary in byte order (tokens sharing a prefix
// share its work; a dead prefix skips every token that starts with it) from a stack holding p alone
// over a marker for "whatever the context is". Tokens consumed without reaching the marker are
// accepted in any context; tokens that die first are rejected in any context; the few that reach the
// marker with bytes left ("context-dependent") are checked at run time against the real stack. A
// state's mask = union over its stacks of the top's accepted set plus its context-dependent tokens
// that pass; finished masks are cached per state.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/gbnf.h"
#include "tokenizer/tokenizer.h"

namespace kiln::grammar {

// The vocabulary as a grammar sees it: the bytes each token adds to the text. Excluded tokens
// (control tokens, tokens with no bytes) are never allowed by a mask; the caller adds EOS itself.
class TokenTable {
public:
    // first_bytes: what each token adds as the first token of a text, where that differs (an SPM
    // token's dummy-prefix space is dropped there, as the decoder drops it); empty: no difference.
    TokenTable(std::vector<std::string> bytes, const std::vector<bool>& excluded,
               std::vector<std::pair<int32_t, std::string>> first_bytes = {});
    int32_t vocab_size() const { return int32_t(bytes_.size()); }
    const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
    const std::vector<std::pair<int32_t, std::string>>& first_bytes() const { return first_bytes_; }
    bool excluded(int32_t id) const { return excluded_[size_t(id)]; }
    // Allowed tokens in byte order.
    const std::vector<int32_t>& sorted() const { return sorted_; }
    int32_t length(int32_t id) const { return length_[size_t(id)]; }  // bytes(id).size(), packed
    // The allowed tokens as a trie, its nodes in preorder (children in byte order), one per distinct
    // non-empty prefix, then a sentinel {end, tok} = {num_nodes, sorted().size()}. Node i is the
    // prefix of `depth` bytes ending in `byte`; its subtree is nodes [i, end); the tokens equal to it
    // are sorted()[tok .. node(i + 1).tok), those in its subtree sorted()[tok .. node(end).tok);
    // `longest`: the longest of those. Walks read it front to back and skip dead subtrees whole.
    struct TrieNode {  // 12 bytes: a walk streams the whole trie through the cache
        int32_t end;
        uint32_t tok_byte;  // tok << 8 | byte
        uint16_t depth, longest;
        int32_t tok() const { return int32_t(tok_byte >> 8); }
        uint8_t byte() const { return uint8_t(tok_byte & 0xff); }
    };
    // Tokens past these limits are excluded (no vocabulary comes near them).
    static constexpr size_t kMaxTokenBytes = 65535, kMaxTokens = size_t(1) << 24;
    const std::vector<TrieNode>& trie() const { return trie_; }
    int32_t num_nodes() const { return int32_t(trie_.size()) - 1; }
    int32_t longest() const { return trie_.back().longest; }  // the longest token's bytes
    // The node of the one-byte prefix b (-1: no token starts with b): a walk from a narrow class
    // jumps to its bytes' subtrees without reading the rest of the trie.
    int32_t root_child(int b) const { return root_child_[size_t(b)]; }
    // A bitmap ((vocab_size() + 63) / 64 words) of the allowed tokens shorter than k bytes: made on
    // first use of each k and kept, so every grammar over this vocabulary shares it; thread-safe.
    const std::vector<uint64_t>& shorter_than(size_t k) const;

private:
    std::vector<std::string> bytes_;
    std::vector<bool> excluded_;
    std::vector<std::pair<int32_t, std::string>> first_bytes_;  // ascending ids
    std::vector<int32_t> sorted_;
    std::vector<int32_t> length_;
    std::vector<TrieNode> trie_;
    std::array<int32_t, 256> root_child_{};
    std::vector<int32_t> by_length_;  // the allowed tokens, shortest first
    mutable std::mutex short_mu_;
    mutable std::unordered_map<size_t, std::vector<uint64_t>> short_;  // by k (nodes: references stay valid)
};

// A tokenizer's table for a model with `vocab_size` logits (0: the tokenizer's size): each token's
// bytes as it adds them to text (Tokenizer::piece), control tokens excluded, and as the first token
// of a text where that differs. Ids the tokenizer lacks (a model's padded vocabulary) are excluded;
// tokenizer ids past the model's vocabulary are left out (the model cannot produce them).
std::shared_ptr<TokenTable> token_table(const tokenizer::Tokenizer& tok, int32_t vocab_size = 0);

class CompiledGrammar {
public:
    // compile()'s warm-up walks (warm_up below): up to this many tokens, until this long after
    // compile() began.
    static constexpr int kWarmUpTokens = 1024;
    static constexpr double kWarmUpSeconds = 0.025;
    // Takes a parsed grammar (parse_gbnf), makes the first mask and walks up to warm_up_tokens tokens
    // of random texts of the grammar (warm_up below; 0: none, every class made on first use).
    static std::shared_ptr<CompiledGrammar> compile(Grammar g, std::shared_ptr<const TokenTable> vocab,
                                                    int warm_up_tokens = kWarmUpTokens,
                                                    double warm_up_seconds = kWarmUpSeconds);
    const Grammar& grammar() const { return g_; }
    const TokenTable& vocab() const { return *vocab_; }
    int32_t mask_words() const { return (vocab_->vocab_size() + 63) / 64; }
    // Figures for benchmarks and tests.
    struct Stats {
        int64_t positions = 0, stacks = 0, sets = 0, context_dependent = 0, cached_masks = 0;
        int64_t table_bytes = 0;  // the positions' classes and the cached masks
        double compile_seconds = 0;
    };
    Stats stats() const;

private:
    friend class Matcher;
    struct Node {
        int32_t parent, pos;
    };
    struct PositionMask {
        std::vector<uint64_t> bits;     // accepted tokens, dense (when many) ...
        std::vector<int32_t> ids;       // ... or sparse
        std::vector<int32_t> depends;   // context-dependent tokens
    };
    static constexpr int32_t kDone = 0;     // the empty stack: the text is a whole sentence
    static constexpr int32_t kContext = 1;  // precomputation's marker for "the rest of the stack"
    // Frames a precomputed mask is keyed by: the top frame alone ends after a byte in small rules
    // (a character of a string), so nearly every token would depend on the context; a few frames
    // reach the loop and the closing quote around it.
    static constexpr int kFrames = 3;
    // canon_[p]: the position whose tokens classify like p's, in keys: positions whose alternatives go
    // on alike to their ends (the same elements, calls to the same canonical rules) are one, since
    // below a key's frames is the marker anyway; a repetition chain's rank R_k (gbnf.h) is that rank
    // of the longest chain over the same unit, and ranks past the longest token's length + 2 are one
    // (no token can reach the chain's end from either), so x{0,200} needs one walk, not 200, and a
    // schema's strings share theirs.
    std::vector<int32_t> canon_;
    // Bounded chains, walked once per rank otherwise: from R_k (unit never empty) a token of fewer
    // than k bytes cannot reach the chain's end, so it classifies as from any R_j with j > k; only
    // the longer tokens are walked, the shorter ones take their classes from the chain's top rank
    // (capped as canon_ caps it), walked once. chain_top_[r]: that rank's rule for R_k;
    // chain_ok_[r]: r's unit is never empty; pos_rule_ / pos_alt_ / pos_off_: where each element sits.
    std::vector<int32_t> chain_top_, pos_rule_, pos_alt_, pos_off_;
    std::vector<bool> chain_ok_;

    static constexpr int32_t kDead = 0;  // the empty set of stacks: the text left the grammar

    CompiledGrammar(Grammar g, std::shared_ptr<const TokenTable> vocab);
    int32_t intern(int32_t parent, int32_t pos);
    const std::vector<int32_t>& closure(int32_t stack);
    const std::vector<int32_t>& step(int32_t stack, uint8_t byte);
    int32_t intern_set(const std::vector<int32_t>& stacks);  // sorted, unique
    int32_t next_set(int32_t set, uint8_t byte) {  // the walks' inner step: a lookup once seen
        if (const int32_t c = set_class_[size_t(set)]; c >= 0) {
            if (!g_.byte_sets[size_t(c)][byte]) return kDead;
            const int32_t n = set_next_[size_t(set)];
            return n >= 0 ? n : new_transition(set, byte);
        }
        const int32_t t = set_table_[size_t(set)];
        const int32_t n = t >= 0 ? trans_[size_t(t)][byte] : -1;
        return n >= 0 ? n : new_transition(set, byte);
    }
    int32_t new_transition(int32_t set, uint8_t byte);
    int32_t walk(int32_t set, std::string_view bytes);  // kDead as soon as a byte is refused
    const PositionMask& position_mask(int32_t stack);
    // The classes for the key (chain[0..n): positions, top first; done: nothing below them).
    const PositionMask& mask_for(const int32_t* chain, int n, bool done);
    // Walks the tokens of at least min_len bytes from `start` (all of them with 0).
    PositionMask precompute(int32_t start, size_t min_len = 0);
    // R_k's classes from its chain top's (`base`) and a walk of the tokens of at least k bytes.
    void derive(const PositionMask& base, const PositionMask& longer, size_t k, PositionMask& pm);
    int32_t initial_state();
    // Part of compile(), as xgrammar makes its masks at compile time: matchers walk random texts of
    // the grammar (each next token drawn uniformly from the mask) until max_tokens tokens have been
    // walked or max_seconds have passed since t0, so that the positions' classes a model's text needs
    // are mostly made before its first step (a new schema's first outputs would otherwise make them
    // mid-decode, ~10 ms per output over the bench's schema). Seeded: the same tables every time, up
    // to the time cap. Per-state masks made on the way are dropped (cheap to remake from the classes).
    static void warm_up(const std::shared_ptr<CompiledGrammar>& c, std::chrono::steady_clock::time_point t0,
                        int max_tokens, double max_seconds);
    static constexpr uint64_t kWarmUpSeed = 0x6b696c6e;
    void fill_mask(int32_t set, std::vector<uint64_t>& mask);
    // The first token's mask: the initial state's, with the tokens whose first-token bytes differ
    // judged by those (computed once, in compile()).
    std::vector<uint64_t> first_mask_;

    Grammar g_;
    std::shared_ptr<const TokenTable> vocab_;
    std::mutex mu_;
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, int32_t> node_ids_;
    // Per stack id: its closure and its successor after a byte of its top class, as indices into
    // results_ (-1: not computed yet). A deque, so references to results stay valid as it grows.
    std::vector<int32_t> closure_of_, succ_of_;
    std::deque<std::vector<int32_t>> results_;
    // Interned state sets: their stacks, whether they hold kContext, and their byte transitions
    // (-1: not computed yet). Most sets hold one stack with a byte class on top, which every byte of
    // the class takes to the same set: set_class_ is that class (-1: another kind of set) and
    // set_next_ the set it leads to. Other sets have a row of 256 in trans_, set_table_ its index.
    std::deque<std::vector<int32_t>> sets_;
    std::vector<char> set_has_context_;
    std::vector<int32_t> set_class_, set_next_, set_table_;
    std::deque<std::array<int32_t, 256>> trans_;
    struct KeyHash {  // lets a set be looked up by a view of its stacks' bytes (no allocation)
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
    };
    std::unordered_map<std::string, int32_t, KeyHash, std::equal_to<>> set_ids_;
    std::vector<int32_t> single_set_;  // per stack: the set holding it alone (-1: not made yet)
    std::unordered_map<std::string, PositionMask> positions_;  // by the top kFrames positions
    size_t position_bytes_ = 0;
    static constexpr size_t kCacheBytes = size_t(64) << 20;  // per cache: positions_, masks_
    std::unordered_map<int32_t, std::vector<uint64_t>> masks_;  // by state set
    double compile_seconds_ = 0;
    std::vector<int32_t> scratch_, walk_sets_;  // precompute's state per trie depth
    std::vector<char> walk_hit_;
};

// One sequence's progress through a compiled grammar. Not thread-safe; the compiled grammar it
// points to may be shared by many matchers on any threads.
class Matcher {
public:
    explicit Matcher(std::shared_ptr<CompiledGrammar> grammar);
    // Bit i of `mask` (mask_words() words) = token i may come next. EOS is not in it: see can_end.
    void fill_mask(std::vector<uint64_t>& mask) const;
    // Advances by a token's bytes; false (state unchanged) when they leave the grammar.
    bool accept_token(int32_t id);
    bool accept_bytes(std::string_view bytes);
    bool can_end() const;   // the text so far is a whole sentence
    bool must_end() const;  // ... and nothing can follow it
    const CompiledGrammar& compiled() const { return *g_; }

private:
    std::shared_ptr<CompiledGrammar> g_;
    int32_t state_ = 0;  // an interned set of stacks
    bool first_ = true;  // no token accepted yet (TokenTable::first_bytes apply)
};

}  // namespace kiln::grammar
