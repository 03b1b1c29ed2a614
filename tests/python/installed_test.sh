#!/usr/bin/env bash
# The kiln package as `pip install .` installed it (scripts/setup does): importable from outside the
# source and build trees, its extension inside the installed package, and the same greedy tokens as
# the package of this build (PYTHONPATH). Exit 77 (skipped; 1 under KILN_TEST_STRICT=1) when it is
# not installed or the test data is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/skip.sh"
model="${KILN_TESTDATA:-}/models/stories260K/stories260K.bin"
[ -e "$model" ] || skip_test "no test data (KILN_TESTDATA)"
probe='
import sys, kiln
llm = kiln.LLM(sys.argv[1], threads=1)
[o] = llm.generate("Once upon a time", kiln.SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
print(kiln.__file__)
print(kiln._kiln.__file__)
print(o.outputs[0].token_ids)
'
cd "$(mktemp -d)"
installed=$(env -u PYTHONPATH python3 -c "$probe" "$model" 2>/dev/null) ||
    skip_test "the kiln package is not installed (bash scripts/setup runs pip install .)"
built=$(python3 -c "$probe" "$model")
echo "installed: $(echo "$installed" | sed -n 1p)"
echo "built:     $(echo "$built" | sed -n 1p)"
case "$(echo "$installed" | sed -n 1p)" in
    */site-packages/kiln/__init__.py | */dist-packages/kiln/__init__.py) ;;
    *) echo "FAIL: the installed kiln is not in site-packages"; exit 1 ;;
esac
[ "$(dirname "$(echo "$installed" | sed -n 2p)")" = "$(dirname "$(echo "$installed" | sed -n 1p)")" ] ||
    { echo "FAIL: the extension is not inside the installed package"; exit 1; }
[ "$(echo "$installed" | sed -n 3p)" = "$(echo "$built" | sed -n 3p)" ] ||
    { echo "FAIL: installed and built packages differ: $(echo "$installed" | sed -n 3p) vs $(echo "$built" | sed -n 3p)"; exit 1; }
echo "ok: same greedy tokens"
