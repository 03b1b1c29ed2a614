#!/usr/bin/env python3
"""Generates tests/golden/data/regex_cases.json for tests/unit/grammar_regex_test.cc:

- "patterns": regular expressions in the subset grammar/regex.h supports, each with candidate strings
  and whether Python's re.fullmatch accepts them. Patterns that use \\d \\w \\s (or their negations)
  are matched with re.ASCII (kiln's meanings are ASCII; Python's default is Unicode): the flags used
  are recorded per case. A case whose syntax Python lacks (ECMAScript's (?<name>...), \\u{...}) gives
  the equivalent Python spelling in "python_pattern".
- "refusals": patterns regex_to_gbnf must refuse, with the status code and a word of the message
  (the construct's name). The malformed ones ("invalid") are checked to be errors for Python too.
- "formats": sample strings per JSON Schema format with the verdict. For date, time, date-time,
  uuid, ipv4 and ipv6 the verdict is jsonschema's draft 2020-12 FORMAT_CHECKER (with rfc3339-validator installed
  for the RFC 3339 formats; format_gbnf accepts exactly what it accepts). For email, hostname and
  uri (where the checker is missing or only looks for an '@') the verdicts are the practical
  subset regex.h documents, written here by hand.

Deterministic; run once and commit the output: python3 scripts/gen_regex_cases.py
"""
import json
import os
import re

from jsonschema import Draft202012Validator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "data", "regex_cases.json")

# Strings tried against most patterns, beside each pattern's own.
COMMON = ["", "a", "\n"]

# (pattern, candidate strings[, python_pattern])
PATTERNS = [
    # literals, alternation, grouping
    ("abc", ["abc", "ab", "abcd", "ABC", "abc\n", " abc"]),
    ("a|b|c", ["b", "c", "ab", "d", "|"]),
    ("ab|cd|", ["ab", "cd", "abcd", "c"]),
    ("(ab)+", ["ab", "abab", "aba", "ba", "ababab"]),
    ("(?:ab)*c", ["c", "abc", "ababc", "abac", "ab"]),
    ("((a|b)c)*d", ["d", "acd", "bcacd", "abcd", "acbd", "cd"]),
    ("(a(b(c)?)?)?", ["ab", "abc", "ac", "abcc", "b"]),
    ("(a|ab)(c|bcd)(d*)", ["ac", "abcd", "abcdd", "acd", "abd", "abc"]),
    ("x(?:y|z(?:w|v))q", ["xyq", "xzwq", "xzvq", "xzq", "xyzq", "xq"]),
    # quantifiers
    ("a?b?c?", ["b", "ac", "abc", "cba", "aa", "bc"]),
    ("a{3}", ["aa", "aaa", "aaaa"]),
    ("a{2,}", ["aa", "aaaaaaa", "aab"]),
    ("a{2,4}", ["aa", "aaa", "aaaa", "aaaaa"]),
    ("a{,2}b", ["b", "ab", "aab", "aaab", "a"]),
    ("a{0}b", ["b", "ab"]),
    ("x{1,1}y{0,1}", ["x", "xy", "xx", "y", "xyy"]),
    ("(ab){1,2}c{2}", ["abcc", "ababcc", "abc", "abababcc", "cc"]),
    ("a*?b+?c??", ["b", "abbc", "aaabbbc", "ac", "bcc", "abb"]),
    ("(a|b){2,3}?", ["ab", "bab", "abab", "b", "ba"]),
    ("a+?", ["aaaa", "b"]),
    # sub-expressions that can be empty, repeated
    ("(a*)*", ["aaa", "b", "aab"]),
    ("(a?|b)+", ["ab", "bbb", "aba", "c", "abc"]),
    ("(|a)+b", ["b", "ab", "aaab", "ba"]),
    ("((a?)(b?))*c", ["c", "abc", "babac", "bbc", "ac", "acb", "cc"]),
    ("(a?b?){2}", ["ab", "abab", "ba", "aba", "ababab", "bb"]),
    ("(a?b?c?)+", ["cba", "abcabc", "ccc", "abd"]),
    ("((a?b?){3}c?)*d", ["d", "abcd", "bbbbcad", "cd", "abc", "dd"]),
    ("(a*b*)*c", ["c", "abababc", "bac", "ab"]),
    ("(a?b?){2,3}x", ["x", "ababx", "abababx", "ababababx", "bbbx", "bbbbx"]),
    # classes
    ("[abc]+", ["abc", "cab", "abd", "aaaa"]),
    ("[a-z0-9_]+", ["hello_42", "Hello", "x-y", "z9_"]),
    ("[^a-z]", ["A", "0", "z", "é", "中", "ab", "\U0001F600"]),
    ("[^abc]+", ["xyz", "xaz", "dd", "é中"]),
    ("[]a]+", ["]", "a]a", "b", "[]"]),
    ("[^]a]", ["]", "b", "[", "ba"]),
    ("[a-]+", ["a-a", "-", "b"]),
    ("[-a]+", ["a-a", "--", "b"]),
    (r"[\]\-\\^]+", ["]", "-", "\\", "^", "]-\\^", "a", "["]),
    (r"[\^a]", ["^", "a", "\\", "b"]),
    (r"[\x00-\x1f]+", ["\x00", "\t\n\x1f", " ", "\x7f"]),
    (r"[\b]", ["\b", "b", "\\"]),
    ("[à-ÿ]+", ["àéÿ", "ä", "z", "Ā", "ß"]),
    ("[一-龥]+", ["中文", "中a", "龥", "ぁ"]),
    ("[^é]", ["é", "e", "É", "x", "中"]),
    ("[😀-😂]", ["😀", "😁", "😂", "😃", "☺"]),
    (r"[\u4e00-\u9fff]+", ["中文字", "中x", "\u9fff"]),
    # \d \w \s and their negations, inside classes too
    (r"\d+", ["0123456789", "12a", "٣", "١٢", "+1"]),
    (r"\D+", ["abc", "a1", "٣", "--"]),
    (r"\w+", ["hello_World_42", "héllo", "ß", "a-b", "A_z"]),
    (r"\W+", ["-+ ", "é", "中", "a", "_", " \t"]),
    (r"\s+", [" \t\n\r\f\v", "\u00a0", " x", "\u2028", "  "]),
    (r"\S+", ["abc", "a b", "\u00a0", "é中"]),
    (r"[\d\s]+", ["1 2\t3", "1a", " "]),
    (r"[^\d\s]+", ["abc", "a1", "a b", "é中", "_-"]),
    (r"[\W\d]+", ["1-2 3", "a", "_", "é9"]),
    (r"[^\W\d]+", ["abc_XYZ", "a1", "é", "_"]),
    (r"[\s\S]*", ["anything\n at all", "é\n中"]),
    (r"\d{3}-\d{4}", ["555-1234", "5551234", "55-12345", "555-12a4"]),
    (r"(?P<year>\d{4})-(?P<month>\d{2})", ["2024-05", "2024-5", "24-05"]),
    ("(?<pair>ab)+c", ["abc", "ababc", "c"], "(?P<pair>ab)+c"),
    # '.'
    (".", ["b", "é", "中", "\U0001F600", "\r", "ab"]),
    (".*", ["abc def", "a\nb", "é中\t", "\r\r"]),
    ("a.c", ["abc", "a.c", "aéc", "a\nc", "ac"]),
    # Unicode literals
    ("é+", ["é", "ééé", "e", "É", "e\u0301"]),
    ("中文?", ["中", "中文", "文", "中文文"]),
    ("\U0001F600+!", ["\U0001F600!", "\U0001F600\U0001F600!", "!", "\U0001F601!"]),
    # escapes
    (r"\u00e9\x41\n?", ["éA", "éA\n", "eA", "é\\x41"]),
    (r"\u{e9}\u{1F600}", ["é\U0001F600", "é"], r"\u00e9\U0001F600"),
    (r"\U0001F600", ["\U0001F600", "\\U0001F600"]),
    (r"\t\r\f\v\0", ["\t\r\f\v\x00", "\t\r\f\v", "trfv0"]),
    (r"\.\*\+\?\(\)\[\]\{\}\|\^\$\\", [".*+?()[]{}|^$\\", ".*+?()[]{}|^$", "a*+?()[]{}|^$\\"]),
    (r"\/\-\ \#\&\~\"", ["/- #&~\"", "/-#&~\""]),
    ('"[^"\\\\]*"', ['"abc"', '""', '"a\\"', '"a"b"', '"é"', "'a'"]),
    # literal braces and brackets (Python reads them as literals when they are no quantifier)
    ("a{", ["a{", "a"]),
    ("a{1,2", ["a{1,2", "a"]),
    ("x{}", ["x{}", "x"]),
    ("a{ 2}", ["a{ 2}", "aa"]),
    ("}]", ["}]", "}"]),
    # anchors around the whole pattern
    ("^abc$", ["abc", "abc\n", "xabc"]),
    ("^(a|b)+$", ["abba", "abc", "b"]),
    ("^a|b$", ["a", "b", "ab", "ba"]),
    ("^$", ["x"]),
    ("", ["x", " "]),
    # practical ones
    (r"[0-9]{1,3}(\.[0-9]{1,3}){3}", ["192.168.0.1", "1.2.3", "1234.1.1.1", "1.2.3.4.5", "999.999.999.999"]),
    ("[A-Z][a-z]*( [A-Z][a-z]*)*", ["Hello World", "Hello world", "Hello  World", "A B C", "Élan"]),
    (r"(?:[a-z0-9]+\.)+[a-z]{2,}", ["example.com", "a.b.cd", "com", "example.c", "ex-ample.com"]),
    (r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?", ["0", "-0", "12.5e-3", "01", "1.", "-", "3E7", "1e"]),
]

# (pattern, code, a word the message must contain)
REFUSALS = [
    ("(?=a)a", "unsupported", "lookahead"),
    ("(?!a)b", "unsupported", "lookahead"),
    ("(?<=a)b", "unsupported", "lookbehind"),
    ("(?<!a)b", "unsupported", "lookbehind"),
    (r"(a)\1", "unsupported", "backreference"),
    ("(?P<n>a)(?P=n)", "unsupported", "backreference"),
    (r"(?<n>a)\k<n>", "unsupported", "backreference"),
    (r"\bword\b", "unsupported", "word boundary"),
    (r"a\Bb", "unsupported", "word boundary"),
    ("a^b", "unsupported", "anchor"),
    ("a$b", "unsupported", "anchor"),
    ("(^a)", "unsupported", "anchor"),
    (r"\Aabc", "unsupported", "anchor"),
    (r"abc\Z", "unsupported", "anchor"),
    ("(?i)abc", "unsupported", "inline flags"),
    ("a(?s:.)", "unsupported", "inline flags"),
    ("a*+", "unsupported", "possessive"),
    ("a{2}+", "unsupported", "possessive"),
    ("(ab)++", "unsupported", "possessive"),
    (r"\p{L}+", "unsupported", "Unicode property"),
    ("(?#note)a", "unsupported", "comment group"),
    ("(?>a)", "unsupported", "atomic group"),
    ("a{10001}", "unsupported", "repetition bound"),
    ("[^\\s\\S]", "unsupported", "matches nothing"),
    ("(ab", "invalid", "missing ')'"),
    ("ab)", "invalid", "unbalanced parenthesis"),
    ("[z-a]", "invalid", "bad character range"),
    (r"[\d-z]", "invalid", "bad character range"),
    ("a{3,2}", "invalid", "n > m"),
    ("*a", "invalid", "nothing to repeat"),
    ("a|?", "invalid", "nothing to repeat"),
    ("a**", "invalid", "multiple repeat"),
    ("[abc", "invalid", "unterminated character class"),
    (r"\q", "invalid", "bad escape"),
    (r"\x4", "invalid", "incomplete escape"),
    ("ab\\", "invalid", "trailing backslash"),
]

# Formats jsonschema decides (draft 2020-12 FORMAT_CHECKER, rfc3339-validator installed).
CHECKED_FORMATS = {
    "date": ["2024-01-31", "2024-02-29", "2023-02-29", "2100-02-29", "2000-02-29", "1900-02-29", "2024-04-30",
             "2024-04-31", "2024-13-01", "2024-00-10", "2024-12-00", "0000-01-01", "0001-01-01", "9999-12-31",
             "2024-1-01", "24-01-01", "2024/01/01", "2024-01-01T00:00:00Z", "", "2024-06-15 ", "20240615"],
    "time": ["12:34:56Z", "23:59:59+05:30", "00:00:00.123456-08:00", "24:00:00Z", "12:60:00Z", "12:34:60Z",
             "12:34:56", "12:34:56z", "12:34:56+5:30", "12:34Z", "12:34:56.Z", "1:02:03Z", "12:34:56+24:00",
             "12:34:56-23:59", ""],
    "date-time": ["2024-06-15T12:34:56Z", "2024-06-15t12:34:56z", "2024-06-15T12:34:56.5+01:00",
                  "2024-02-30T00:00:00Z", "2024-06-15 12:34:56Z", "2024-06-15T12:34:56", "2024-06-15",
                  "2024-06-15T25:00:00Z", "1996-12-19T16:39:57-08:00", "1990-12-31T23:59:60Z", ""],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
             "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
             "123e4567-e89b-12d3-a456-4266141740000", "g23e4567-e89b-12d3-a456-426614174000",
             "{123e4567-e89b-12d3-a456-426614174000}", "00000000-0000-0000-0000-000000000000", ""],
    "ipv4": ["192.168.0.1", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5",
             "1.2.3.04", "10.0.0.255", "1.2.3.-1", " 1.2.3.4", "1..2.3", ""],
    "ipv6": ["::", "::1", "1::", "2001:db8::1", "2001:0db8:0000:0000:0000:ff00:0042:8329", "1:2:3:4:5:6:7:8",
             "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", "::1:2:3:4:5:6:7", "1:2:3:4:5:6:7::", "1::2::3",
             "::ffff:192.168.0.1", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4", "::1.2.3.04", "fe80::1%eth0",
             "12345::", "ABCD:EF01::", "g::1", ":1:2:3:4:5:6:7", "1:2:3:4:5:6:7:", "::1.2.3.4:5", "1::1.2.3.4", ""],
}

# Formats whose verdicts are kiln's practical subset (see regex.h / regex_formats.cc).
SUBSET_FORMATS = {
    "email": [("user@example.com", True), ("first.last+tag@mail.example.co.uk", True),
              ("o'brien!#$%&*/=?^_`{|}~-@x.io", True), ("a@b.c", True), ("user@localhost", False),
              ("user@@example.com", False), ("@example.com", False), ("user@", False), (".user@example.com", False),
              ("us..er@example.com", False), ("user.@example.com", False), ("us er@example.com", False),
              ('"quoted"@example.com', False), ("user@-example.com", False), ("user@example-.com", False),
              ("user@example..com", False), ("user@exa_mple.com", False), ("usér@example.com", False), ("", False)],
    "hostname": [("example.com", True), ("localhost", True), ("a", True), ("xn--bcher-kva.example", True),
                 ("my-host.example-1.org", True), ("1.2.3.4", True), ("a" * 63 + ".com", True),
                 ("a" * 64 + ".com", False), ("-example.com", False), ("example-.com", False),
                 ("example..com", False), ("example.com.", False), (".example.com", False),
                 ("ex_ample.com", False), ("exa mple.com", False), ("bücher.de", False), ("", False)],
    "uri": [("https://example.com/path?q=1&r=2#frag", True), ("mailto:user@example.com", True),
            ("urn:isbn:0451450523", True), ("ftp://[2001:db8::1]:21/file", True), ("a+b-c.d:x", True),
            ("http://example.com/a%20b", True), ("file:///etc/passwd", True), ("http://ex.com/~u/(x);y,z*!$'", True),
            ("example.com", False), ("://example.com", False), ("1http://example.com", False), ("http:", False),
            ("http://exa mple.com", False), ('http://example.com/"q"', False), ("http://example.com/a\\b", False),
            ("http://example.com/<x>", False), ("http://example.com/%2", False), ("http://example.com/%zz", False),
            ("http://ex.com/é", False), ("", False)],
}


def gen_patterns():
    out = []
    for entry in PATTERNS:
        pattern, strings = entry[0], entry[1]
        py_pattern = entry[2] if len(entry) > 2 else pattern
        ascii_flag = re.search(r"\\[dDwWsS]", py_pattern) is not None
        compiled = re.compile(py_pattern, re.ASCII if ascii_flag else 0)
        seen, cases = set(), []
        for s in strings + COMMON:
            if s in seen:
                continue
            seen.add(s)
            cases.append({"s": s, "match": compiled.fullmatch(s) is not None})
        item = {"pattern": pattern}
        if py_pattern != pattern:
            item["python_pattern"] = py_pattern
        item["python_flags"] = "ASCII" if ascii_flag else ""
        item["cases"] = cases
        out.append(item)
    return out


def gen_refusals():
    out = []
    for pattern, code, construct in REFUSALS:
        if code == "invalid":
            try:
                re.compile(pattern)
            except re.error:
                pass
            else:
                raise SystemExit(f"{pattern!r} is marked malformed but Python's re accepts it")
        out.append({"pattern": pattern, "code": code, "construct": construct})
    return out


def gen_formats():
    checker = Draft202012Validator.FORMAT_CHECKER  # a bare FormatChecker() reads "time" as draft 3's
    out = {}
    for fmt, samples in CHECKED_FORMATS.items():
        if fmt not in checker.checkers:
            raise SystemExit(f"jsonschema has no checker for {fmt!r} (install rfc3339-validator)")
        out[fmt] = {"oracle": "jsonschema Draft202012Validator.FORMAT_CHECKER",
                    "cases": [{"s": s, "match": checker.conforms(s, fmt)} for s in samples]}
    for fmt, samples in SUBSET_FORMATS.items():
        out[fmt] = {"oracle": "kiln subset (hand-written)", "cases": [{"s": s, "match": ok} for s, ok in samples]}
    # An accepted email must at least be one for jsonschema (which only looks for an "@").
    for c in out["email"]["cases"]:
        assert not c["match"] or checker.conforms(c["s"], "email"), c
    return out


def main():
    data = {
        "generator": "scripts/gen_regex_cases.py",
        "patterns": gen_patterns(),
        "refusals": gen_refusals(),
        "formats": gen_formats(),
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=True, indent=1)
        f.write("\n")
    n = sum(len(p["cases"]) for p in data["patterns"])
    print(f"wrote {OUT}: {len(data['patterns'])} patterns ({n} strings), {len(data['refusals'])} refusals, "
          f"{len(data['formats'])} formats")


if __name__ == "__main__":
    main()
