#!/usr/bin/env bash
# `kiln logits` and `kiln generate` on stories260K: the logits lines match
# logits_top5_once_upon_a_time.txt (same positions, input ids and top-5 ids; logits within 1e-4) for
# 1 and 3 threads and the scalar kernels (--isa ref), the tokenizer is found beside the .bin, greedy generation from BOS reproduces the
# golden text, bad arguments are usage errors (exit 2), and without -m or a default model the error
# says so.
set -euo pipefail
D="$KILN_TESTDATA/models/stories260K"
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
[ -f "$D/stories260K.bin" ] || skip_test "no test data ($D/stories260K.bin)"
for opts in "-t 1" "-t 3" "-t 2 --isa ref"; do
    "$KILN_BIN" logits -m "$D/stories260K.bin" -p "Once upon a time" $opts > /tmp/kiln_logits_$$.txt
    python3 - /tmp/kiln_logits_$$.txt "$D/logits_top5_once_upon_a_time.txt" <<'PY'
import sys
def rows(path):
    return [l.split() for l in open(path) if l.strip() and not l.startswith("#")]
got, want = rows(sys.argv[1]), rows(sys.argv[2])
assert len(got) == len(want), (len(got), len(want))
worst = 0.0
for g, w in zip(got, want):
    assert g[:2] == w[:2], (g, w)
    assert len(g) == len(w), (g, w)
    for a, b in zip(g[2:], w[2:]):
        ia, va = a.split(":"); ib, vb = b.split(":")
        assert ia == ib, (g, w)
        worst = max(worst, abs(float(va) - float(vb)))
assert worst <= 1e-4, worst
print(f"logits ok, max abs error {worst:.2g}")
PY
done
rm -f /tmp/kiln_logits_$$.txt
"$KILN_BIN" generate -m "$D/stories260K.bin" -n 256 -t 2 2>/dev/null > /tmp/kiln_gen_$$.txt
python3 - /tmp/kiln_gen_$$.txt "$D/greedy_empty_prompt_256.txt" <<'PY'
import sys
got, want = open(sys.argv[1]).read().rstrip("\n"), open(sys.argv[2]).read().rstrip("\n")
# generate stops at EOS; the golden may run past one, so compare the common prefix and require it be long.
assert want.startswith(got) and len(got) > 200, (got[:200], want[:200])
print("generate ok")
PY
rm -f /tmp/kiln_gen_$$.txt
set +e
msg=$(env -u KILN_MODEL XDG_CACHE_HOME=/nonexistent "$KILN_BIN" logits -p x 2>&1)
[ $? -eq 1 ] && grep -q "default model" <<< "$msg" || { echo "missing -m and no default model: $msg"; exit 1; }
"$KILN_BIN" logits -m "$D/stories260K.bin" -p x --isa bogus 2>/dev/null; [ $? -eq 2 ] || { echo "--isa bogus not a usage error"; exit 1; }
"$KILN_BIN" logits -m "$D/stories260K.bin" -p x -t 0 2>/dev/null; [ $? -eq 2 ] || { echo "-t 0 not a usage error"; exit 1; }
"$KILN_BIN" logits -m "$D/stories260K.bin" -p x -t 0 2>/dev/null; [ $? -eq 2 ] || { echo "-t 0 accepted"; exit 1; }
"$KILN_BIN" logits -m /nonexistent -p x 2>/dev/null; [ $? -eq 1 ] || { echo "missing model not exit 1"; exit 1; }
echo ok
