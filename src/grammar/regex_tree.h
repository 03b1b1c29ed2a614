// The tree regex_to_gbnf (regex.h) parses a pattern into, its simplifications and its printing as
// one GBNF expression. Internal to src/grammar (regex.cc's parser builds it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::grammar::regex_tree {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;
constexpr int kUnbounded = -1;  // Node::max of a repetition with no upper bound

struct Range {
    uint32_t lo, hi;
};
using CharSet = std::vector<Range>;  // normalized: sorted, disjoint, non-adjacent, no surrogates

// Sorts and merges any list of ranges and cuts the surrogates out.
CharSet normalize(CharSet s);
// The code points (U+0000..U+10FFFF less the surrogates) not in a normalized set.
CharSet complement(const CharSet& s);
// \d \w \s (ASCII meanings) and, for 'D' 'W' 'S', their complements.
CharSet class_escape_set(uint32_t letter);

struct Node {
    enum class Kind { kEmpty, kNothing, kSet, kSeq, kAlt, kRepeat };  // kNothing: matches no string
    Kind kind = Kind::kEmpty;
    CharSet set;             // kSet
    std::vector<Node> kids;  // kSeq, kAlt; kRepeat: one
    int min = 0, max = 0;    // kRepeat

    bool single() const { return kind == Kind::kSet && set.size() == 1 && set[0].lo == set[0].hi; }
};

// Constructors that simplify as they go (flattening, dropping "" and nothing, and rewriting the
// repetition of parts that can be empty: see regex_tree.cc).
Node make_set(CharSet s);
Node make_seq(std::vector<Node> parts);
Node make_alt(std::vector<Node> parts);
Node make_repeat(Node x, int min, int max);

// The GBNF expression for `n` (not kNothing), parenthesised unless it is one literal or class.
std::string print_expression(const Node& n);

}  // namespace kiln::grammar::regex_tree
