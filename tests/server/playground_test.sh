#!/usr/bin/env bash
# Runs tests/server/playground_test.py: the playground and the dashboard of `kiln serve` in headless
# chromium through Playwright (needs KILN_BIN and KILN_TESTDATA). Exit 77 (skipped) without Playwright,
# chromium or SmolLM2; 1 for those under KILN_TEST_STRICT=1, as tests/scripts/skip.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/playground_test.py"
