// Regular expressions, string formats and integer ranges as GBNF expressions (grammar/gbnf.h's
// dialect): the pieces json_schema.h and guided_regex need. Each function returns one expression
// (no rule definitions), safe to embed anywhere: it is parenthesised where needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln::grammar {

// The language of `pattern` (ECMAScript / Python `re` syntax, the subset below) matched in full
// (as vLLM's guided_regex and JSON Schema's "pattern" once anchored: a leading ^ and trailing $ are
// accepted and dropped). Supported: literals, escapes (\n \t \r \f \v \0 \xHH \uHHHH \\ and escaped
// metacharacters), classes [...] with ranges and negation, \d \D \w \W \s \S (ASCII meanings, also
// inside classes), '.' (any code point but \n), groups (...) and (?:...) and named (?P<n>...)/(?<n>...),
// alternation |, quantifiers * + ? {m} {m,} {m,n} (a lazy '?' after them is accepted and ignored).
// Refused (kUnsupported, naming the construct and its offset): backreferences, lookarounds, anchors
// other than the outer ^ / $, \b \B, inline flags, possessive quantifiers. kInvalidArgument for a
// malformed pattern (unbalanced parentheses, a bad range, {n,m} with n > m), with the offset.
// Code points, not bytes: a class matches whole UTF-8 characters.
core::Result<std::string> regex_to_gbnf(std::string_view pattern);

// The string *contents* (between the quotes, JSON-escaped as needed: the formats below need no
// escapes) of a JSON Schema "format": date, time, date-time (RFC 3339), uuid, email (a practical
// subset: local@domain.tld), ipv4, ipv6 (full and :: forms), hostname, uri (scheme:rest, no spaces
// or quotes). kUnsupported naming the format for any other.
core::Result<std::string> format_gbnf(std::string_view format);

// Decimal integers n with lo <= n <= hi, written as JSON writes them: -?(0|[1-9][0-9]*), no "-0".
// An absent bound leaves that side open up to 19 digits (the longest int64; a model must not be able
// to write digits forever). kInvalidArgument when lo > hi.
core::Result<std::string> integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace kiln::grammar
