#!/usr/bin/env bash
# `kiln bench serve` against a live `kiln serve` on stories260K (needs KILN_BIN and KILN_TESTDATA):
# a closed loop, Poisson arrivals, a --duration run, the chat endpoint and prompts tokenized here
# (--tokenizer) must complete every request with exactly requests x output-len generated tokens (and
# input-len prompt tokens) and sane figures (positive, p50 <= p99); a
# request the server rejects counts as failed (exit 1); an unreachable URL exits non-zero with a
# clear message; bad flags exit 2; the server exits 0 on SIGTERM. Skips (exit 77, a failure under
# KILN_TEST_STRICT=1) without the test data.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/skip.sh"
source "$here/start_server.sh"
: "${KILN_BIN:?KILN_BIN must point at the kiln binary}" "${KILN_TESTDATA:?KILN_TESTDATA must be set}"
model="$KILN_TESTDATA/models/stories260K/stories260K.bin"
[ -f "$model" ] || skip_test "bench_serve_test: no test data ($model)"
tmp="$(mktemp -d /tmp/kiln_bench_serve_test.XXXXXX)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -9 "$server_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

printf '%s' "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}" >"$tmp/tmpl.jinja"
start_server "$tmp/serve.log" -m "$model" -t 2 --chat-template "$tmp/tmpl.jinja"
url="http://127.0.0.1:$port"

# check_json FILE REQUESTS OUTPUT_LEN INPUT_LEN|-: every request completed, token counts exact, figures sane.
check_json() {
    python3 - "$@" <<'PY'
import json, sys
path, requests, out_len, in_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
j = json.load(open(path))
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)
want(j["completed"] == requests, f"completed {j['completed']} != {requests}")
want(j["failed"] == 0, f"failed {j['failed']} (errors {j['errors']})")
want(j["total_output_tokens"] == requests * out_len, f"output tokens {j['total_output_tokens']} != {requests * out_len}")
if in_len != "-":
    want(j["total_input_tokens"] == requests * int(in_len), f"input tokens {j['total_input_tokens']}")
for k in ["duration_s", "request_throughput", "output_throughput", "total_token_throughput"]:
    want(j[k] > 0, f"{k} = {j[k]} is not positive")
for m in ["ttft", "tpot", "itl", "e2el"]:
    mean, p50, p99 = j[f"mean_{m}_ms"], j[f"median_{m}_ms"], j[f"p99_{m}_ms"]
    want(mean > 0 and p50 > 0 and p99 > 0, f"{m}: mean {mean} median {p50} p99 {p99} not all positive")
    want(p50 <= p99, f"{m}: median {p50} > p99 {p99}")
want(j["median_ttft_ms"] <= j["median_e2el_ms"], "median TTFT above median E2E latency")
for b in bad:
    print(f"  {path}: {b}")
print(f"  {path}: {j['completed']} requests, {j['request_throughput']:.1f} req/s, "
      f"{j['output_throughput']:.0f} output tok/s, median TTFT {j['median_ttft_ms']:.1f} ms")
sys.exit(1 if bad else 0)
PY
}

# run NAME EXPECTED_RC ARGS...: runs kiln bench serve against the server, stdout to $tmp/NAME.out.
run() {
    local name=$1 want=$2 rc=0
    shift 2
    "$KILN_BIN" bench serve "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$name: exit $rc, expected $want"
        cat "$tmp/$name.err"
        return 1
    fi
}

if run closed 0 --url "$url" --requests 24 --concurrency 4 --input-len 32 --output-len 16 --seed 1 --json; then
    check_json "$tmp/closed.out" 24 16 32 || fail "closed loop figures"
fi
if run rate 0 --url "$url" --rate 20 --requests 16 --input-len 32 --output-len 16 --seed 2 --json; then
    check_json "$tmp/rate.out" 16 16 32 || fail "Poisson figures"
fi
if run burst 0 --url "$url" --rate inf --requests 12 --input-len 16 --output-len 8 --seed 3 --json; then
    check_json "$tmp/burst.out" 12 8 16 || fail "rate inf figures"
fi
if run chat 0 --url "$url" --endpoint chat --requests 6 --concurrency 2 --input-len 24 --output-len 8 --seed 4 --json; then
    check_json "$tmp/chat.out" 6 8 - || fail "chat figures"
fi
if run duration 0 --url "$url" --duration 3 --concurrency 3 --input-len 16 --output-len 8 --seed 5 --json; then
    n="$(python3 -c "import json; print(json.load(open('$tmp/duration.out'))['completed'])")"
    if [ "$n" -lt 1 ]; then fail "--duration 3 completed no request"; else check_json "$tmp/duration.out" "$n" 8 16 || fail "duration figures"; fi
fi
# --tokenizer: the same prompts tokenized here with the served file's tokenizer, not through /tokenize.
if run localtok 0 --url "$url" --requests 6 --concurrency 2 --input-len 32 --output-len 8 --seed 1 --json \
    --tokenizer "$(dirname "$model")/tok512.bin"; then
    check_json "$tmp/localtok.out" 6 8 32 || fail "--tokenizer figures"
fi
run badtok 2 --url "$url" --tokenizer /no/such/model.gguf || true
grep -q -- "--tokenizer" "$tmp/badtok.err" || fail "bad --tokenizer message: $(cat "$tmp/badtok.err")"
if run table 0 --url "$url" --requests 4 --concurrency 2 --input-len 16 --output-len 4 --seed 6; then
    for label in "Successful requests:" "Failed requests:" "Request throughput (req/s):" "P99 TTFT (ms):" \
        "Median TPOT (ms):" "Mean ITL (ms):" "P99 E2EL (ms):"; do
        grep -qF "$label" "$tmp/table.out" || fail "the text report lacks '$label'"
    done
fi

# Requests the server rejects (another model name: 404) are counted as failed and make the exit 1.
if run rejected 1 --url "$url" --requests 3 --concurrency 1 --input-len 8 --output-len 4 --model no-such-model --json; then
    python3 -c "
import json, sys
j = json.load(open('$tmp/rejected.out'))
sys.exit(0 if j['failed'] == 3 and j['completed'] == 0 and 'HTTP 404' in j['errors'][0] else 1)" ||
        fail "rejected requests: $(cat "$tmp/rejected.out")"
    grep -q "3 of 3 requests failed" "$tmp/rejected.err" || fail "no failure summary on stderr"
fi

# An unreachable server: non-zero exit and a message that says so. The port is held bound (never
# listening) while the client runs, so connections are refused and no other process can listen there.
rc=0
python3 -c '
import socket, subprocess, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
url = "http://127.0.0.1:%d" % s.getsockname()[1]
sys.exit(subprocess.call([sys.argv[1], "bench", "serve", "--url", url, "--requests", "2"], stdout=subprocess.DEVNULL))
' "$KILN_BIN" 2>"$tmp/dead.err" || rc=$?
[ "$rc" != 0 ] || fail "an unreachable URL exited 0"
grep -q "not reachable" "$tmp/dead.err" || fail "unreachable URL message: $(cat "$tmp/dead.err")"

# Bad flags exit 2 with a message.
run badrate 2 --url "$url" --rate 0 || true
run badendpoint 2 --url "$url" --endpoint embeddings || true
run badflag 2 --url "$url" --no-such-flag || true
run badurl 2 --url "https://127.0.0.1:$port" || true
run both 2 --url "$url" --requests 3 --duration 2 || true
run toolong 2 --url "$url" --input-len 500 --output-len 100 || true
grep -q "exceeds the server's context" "$tmp/toolong.err" || fail "context check message: $(cat "$tmp/toolong.err")"
"$KILN_BIN" bench serve --help | grep -q -- "--concurrency" || fail "--help does not list --concurrency"

kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[ "$rc" = 0 ] || fail "kiln serve exit status $rc after SIGTERM"
if grep -q " 500 \| 503 " "$tmp/serve.log"; then fail "server errors in its log:"; grep " 500 \| 503 " "$tmp/serve.log" | head -5; fi

if [ "$failures" -gt 0 ]; then
    echo "bench_serve_test: $failures failure(s)"
    exit 1
fi
echo "bench_serve_test: ok"
