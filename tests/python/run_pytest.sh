#!/usr/bin/env bash
# Runs one tests/python/test_*.py with pytest against the kiln package of this build (PYTHONPATH =
# build/<preset>/python, set by tests/CMakeLists.txt). Checks what the tests need first, because a
# test pytest skips would still count as passed: exit 77 (CTest: Skipped) without pytest, the built
# package, SmolLM2 (scripts/setup installs it) or ../shared/testdata; 1 for those under
# KILN_TEST_STRICT=1, as tests/scripts/skip.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/skip.sh"
test_file="$1"
python3 -c "import pytest" 2>/dev/null || skip_test "$test_file: no pytest (pip install -r scripts/requirements.txt)"
python3 -c "import kiln._kiln" 2>/dev/null || skip_test "$test_file: the kiln package is not built (KILN_PYTHON=ON)"
smol="$HOME/.cache/kiln/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -e "$smol" ] || skip_test "$test_file: no SmolLM2 GGUF at $smol (scripts/setup installs it)"
[ -e "${KILN_TESTDATA:-}/models/stories260K/stories260K.bin" ] || skip_test "$test_file: no test data (KILN_TESTDATA)"
cd "$here"
exec python3 -m pytest -q -p no:cacheprovider "$test_file"
