// Grammars over bytes, and the GBNF text they are written in.
//
// The dialect is llama.cpp's GBNF (also what xgrammar's EBNF reads for these constructs):
//   root ::= object                    # a rule: name ::= expression; the grammar starts at `root`
//   name ::= "literal" | 'literal'     # escapes \n \r \t \\ \" \' \xHH \uHHHH \UHHHHHHHH
//          | [a-z0-9_] | [^"\\]        # classes over code points: ranges, ^ negation, the same escapes
//          | .                         # any code point
//          | ( a b ) c                 # grouping; juxtaposition is sequence
//          | x* | x+ | x? | x{m} | x{m,} | x{m,n}
//   # comments run to the end of the line; whitespace and newlines separate tokens freely: a rule's
//   # expression ends where the next `name ::=` begins. Names: [A-Za-z0-9_-]+. Literals and classes
//   # are UTF-8 text; classes match whole UTF-8 encoded code points (U+0000..U+10FFFF less the
//   # surrogates), never stray bytes.
//
// Compiled form: every rule is a list of alternatives, each a sequence of elements; an element is a
// byte class (256 bits) or a reference to a rule. Repetitions, groups and multi-byte code point
// classes become helper rules (x* => R ::= x R | ""), so a matcher needs only bytes and calls.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln::grammar {

using ByteSet = std::bitset<256>;

struct Element {
    enum class Kind : uint8_t { kBytes, kRule, kEnd };  // kEnd closes every alternative in `elements`
    Kind kind = Kind::kEnd;
    int32_t value = 0;  // kBytes: index into Grammar::byte_sets; kRule: rule id
};

struct Grammar {
    // elements: every alternative of every rule, each closed by a kEnd element. rules[r] lists the
    // offsets in `elements` where rule r's alternatives start (an empty alternative is a lone kEnd).
    std::vector<Element> elements;
    std::vector<std::vector<int32_t>> rules;
    std::vector<std::string> rule_names;  // helper rules get "<parent>_<n>"
    std::vector<ByteSet> byte_sets;
    int32_t root = 0;
    // x{m,n} ends in a chain of helper rules R_k ::= x R_(k-1) | "" (R_1 ::= x | ""), k the optional
    // copies left: chain_rank[r] = k for such a rule (0 for every other), chain_next[r] = R_(k-1).
    // The matcher treats R_k and R_j alike once both exceed the longest token (see matcher.h).
    std::vector<int32_t> chain_rank, chain_next;
};

// Parses GBNF text. kInvalidArgument naming the line and column for a syntax error, an undefined
// rule, a missing `root`, a bad escape or range, or a repetition bound above 10000; rules that can
// never match anything (every alternative calls itself first) are refused too, as is left recursion
// (the matcher is top-down).
core::Result<Grammar> parse_gbnf(std::string_view text);

// Whether `text` (bytes) is a whole sentence of `g`: the plain reference matcher (a set of explicit
// stacks advanced byte by byte), for tests and as the oracle of grammar/matcher.h's token masks.
bool full_match(const Grammar& g, std::string_view text);

// The GBNF string literal for UTF-8 `text` (quotes included; \xHH for control characters; in GBNF
// \xHH, \uHHHH and \UHHHHHHHH all name code points, written as UTF-8).
std::string gbnf_literal(std::string_view text);

}  // namespace kiln::grammar
