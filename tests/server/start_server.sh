# Sourced by the tests/server scripts (not a test itself: no _test suffix). start_server LOG ARGS...
# runs `kiln serve ARGS --port 0` in the background (stdout and stderr to LOG), sets server_pid and
# port, and returns once /health answers 200 (the model loaded). The port is the one the server
# prints once bound ("kiln serve: listening on http://HOST:PORT, loading MODEL"), so no other
# process can take it between a probe for a free port and the server's bind. Exits 1 with the log
# when the server exits or never gets there.
start_server() {
    local log=$1
    shift
    "$KILN_BIN" serve "$@" --port 0 >"$log" 2>&1 &
    server_pid=$!
    port=""
    for _ in $(seq 1 1200); do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            cat "$log"
            echo "FAIL: kiln serve exited before it was ready"
            exit 1
        fi
        if [ -z "$port" ]; then
            port="$(sed -n 's|^kiln serve: listening on http://.*:\([0-9][0-9]*\), loading .*|\1|p' "$log" | head -n 1)"
        fi
        if [ -n "$port" ] &&
            python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    cat "$log"
    echo "FAIL: kiln serve did not become healthy${port:+ on port $port}"
    exit 1
}
