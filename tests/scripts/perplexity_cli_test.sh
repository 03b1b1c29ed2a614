#!/usr/bin/env bash
# `kiln perplexity` smoke test on stories260K and the TinyStories excerpt with --ctx 128: a finite
# perplexity on a `ppl = ` line, the scored-token count llama.cpp's windowing gives
# (windows * (ctx - 1 - ctx/2)), and usage errors (exit 2) / missing files (exit 1).
set -euo pipefail
D="$KILN_TESTDATA/models/stories260K"
F="$KILN_TESTDATA/eval/tinystories_excerpt.txt"
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
[ -f "$D/stories260K.bin" ] && [ -f "$F" ] || skip_test "no test data ($D/stories260K.bin, $F)"
out=$("$KILN_BIN" perplexity -m "$D/stories260K.bin" -f "$F" --ctx 128 -t 2 2>/dev/null)
echo "$out"
python3 - "$out" <<'PY'
import math, sys
lines = dict(l.split(" = ") for l in sys.argv[1].splitlines() if " = " in l)
ppl, n = float(lines["ppl"]), int(lines["tokens scored"])
assert math.isfinite(ppl) and 1.0 < ppl < 50.0, ppl
assert n > 0 and n % 63 == 0, n
print("perplexity ok")
PY
set +e
env -u KILN_MODEL XDG_CACHE_HOME=/nonexistent "$KILN_BIN" perplexity -f "$F" 2>/dev/null; [ $? -eq 1 ] || { echo "missing -m and no default model: not exit 1"; exit 1; }
"$KILN_BIN" perplexity -m "$D/stories260K.bin" -f "$F" --ctx 0 2>/dev/null; [ $? -eq 2 ] || { echo "--ctx 0 accepted"; exit 1; }
"$KILN_BIN" perplexity -m "$D/stories260K.bin" -f /nonexistent 2>/dev/null; [ $? -eq 1 ] || { echo "missing file not exit 1"; exit 1; }
echo ok
