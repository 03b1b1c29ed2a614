# Sourced by the script tests (tests/scripts, tests/server, tests/gpu): how a test that cannot run
# says so. skip_test MSG exits 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE 77), never as
# "Passed". Under KILN_TEST_STRICT=1, which scripts/test sets, it exits 1 instead: CI always has
# ../shared/testdata and the Python modules scripts/setup installs, so a missing one there is a
# broken setup, not a reason to pass.
skip_test() {
    if [ "${KILN_TEST_STRICT:-0}" = "1" ]; then
        echo "FAIL (KILN_TEST_STRICT=1, so this skip is a failure): $*"
        exit 1
    fi
    echo "SKIPPED: $*"
    exit 77
}
