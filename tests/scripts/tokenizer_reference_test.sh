#!/usr/bin/env bash
# Reference comparison: kiln's tokenizers vs HF tokenizers and sentencepiece on all 2891 non-empty
# lines of wikitext-2 test (see compare_tokenizers.py). Needs KILN_BIN (path to the kiln binary),
# KILN_TESTDATA and KILN_SOURCE_DIR (CTest sets them). Takes ~30 s with a debug build on 2 cores.
set -euo pipefail
: "${KILN_BIN:?KILN_BIN must point to the kiln binary}"
: "${KILN_TESTDATA:?KILN_TESTDATA must point to the shared test data}"
here="${KILN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
exec "${PYTHON:-python3}" "$here/tests/scripts/compare_tokenizers.py" --kiln "$KILN_BIN" --testdata "$KILN_TESTDATA" "$@"
