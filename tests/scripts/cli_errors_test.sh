#!/usr/bin/env bash
# The kiln command line on bad input: a clear message on stderr and exit 1 (bad file) or 2 (bad
# usage), never a crash. Also checks that --help exits 0 and that inspect --json is valid JSON.
set -uo pipefail
: "${KILN_BIN:?}"; : "${KILN_TESTDATA:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
# expect CODE PATTERN CMD...: exit status CODE and stderr matching PATTERN.
expect() {
    local code=$1 pattern=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ "$rc" -eq "$code" ] && grep -qE -- "$pattern" "$tmp/err"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL: $* -> exit $rc (want $code), stderr: $(head -c 300 "$tmp/err")"
    fi
}
printf 'GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff' > "$tmp/bad.gguf"
head -c 1000 "$KILN_TESTDATA/models/stories260K/stories260K.bin" > "$tmp/short.bin"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":' > "$tmp/bad.safetensors"
expect 1 "cannot open|not found" "$KILN_BIN" inspect "$tmp/missing.gguf"
expect 1 "corrupt: .*bad.gguf: .*byte offset" "$KILN_BIN" inspect "$tmp/bad.gguf"
expect 1 "past the end|truncated|too short" "$KILN_BIN" inspect "$tmp/short.bin"
expect 1 "header|JSON|json" "$KILN_BIN" inspect "$tmp/bad.safetensors"
expect 1 "." "$KILN_BIN" tokenize -m "$tmp/bad.gguf" hello
expect 1 "." "$KILN_BIN" tokenize -m "$tmp/missing.json" hello
# `kiln serve` with a model that fails to load at once: exit 1, never a listener left running (it
# used to hang in most runs: httplib's stop() came before its listen loop had started). timeout
# turns a hang into exit 124; ten runs, since it was a race.
for _ in 1 2 3 4 5 6 7 8 9 10; do
    expect 1 "cannot open|not found" timeout 30 "$KILN_BIN" serve -m "$tmp/missing.gguf" --port 0
done
expect 2 "unknown option" "$KILN_BIN" inspect --frobnicate x
expect 2 "unknown command" "$KILN_BIN" frobnicate
expect 2 "usage" "$KILN_BIN" tokenize hello
expect 2 "." "$KILN_BIN" convert "$KILN_TESTDATA/models/stories260K/stories260K.bin" "$tmp/x" --to onnx
expect 1 "." "$KILN_BIN" detokenize -m "$KILN_TESTDATA/models/stories260K/tok512.bin" 99999
for c in inspect tokenize detokenize convert; do
    if "$KILN_BIN" $c --help | grep -q "usage: kiln $c"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $c --help"; fi
done
if "$KILN_BIN" inspect --json "$KILN_TESTDATA/models/stories260K/stories260K.bin" | python3 -c \
    'import json,sys; j=json.load(sys.stdin); assert j["config"]["num_layers"]==5 and len(j["tensors"])==47'; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL: inspect --json"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
