// JSON Schema (and "any JSON") to GBNF text (grammar/gbnf.h's dialect), for structured output
// (OpenAI response_format json_schema / json_object, vLLM guided_json).
// Output shape, as a model is expected to write it:
//   - properties in the schema's order; every `required` one present, optional ones may be left out;
//     no property outside `properties` unless additionalProperties is true or a schema (absent ==
//     false, as OpenAI's strict mode and xgrammar's default);
//   - whitespace: after '{', '[', ',' and ':' and before '}' and ']', the rule `ws` =
//     "" | " " | "\n" followed by at most 20 spaces or tabs (bounded, so a small model cannot loop on it);
//   - strings: JSON strings (escapes \" \\ \/ \b \f \n \r \t \uXXXX; no raw control characters);
//   - numbers: JSON numbers (no leading zeros) with at most 16 integer digits, 16 fraction digits and 3
//     exponent digits; integers: -?(0|[1-9][0-9]{0,15}), up to 19 digits when a bound is given. The
//     bounds (llama.cpp's JSON grammars bound digits the same way) keep a small model from writing
//     digits until max_tokens, which sampled runs of SmolLM2 did without them.
// Keywords honoured: type (string or list), properties, required, additionalProperties, items,
// prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf), allOf with one entry,
// $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed), nullable, minLength,
// maxLength, pattern, format (date, time, date-time, uuid, email, ipv4, ipv6, hostname, uri),
// minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers, and on numbers when the bound
// is an integer value (a bounded number is then written without an exponent). A pattern must match
// the whole string (JSON Schema only asks for a match somewhere in it); other formats are ignored, as
// validators ignore unknown formats. An object schema with neither properties nor additionalProperties
// takes any members. Annotations (title, description, default, examples, example, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, $defs, definitions, contentEncoding, contentMediaType) are ignored.
// Anything else that constrains instances is refused: kUnsupported naming the keyword and where it is
// (a JSON pointer such as #/properties/a/items). json_schema.cc lists the finer points.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace kiln::grammar {

// GBNF whose `root` matches the instances of `schema` (in the shape above). kInvalidArgument for a
// malformed schema (a type that is not a JSON type, required not a list, a dangling $ref, ...),
// kUnsupported for a keyword kiln cannot honour. ordered_json because the order of `properties` is
// the order the output must follow: parse the request body as ordered_json (a nlohmann::json converts,
// but it has already sorted its keys).
core::Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// GBNF for any JSON value whose top level is an object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace kiln::grammar
