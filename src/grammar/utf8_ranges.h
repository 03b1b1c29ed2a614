// Code point ranges and their UTF-8 encodings as byte-range sequences (a class over code points
// becomes alternatives of byte classes, so the grammar matcher only ever sees bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "grammar/gbnf.h"

namespace kiln::grammar {

struct CodeRange {
    uint32_t lo = 0, hi = 0;  // inclusive
};
// A UTF-8 encoding pattern: byte i of the sequence lies in [first, second] of entry i.
using ByteRangeSeq = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorted, merged, clipped to U+0000..U+10FFFF with the surrogates U+D800..U+DFFF removed.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
// The scalar values not in `ranges` (which must be normalized).
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);
// Byte-range sequences whose union is exactly the UTF-8 encodings of `ranges` (normalized).
std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodeRange>& ranges);

// UTF-8 decoding and encoding of single code points: tokenizer/unicode.h.

// Checks a lowered grammar (gbnf.h): every rule reachable from root can match something, and no
// rule calls itself before consuming a byte with something left to do after the call (left
// recursion, which a top-down matcher cannot run). kInvalidArgument naming the rule.
core::Status check_grammar(const Grammar& g);
// Rules that can match the empty string.
std::vector<bool> nullable_rules(const Grammar& g);

}  // namespace kiln::grammar
