#!/usr/bin/env python3
"""Generates tests/golden/data/json_schema_cases.json: JSON Schemas, candidate instance texts and the
verdict of Python's `jsonschema` (Draft202012Validator, formats asserted through its FormatChecker)
on each, for tests/unit/json_schema_test.cc, which checks that the GBNF from json_schema_to_gbnf
accepts exactly the texts with `expect` true. Run once; the output is committed.
Usage: scripts/gen_json_schema_cases.py  (needs `jsonschema`; rfc3339-validator makes it check the
time and date-time formats too; the verdicts written do not depend on which checkers are present).

The texts are written the way the grammar has a model write them (properties in schema order, ", " /
": " separators, compact, or indent=2), so a text jsonschema accepts must be accepted by the grammar:
`expect` == `valid`. The exceptions are marked:
  - "stricter": jsonschema accepts, the grammar intentionally does not (property order, whitespace the
    ws rule does not allow, 1.0 for an integer, exponents on bounded numbers, unanchored patterns...);
  - "looser": jsonschema rejects, the grammar accepts (nullable is OpenAPI, not JSON Schema; oneOf is
    read as anyOf).
A format nobody knows is ignored, by jsonschema and the grammar alike. Formats the installed jsonschema
cannot check carry a hand verdict ("format_ok"), cross-checked against
jsonschema wherever it can check that format.
"""
import json
import os

from jsonschema import Draft202012Validator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "data", "json_schema_cases.json")
CHECKER = Draft202012Validator.FORMAT_CHECKER


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def spaced(v):
    return json.dumps(v, ensure_ascii=False)


def indented(v):
    return json.dumps(v, indent=2, ensure_ascii=False)


def stricter(text, why):
    return {"text": text, "stricter": why}


def looser(text, why):
    return {"text": text, "looser": why}


def fmt(text, ok):
    return {"text": text, "format_ok": ok}


def q(s):
    """A JSON string literal (the text of a string instance)."""
    return json.dumps(s, ensure_ascii=False)


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
OPTIONALS = {
    "type": "object",
    "properties": {k: {"type": "integer"} for k in "abcde"},
    "required": ["b", "d"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "geo": {
                    "type": "object",
                    "properties": {"lat": {"type": "number"}, "lng": {"type": "number"}},
                    "required": ["lat", "lng"],
                },
                "zip": {"type": "string", "minLength": 5, "maxLength": 5},
            },
            "required": ["street", "geo"],
        },
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "address"],
}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value", "children"],
        }
    },
    "$ref": "#/$defs/node",
}
LINKED = {
    "title": "list",
    "type": "object",
    "properties": {"name": {"type": "string"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "required": ["name", "next"],
}


def leaf(v):
    return {"value": v, "children": []}


ORDER = "properties out of schema order"
WS = "whitespace the ws rule does not allow"
EXTRA = "a property outside `properties` (additionalProperties absent == false)"

SCHEMAS = [
    ("string", {"type": "string"}, [
        q("hello"), q(""), r'"a\"b\\c\n\u00e9\/"', q("é 日本 🙂"), r'"\ud83d\ude00"', '"tab\there"',
        "hello", r'"bad \x escape"', '"unterminated', "123", "null"]),
    ("integer", {"type": "integer"}, [
        "0", "-0", "42", "-17", "007", "1.5", "+1", "\"1\"",
        stricter("1.0", "integers are written without a fraction"),
        stricter("1e3", "integers are written without an exponent")]),
    ("number", {"type": "number"}, [
        "0", "-0.5", "3.25", "1e10", "2.5E-3", "-1.0e+2", ".5", "01", "1.", "NaN", "Infinity", "true"]),
    ("boolean", {"type": "boolean"}, ["true", "false", "True", "1", "null"]),
    ("null", {"type": "null"}, ["null", "\"null\"", "0", "Null"]),
    ("any_value", {}, [
        "1", q("x"), "null", spaced({"a": [1, {"b": None}]}), indented({"a": [1, {"b": None}], "c": {}}),
        "[]", "{}", "{", "[1,]", "{\"a\" 1}",
        stricter("{\"a\" : 1}", WS), stricter("[1 , 2]", WS), stricter(" 1", WS)]),
    ("true_schema", True, ["true", "[1, \"two\", {\"three\": 3.0}]", "{\"k\": null}", "nul"]),
    ("object_required", PERSON, [
        spaced({"name": "Bo", "age": 3}), compact({"name": "Bo", "age": 3}), indented({"name": "Bo", "age": 3}),
        "{ \"name\": \"Bo\", \"age\": 3 }", "{\n\t\"name\": \"Bo\",\n\t\"age\": 3\n}",
        spaced({"name": "Bo"}), spaced({"name": "Bo", "age": "3"}), "{\"name\": \"Bo\", \"age\": 3,}", "[]",
        stricter(spaced({"age": 3, "name": "Bo"}), ORDER),
        stricter(spaced({"name": "Bo", "age": 3, "x": 1}), EXTRA),
        stricter("{\"name\" : \"Bo\", \"age\": 3}", WS),
        stricter("{\"name\": \"Bo\" , \"age\": 3}", WS),
        stricter("{  \"name\": \"Bo\", \"age\": 3}", WS)]),
    ("object_optional_positions", OPTIONALS, [
        spaced({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}), spaced({"b": 2, "d": 4}), spaced({"a": 1, "b": 2, "d": 4}),
        spaced({"b": 2, "c": 3, "d": 4}), spaced({"b": 2, "d": 4, "e": 5}), compact({"a": 1, "b": 2, "d": 4, "e": 5}),
        indented({"b": 2, "c": 3, "d": 4, "e": 5}), spaced({"a": 1, "c": 3, "d": 4}), spaced({"a": 1, "b": 2}),
        "{}", spaced({"b": 2, "d": 4, "f": 6}), "{\"b\": 2, , \"d\": 4}", "{, \"b\": 2, \"d\": 4}",
        stricter(spaced({"d": 4, "b": 2}), ORDER)]),
    ("object_all_optional", {"properties": {"x": {"type": "integer"}, "y": {"type": "string"}, "z": {"type": "null"}},
                             "additionalProperties": False}, [
        "{}", "{ }", spaced({"x": 1}), spaced({"y": "s"}), spaced({"z": None}), spaced({"x": 1, "z": None}),
        spaced({"x": 1, "y": "s", "z": None}), spaced({"w": 1}), "{\"x\": 1,}", "{,}",
        stricter(spaced({"y": "s", "x": 1}), ORDER),
        stricter("[]", "no `type`: inferred as object from `properties`"),
        stricter("{  }", WS)]),
    ("nested_depth3", NESTED, [
        spaced({"name": "A", "address": {"street": "Main", "geo": {"lat": 1.5, "lng": -2}}}),
        indented({"name": "A", "address": {"street": "Main", "geo": {"lat": 1.5, "lng": -2}, "zip": "12345"},
                  "tags": ["x", "y"]}),
        compact({"name": "A", "address": {"street": "Main", "geo": {"lat": 0, "lng": 0}}, "tags": []}),
        spaced({"name": "A", "address": {"street": "Main", "geo": {"lat": 1.5}}}),
        spaced({"name": "A", "address": {"street": "Main", "geo": {"lat": 1.5, "lng": -2}, "zip": "123"}}),
        spaced({"name": "A", "address": {"street": "Main", "geo": {"lat": 1, "lng": 2}}, "tags": ["a", "b", "c", "d"]}),
        spaced({"name": "A", "address": {"street": 5, "geo": {"lat": 1, "lng": 2}}}),
        spaced({"name": "A"}),
        stricter(spaced({"name": "A", "address": {"geo": {"lat": 1, "lng": 2}, "street": "Main"}}), ORDER)]),
    ("additional_true", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                         "additionalProperties": True}, [
        spaced({"id": 1}), spaced({"id": 1, "extra": "x", "more": [1, 2]}), indented({"id": 1, "n": {"a": None}}),
        spaced({"extra": 1}), "{\"id\": 1, \"x\"}",
        stricter(spaced({"extra": 1, "id": 1}), "extra properties come after the listed ones")]),
    ("additional_schema", {"type": "object", "properties": {"id": {"type": "integer"}},
                           "additionalProperties": {"type": "string"}}, [
        spaced({"id": 1, "a": "x"}), spaced({"id": 1}), "{}", spaced({"a": "x", "b": "y"}), spaced({"id": 1, "a": 2}),
        spaced({"a": 2}),
        looser(spaced({"id": "x"}), "an extra property may reuse a listed name (here with a string value)")]),
    ("map_of_numbers", {"type": "object", "additionalProperties": {"type": "number"}}, [
        "{}", spaced({"a": 1, "b": 2.5}), compact({"é": -1e-3}), spaced({"a": "x"}), "[]"]),
    ("any_object", {"type": "object"}, [
        "{}", spaced({"a": [1, {"b": None}], "c": "d"}), indented({"k": {"k": {"k": []}}}), "[]", "1", "{\"a\"}"]),
    ("closed_empty_object", {"type": "object", "properties": {}}, [
        "{}", "{ }", "{\n}", "[]",
        stricter(spaced({"a": 1}), EXTRA)]),
    ("array_of_integers", {"type": "array", "items": {"type": "integer"}}, [
        "[]", "[ ]", "[1, 2, 3]", "[1,2]", "[\n  1,\n  2\n]", "[1, \"a\"]", "[,1]", "[1,]", "{}",
        stricter("[1 ,2]", WS)]),
    ("array_min2_max4", {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4}, [
        spaced(["a"]), spaced(["a", "b"]), spaced(["a", "b", "c"]), spaced(["a", "b", "c", "d"]),
        spaced(["a", "b", "c", "d", "e"]), "[]", spaced(["a", 2])]),
    ("array_min1", {"type": "array", "items": {"type": "number"}, "minItems": 1}, [
        "[]", "[1]", "[1, 2.5, -3, 4e2, 5, 6]", "[\"1\"]"]),
    ("array_max2_any", {"type": "array", "maxItems": 2}, [
        "[]", "[1]", "[1, \"a\"]", "[{\"a\": [null]}, []]", "[1, 2, 3]"]),
    ("array_exactly0", {"type": "array", "maxItems": 0}, ["[]", "[ ]", "[1]"]),
    ("prefix_open", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}, [
        "[]", spaced(["a"]), spaced(["a", 1]), spaced(["a", 1, None, {}]), spaced([1]), spaced(["a", "b"])]),
    ("prefix_closed", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}],
                       "items": False, "minItems": 2}, [
        spaced(["a", 1]), spaced(["a", 1, True]), spaced(["a"]), spaced(["a", 1, True, 2]), "[]",
        spaced(["a", 1, "x"])]),
    ("prefix_then_items", {"type": "array", "prefixItems": [{"type": "number"}], "items": {"type": "string"},
                           "minItems": 1, "maxItems": 3}, [
        "[1]", spaced([1, "a"]), spaced([1, "a", "b"]), spaced([1, "a", "b", "c"]), spaced(["a"]), "[]",
        spaced([1, 2])]),
    ("enum_mixed", {"enum": ["red", 1, 2.5, None, True, {"a": 1}, [1, 2], "with \"quote\"", "é"]}, [
        q("red"), "1", "2.5", "null", "true", "{\"a\":1}", "[1,2]", q("with \"quote\""), q("é"),
        q("blue"), "false", "2", "[1]",
        stricter("1.0", "enum values are written as compact JSON"),
        stricter("{\"a\": 1}", "enum values are written as compact JSON"),
        stricter("\"\\u00e9\"", "enum values are written as compact JSON")]),
    ("enum_typed", {"type": "string", "enum": ["a", "b", 1]}, [q("a"), q("b"), "1", q("c")]),
    ("const_string", {"const": "fixed"}, [q("fixed"), q("Fixed"), "fixed"]),
    ("const_object", {"const": {"k": [1, True]}}, [
        "{\"k\":[1,true]}", "{\"k\":[1]}",
        stricter("{\"k\": [1, true]}", "const values are written as compact JSON")]),
    ("any_of", {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 10}]}, [
        q("ab"), q(""), q("abcd"), "10", "12345", "9", "null"]),
    ("one_of", {"oneOf": [{"type": "boolean"}, {"type": "null"}]}, ["true", "null", "0"]),
    ("one_of_overlap", {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}, [
        "-1", "0.5", "-0.5",
        looser("1", "oneOf is read as anyOf: 1 matches both branches")]),
    ("all_of_single", {"allOf": [{"type": "integer", "maximum": 5}], "description": "one entry"}, ["5", "6", "-5"]),
    ("ref_tree", TREE, [
        spaced(leaf(1)), spaced({"value": 1, "children": [leaf(2), {"value": 3, "children": [leaf(4)]}]}),
        indented({"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": [leaf(4)]}]}]}),
        spaced({"value": 1}), spaced({"value": 1, "children": [{"value": 2}]}),
        spaced({"value": 1, "children": [leaf("x")]})]),
    ("ref_root_list", LINKED, [
        spaced({"name": "a", "next": None}), spaced({"name": "a", "next": {"name": "b", "next": None}}),
        spaced({"name": "a", "next": {"name": "b", "next": {"name": "c", "next": None}}}),
        spaced({"name": "a", "next": {"name": "b"}}), spaced({"name": "a", "next": 1})]),
    ("definitions_ref", {"definitions": {"pos": {"type": "integer", "minimum": 1}}, "type": "array",
                         "items": {"$ref": "#/definitions/pos"}}, ["[]", "[1, 2, 30]", "[0]", "[1, -1]"]),
    ("shared_def", {"$defs": {"id": {"type": "string", "pattern": "^[a-z]+$"}}, "type": "object",
                    "properties": {"from": {"$ref": "#/$defs/id"}, "to": {"$ref": "#/$defs/id"}},
                    "required": ["from", "to"]}, [
        spaced({"from": "a", "to": "bc"}), spaced({"from": "a", "to": "B"}), spaced({"from": "a"})]),
    ("integer_range", {"type": "integer", "minimum": -5, "maximum": 12}, [
        "-6", "-5", "-1", "0", "9", "10", "12", "13", "100", "-50", "05",
        stricter("-0", "no -0 in a bounded integer"), stricter("1.0", "integers are written without a fraction")]),
    ("integer_exclusive", {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 100}, [
        "-3", "-2", "0", "99", "100", "-4"]),
    ("integer_max_negative", {"type": "integer", "maximum": -10}, ["-10", "-11", "-1000", "-9", "0", "10"]),
    ("integer_min_only", {"type": "integer", "minimum": 100}, ["100", "99", "123456789", "-100"]),
    ("integer_fractional_bounds", {"type": "integer", "minimum": 1.5, "maximum": 4.5}, ["1", "2", "4", "5", "3.5"]),
    ("number_range", {"type": "number", "minimum": -3, "maximum": 5}, [
        "-3", "-3.0", "-3.00", "-3.5", "-3.01", "-2.999", "-2", "-0.5", "0", "0.0", "0.25", "4.99", "5", "5.0",
        "5.01", "6", "-4", "10", "-10",
        stricter("1e0", "bounded numbers are written without an exponent"),
        stricter("-0.0", "-0 is written 0"), stricter("-0", "-0 is written 0")]),
    ("number_exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, [
        "0", "0.0", "0.5", "0.999", "0.0001", "1", "1.0", "-0.5", "1.5"]),
    ("number_min_float_bound", {"type": "number", "minimum": -1.0}, [
        "-1", "-1.0", "-0.99", "-1.01", "-2", "0", "1000.5",
        stricter("2e3", "bounded numbers are written without an exponent")]),
    ("number_exclusive_max_negative", {"type": "number", "exclusiveMaximum": -2}, [
        "-2", "-2.0", "-2.0001", "-3", "-100.25", "-1.5", "0"]),
    ("number_both_kinds_of_minimum", {"type": "number", "minimum": 0, "exclusiveMinimum": 0, "maximum": 2}, [
        "0", "0.1", "2", "2.5"]),
    ("string_length", {"type": "string", "minLength": 2, "maxLength": 5}, [
        q("a"), q("ab"), q("abcde"), q("abcdef"), r'"\n\t"', q("é日"), r'"\u00e9x"', q(""), "12"]),
    ("string_max0", {"type": "string", "maxLength": 0}, [q(""), q("a")]),
    ("pattern_anchored", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"}, [
        q("ABC-12"), q("ABC-1234"), q("AB-12"), q("ABC-12345"), q("abc-12"), "\"ABC-12"]),
    ("pattern_alternation", {"type": "string", "pattern": "^(foo|bar)(-[a-z]+)*$"}, [
        q("foo"), q("bar-x-yz"), q("baz"), q("foo-"), q("foobar")]),
    ("pattern_unanchored", {"type": "string", "pattern": "[0-9]+"}, [
        q("123"), q("abc"), q(""),
        stricter(q("abc123"), "patterns are matched in full")]),
    ("format_date", {"type": "string", "format": "date"}, [
        fmt(q("2024-01-15"), True), fmt(q("1999-12-31"), True), fmt(q("2024-1-15"), False),
        fmt(q("15/01/2024"), False), fmt(q("2024-01-15T00:00:00Z"), False), fmt(q("2024-13-01"), False)]),
    ("format_time", {"type": "string", "format": "time"}, [
        fmt(q("12:34:56Z"), True), fmt(q("23:59:59.123+02:00"), True), fmt(q("12:34"), False),
        fmt(q("noon"), False), fmt(q("25:00:00Z"), False)]),
    ("format_date_time", {"type": "string", "format": "date-time"}, [
        fmt(q("2024-01-15T12:34:56Z"), True), fmt(q("2024-01-15T12:34:56.789+02:00"), True),
        fmt(q("2024-01-15"), False), fmt(q("2024-01-15T12:34"), False), fmt(q("yesterday"), False)]),
    ("format_uuid", {"type": "string", "format": "uuid"}, [
        fmt(q("123e4567-e89b-12d3-a456-426614174000"), True), fmt(q("00000000-0000-0000-0000-000000000000"), True),
        fmt(q("123e4567e89b12d3a456426614174000"), False), fmt(q("123e4567-e89b-12d3-a456-42661417400g"), False),
        fmt(q("not-a-uuid"), False)]),
    ("format_email", {"type": "string", "format": "email"}, [
        fmt(q("john.doe@example.com"), True), fmt(q("a_b+c@mail.example.org"), True), fmt(q("john.doe"), False),
        fmt(q("example.com"), False)]),
    ("format_ipv4", {"type": "string", "format": "ipv4"}, [
        fmt(q("192.168.0.1"), True), fmt(q("0.0.0.0"), True), fmt(q("255.255.255.255"), True),
        fmt(q("256.1.1.1"), False), fmt(q("1.2.3"), False), fmt(q("a.b.c.d"), False)]),
    ("format_ipv6", {"type": "string", "format": "ipv6"}, [
        fmt(q("2001:db8::1"), True), fmt(q("::1"), True), fmt(q("::"), True),
        fmt(q("2001:0db8:0000:0000:0000:ff00:0042:8329"), True), fmt(q("2001:db8:::1"), False),
        fmt(q("12345::1"), False), fmt(q("g::1"), False), fmt(q("1:2:3:4:5:6:7:8:9"), False)]),
    ("format_hostname", {"type": "string", "format": "hostname"}, [
        fmt(q("example.com"), True), fmt(q("my-host.example.org"), True), fmt(q("localhost"), True),
        fmt(q("-bad.example.com"), False), fmt(q("exa mple.com"), False), fmt(q("under_score.com"), False)]),
    ("format_uri", {"type": "string", "format": "uri"}, [
        fmt(q("https://example.com/path?q=1#frag"), True), fmt(q("urn:isbn:0451450523"), True),
        fmt(q("mailto:someone@example.com"), True), fmt(q("not a uri"), False), fmt(q("example.com/path"), False)]),
    ("format_unknown", {"type": "string", "format": "kiln-unknown-format", "maxLength": 3}, [
        q("abc"), q(""), q("abcd"), "1"]),
    ("nullable", {"type": "string", "nullable": True}, [
        q("x"), "1", looser("null", "nullable (OpenAPI) is honoured; jsonschema ignores it")]),
    ("type_list", {"type": ["string", "null"]}, [q("x"), "null", "1", "[]"]),
    ("type_list_bounded", {"type": ["integer", "boolean"], "minimum": 0}, ["0", "7", "-1", "true", "\"x\"", "0.5"]),
    ("annotations_ignored", {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:x",
                             "title": "T", "description": "D", "$comment": "C", "examples": ["a"], "example": "b",
                             "type": "string", "default": "d", "deprecated": False, "readOnly": True,
                             "writeOnly": False}, [q("anything"), "1"]),
]

# Schemas json_schema_to_gbnf must refuse: the status code and a word the message must contain
# (the keyword, or what is wrong), and where given, the JSON pointer it must name.
REFUSALS = [
    ("not", {"not": {"type": "string"}}, "kUnsupported", "not", None),
    ("if_then_else", {"if": {"type": "string"}, "then": {"minLength": 1}, "else": {"type": "null"}},
     "kUnsupported", "if", None),
    ("unique_items", {"type": "array", "uniqueItems": True}, "kUnsupported", "uniqueItems", None),
    ("multiple_of_nested", {"type": "object", "properties": {"a": {"type": "array", "items": {
        "type": "integer", "multipleOf": 2}}}}, "kUnsupported", "multipleOf", "#/properties/a/items"),
    ("pattern_properties", {"type": "object", "patternProperties": {"^x": {}}}, "kUnsupported",
     "patternProperties", None),
    ("dependent_required", {"type": "object", "dependentRequired": {"a": ["b"]}}, "kUnsupported",
     "dependentRequired", None),
    ("dependent_schemas", {"dependentSchemas": {"a": {}}}, "kUnsupported", "dependentSchemas", None),
    ("min_properties", {"type": "object", "minProperties": 1}, "kUnsupported", "minProperties", None),
    ("max_properties", {"type": "object", "maxProperties": 1}, "kUnsupported", "maxProperties", None),
    ("contains", {"type": "array", "contains": {"type": "integer"}}, "kUnsupported", "contains", None),
    ("property_names", {"type": "object", "propertyNames": {"maxLength": 3}}, "kUnsupported", "propertyNames", None),
    ("unevaluated_properties", {"type": "object", "unevaluatedProperties": False}, "kUnsupported",
     "unevaluatedProperties", None),
    ("all_of_two", {"allOf": [{"type": "integer"}, {"minimum": 1}]}, "kUnsupported", "allOf", None),
    ("unknown_keyword", {"type": "string", "x-color": "red"}, "kUnsupported", "x-color", None),
    ("number_fractional_bound", {"type": "number", "minimum": 0.5}, "kUnsupported", "minimum", None),
    ("pattern_with_length", {"type": "string", "pattern": "^a+$", "maxLength": 3}, "kUnsupported", "pattern", None),
    ("remote_ref", {"$ref": "https://example.com/schema.json"}, "kUnsupported", "$ref", None),
    ("ref_with_sibling", {"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a", "maxLength": 3},
     "kUnsupported", "maxLength", None),
    ("false_schema", False, "kInvalidArgument", "false", None),
    ("dangling_ref", {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "kInvalidArgument",
     "#/$defs/missing", "#/properties/a"),
    ("bad_type", {"type": "strin"}, "kInvalidArgument", "strin", None),
    ("required_not_list", {"type": "object", "properties": {"a": {}}, "required": "a"}, "kInvalidArgument",
     "required", None),
]


def reject_constant(name):
    raise ValueError(name)  # NaN and Infinity are not JSON


def verdict(validator, text):
    try:
        instance = json.loads(text, parse_constant=reject_constant)
    except ValueError:
        return False
    return validator.is_valid(instance)


def build():
    names = set()
    schemas = []
    for name, schema, candidates in SCHEMAS:
        assert name not in names, name
        names.add(name)
        validator = Draft202012Validator(schema, format_checker=CHECKER)
        cases = []
        for c in candidates:
            c = {"text": c} if isinstance(c, str) else dict(c)
            valid = verdict(validator, c["text"])
            case = {"text": c["text"], "valid": valid, "expect": valid}
            if "format_ok" in c:
                f = schema["format"]
                if f in CHECKER.checkers:
                    assert valid == c["format_ok"], (name, c)
                else:  # jsonschema cannot check this format here: the hand verdict stands
                    case["valid"] = case["expect"] = c["format_ok"] and verdict(
                        Draft202012Validator({k: v for k, v in schema.items() if k != "format"}), c["text"])
            elif "stricter" in c:
                assert valid, (name, c)
                case.update(expect=False, stricter=True, note=c["stricter"])
            elif "looser" in c:
                assert not valid, (name, c)
                case.update(expect=True, looser=True, note=c["looser"])
            cases.append(case)
        assert any(x["expect"] for x in cases) and not all(x["expect"] for x in cases), name
        schemas.append({"name": name, "schema": schema, "cases": cases})
    refusals = []
    for name, schema, code, keyword, where in REFUSALS:
        assert name not in names, name
        names.add(name)
        r = {"name": name, "schema": schema, "code": code, "keyword": keyword}
        if where:
            r["where"] = where
        refusals.append(r)
    return {"generator": "scripts/gen_json_schema_cases.py", "schemas": schemas, "refusals": refusals}


def main():
    data = build()
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
    n = sum(len(s["cases"]) for s in data["schemas"])
    print(f"{OUT}: {len(data['schemas'])} schemas, {n} cases, {len(data['refusals'])} refusals")


if __name__ == "__main__":
    main()
