#!/usr/bin/env bash
# `kiln generate` sampling flags on stories260K: the same --seed gives the same text twice, --temp 0
# (and an explicit -p "") reproduces the greedy golden prefix, --stop cuts the text just before the
# stop string, and out-of-range or malformed sampling values are usage errors (exit 2) with a message.
set -euo pipefail
D="$KILN_TESTDATA/models/stories260K"
[ -f "$D/stories260K.bin" ] || { echo "no test data, skipping"; exit 0; }
M="$D/stories260K.bin"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$KILN_BIN" generate -m "$M" -n 64 -t 2 --temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.02 --seed 1234 2>/dev/null > "$T/a.txt"
"$KILN_BIN" generate -m "$M" -n 64 -t 1 --temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.02 --seed 1234 2>/dev/null > "$T/b.txt"
cmp "$T/a.txt" "$T/b.txt" || { echo "same seed, different text"; exit 1; }
[ -s "$T/a.txt" ] || { echo "sampled text empty"; exit 1; }
"$KILN_BIN" generate -m "$M" -p "" -n 120 -t 2 --temp 0 --repeat-penalty 1 2>/dev/null > "$T/g.txt"
"$KILN_BIN" generate -m "$M" -n 120 -t 2 --stop "Lily" 2>/dev/null > "$T/s.txt"
python3 - "$T/g.txt" "$T/s.txt" "$D/greedy_empty_prompt_256.txt" <<'PY'
import sys
greedy, stopped, want = (open(p).read() for p in sys.argv[1:4])
greedy, stopped = greedy.rstrip("\n"), stopped.rstrip("\n")
assert want.startswith(greedy) and len(greedy) > 100, (greedy[:100], want[:100])
cut = want.index("Lily")
assert stopped == want[:cut], (stopped, want[:cut])
print("greedy prefix ok, stop ok:", repr(stopped))
PY
set +e
for bad in "--top-p 2" "--temp -1" "--presence-penalty 3" "--temp abc" "--seed -1"; do
    "$KILN_BIN" generate -m "$M" -n 4 $bad 2> "$T/err.txt" > /dev/null
    rc=$?
    [ $rc -eq 2 ] || { echo "$bad: exit $rc, want 2"; exit 1; }
    [ -s "$T/err.txt" ] || { echo "$bad: no message"; exit 1; }
done
grep -q "top_p" <("$KILN_BIN" generate -m "$M" --top-p 2 2>&1) || { echo "--top-p 2 message does not name top_p"; exit 1; }
echo ok
