#!/usr/bin/env bash
# Runs tests/server/serve_test.py: `kiln serve` end to end with the openai client and raw HTTP
# (needs KILN_BIN and KILN_TESTDATA). Its exit status is the test's: 77 (skipped) without the test
# data or the openai module, 1 for those under KILN_TEST_STRICT=1, as tests/scripts/skip.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/serve_test.py"
