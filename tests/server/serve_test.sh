#!/usr/bin/env bash
# Runs tests/server/serve_test.py: `kiln serve` end to end with the openai client and raw HTTP
# (needs KILN_BIN and KILN_TESTDATA; skips when the openai module is missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/serve_test.py"
