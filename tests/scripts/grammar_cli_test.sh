#!/usr/bin/env bash
# `kiln grammar` and `kiln generate`'s structured-output flags end to end: the GBNF a regex / choice /
# schema compiles to (checked by the grammar's own behaviour: --check accepts a matching text and
# refuses a near miss, exit 0 / 1), refusals that name the keyword (exit 1), usage errors (exit 2), and
# `kiln generate --choice` printing one of the choices (stories260K: a model with a 512-token vocabulary).
set -euo pipefail
: "${KILN_BIN:?}" "${KILN_TESTDATA:?}"
M="$KILN_TESTDATA/models/stories260K/stories260K.bin"
TOK="$KILN_TESTDATA/models/stories260K/tok512.bin"
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
[ -f "$M" ] || skip_test "no test data ($M)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "grammar_cli_test: $*" >&2; exit 1; }

"$KILN_BIN" grammar --choice yes --choice "no way" | grep -q '^root ::= ' || fail "choice grammar not printed"
printf 'no way' > "$T/choice.txt"
"$KILN_BIN" grammar --choice yes --choice "no way" --choice no -m "$TOK" --check "$T/choice.txt" > /dev/null ||
    fail "'no way' is not one of the choices"
printf 'no wa' > "$T/choice.txt"
if "$KILN_BIN" grammar --choice yes --choice "no way" -m "$TOK" --check "$T/choice.txt" > /dev/null; then
    fail "'no wa' passed as a whole choice"
fi
"$KILN_BIN" grammar --regex '[a-c]{2}|x\d+' | grep -q '^root ::= ' || fail "regex grammar not printed"

cat > "$T/schema.json" <<'J'
{"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer", "minimum": 1, "maximum": 12}},
 "required": ["name", "n"]}
J
printf '{"name": "Lily", "n": 7}\n' > "$T/good.json"
printf '{"name": "Lily", "n": 13}\n' > "$T/bad.json"
"$KILN_BIN" grammar --json-schema "$T/schema.json" -m "$TOK" --check "$T/good.json" > "$T/good.out" ||
    fail "a valid instance was refused: $(cat "$T/good.out")"
grep -q "whole sentence" "$T/good.out" || fail "no verdict: $(cat "$T/good.out")"
grep -q "cold masks" "$T/good.out" || fail "no timings: $(cat "$T/good.out")"
if "$KILN_BIN" grammar --json-schema "$T/schema.json" -m "$TOK" --check "$T/bad.json" > "$T/bad.out"; then
    fail "n = 13 passed a schema with maximum 12"
fi
# Several texts: later ones timed with the tables kept; one that is not whole fails the run and is named.
printf '{"name": "Tom", "n": 12}\n' > "$T/good2.json"
"$KILN_BIN" grammar --json-schema "$T/schema.json" -m "$TOK" --check "$T/good.json" --check "$T/good2.json" > "$T/two.out" ||
    fail "two valid instances were refused: $(cat "$T/two.out")"
grep -q "seen ($T/good2.json) masks" "$T/two.out" && grep -q "every text is a whole sentence" "$T/two.out" ||
    fail "second text: $(cat "$T/two.out")"
printf '{"name": "Tom", "n": 1' > "$T/part.json"
if "$KILN_BIN" grammar --json-schema "$T/schema.json" -m "$TOK" --check "$T/good.json" --check "$T/part.json" > "$T/two.out"; then
    fail "a prefix passed as a whole text"
fi
grep -q "$T/part.json is a prefix of a sentence" "$T/two.out" || fail "the prefix not named: $(cat "$T/two.out")"

set +e
"$KILN_BIN" grammar --json-schema '{"type": "object", "patternProperties": {}}' 2> "$T/err"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "patternProperties" "$T/err" || fail "refusal: rc $rc, $(cat "$T/err")"
set +e
"$KILN_BIN" grammar --regex a --choice b 2> "$T/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "at most one" "$T/err" || fail "two specs: rc $rc, $(cat "$T/err")"

text=$("$KILN_BIN" generate -m "$M" -p "Once upon a time" --choice "Lily" --choice "Tom went home" --temp 1 --seed 3 -t 2 2>/dev/null)
[ "$text" = "Lily" ] || [ "$text" = "Tom went home" ] || fail "generate --choice printed '$text'"
text=$("$KILN_BIN" generate -m "$M" -p "Once" --regex '[0-9]{3}' -t 2 2>/dev/null)
[[ "$text" =~ ^[0-9]{3}$ ]] || fail "generate --regex printed '$text'"
echo "grammar_cli_test: ok"
