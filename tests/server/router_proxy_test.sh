#!/usr/bin/env bash
# `kiln router` (data parallelism across processes, docs/parallel.md) in front of two `kiln serve`
# workers on stories260K: greedy completions through it equal a worker's own, streamed ones too
# (the relayed events end in [DONE]); both workers get requests and prompts that extend an earlier
# one go to its worker (kiln_dp_prefix_routed_total); every request's load is released afterwards; a
# worker's error reply is relayed with its status, streamed or not; a client leaving a stream ends
# the worker's request (its client-abort count) and releases the load; bad JSON and deeply nested chat
# content are 400s from the worker, the router unharmed; a killed worker is left out (requests go to
# the other, /health says which is down) and with none left requests get a 503 OpenAI error at once;
# bad command lines exit 2; SIGTERM exits 0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/skip.sh"
source "$here/start_server.sh"
: "${KILN_BIN:?KILN_BIN must point at the kiln binary}" "${KILN_TESTDATA:?KILN_TESTDATA must be set}"
model="$KILN_TESTDATA/models/stories260K/stories260K.bin"
[ -f "$model" ] || skip_test "router_proxy_test: no test data ($model)"
tmp="$(mktemp -d /tmp/kiln_router_test.XXXXXX)"
a_pid=""
b_pid=""
router_pid=""
cleanup() {
    for p in "$a_pid" "$b_pid" "$router_pid"; do
        if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill -9 "$p" 2>/dev/null || true; fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start_server "$tmp/a.log" -m "$model" -t 1 --block-size 4
a_pid=$server_pid
a_port=$port
start_server "$tmp/b.log" -m "$model" -t 1 --block-size 4
b_pid=$server_pid
b_port=$port

"$KILN_BIN" router --worker "http://127.0.0.1:$a_port" --worker "http://127.0.0.1:$b_port/" --port 0 \
    --health-interval 0.2 --block-bytes 16 >"$tmp/router.log" 2>&1 &
router_pid=$!
r_port=""
ready=0
for _ in $(seq 1 300); do
    kill -0 "$router_pid" 2>/dev/null || { cat "$tmp/router.log"; fail "kiln router exited"; }
    [ -n "$r_port" ] || r_port="$(sed -n 's|^kiln router: listening on http://.*:\([0-9][0-9]*\), .*|\1|p' "$tmp/router.log" | head -n 1)"
    if [ -n "$r_port" ] && python3 - "$r_port" <<'PY' 2>/dev/null; then
import json, sys, urllib.request as u
h = json.load(u.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1))
sys.exit(0 if all(w["ready"] for w in h["workers"]) else 1)
PY
        ready=1
        break
    fi
    sleep 0.1
done
[ "$ready" = 1 ] || { cat "$tmp/router.log"; fail "the router never saw both workers ready"; }

python3 - "$a_port" "$r_port" <<'PY'
import json, sys, urllib.error, urllib.request as u
worker, router = sys.argv[1], sys.argv[2]
def post(port, path, body, raw=False):
    req = u.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                    data=body if raw else json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        r = u.urlopen(req, timeout=60)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
def complete(port, prompt):
    status, text = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0})
    assert status == 200, (status, text)
    return json.loads(text)["choices"][0]["text"]
def streamed(port, prompt):
    status, text = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": True})
    assert status == 200, (status, text)
    events = [l[len("data: "):] for l in text.splitlines() if l.startswith("data: ")]
    assert events and events[-1] == "[DONE]", events[-3:]
    return "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e).get("choices"))
def metrics(port):
    out = {}
    for line in u.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
stems = ["Once upon a time, there was a little girl named Lily who lived in a small house",
         "The dog ran to the park with his ball and saw a big red bird sitting on a tree",
         "Tom had a toy car. He liked to play with it every day in the garden near"]
prompts = stems + [s + " and" for s in stems] + [s + " but one day" for s in stems]
bad = []
for p in prompts:
    want, got = complete(worker, p), complete(router, p)
    if want != got: bad.append(f"{p!r}: worker {want!r}, router {got!r}")
    s = streamed(router, p)
    if s != want: bad.append(f"{p!r}: streamed through the router {s!r}, worker {want!r}")
m = metrics(router)
per = [m.get('kiln_dp_requests_total{replica="0"}', 0), m.get('kiln_dp_requests_total{replica="1"}', 0)]
if sum(per) != 2 * len(prompts): bad.append(f"requests per worker {per}, sent {2 * len(prompts)}")
if min(per) == 0: bad.append(f"one worker got nothing: {per}")
if m.get("kiln_dp_prefix_routed_total", 0) < 12: bad.append(f"prefix-routed {m.get('kiln_dp_prefix_routed_total')}, want >= 12")
# a worker's own refusal comes back with its status and error
status, text = post(router, "/v1/completions", {"prompt": "Hi", "max_tokens": -1})
if status != 400 or "error" not in json.loads(text): bad.append(f"max_tokens -1: {status} {text[:200]}")
status, text = post(router, "/v1/completions", {"prompt": "Hi", "max_tokens": -1, "stream": True})
if status != 400 or "error" not in json.loads(text): bad.append(f"streamed max_tokens -1: {status} {text[:200]}")
status, text = post(router, "/v1/completions", b"{not json", raw=True)
if status != 400 or "error" not in json.loads(text): bad.append(f"bad JSON: {status} {text[:200]}")
deep = b'{"messages": [{"role": "user", "content": ' + b"[" * 200000 + b"]" * 200000 + b"}]}"
status, text = post(router, "/v1/chat/completions", deep, raw=True)
if status < 400 or status >= 500: bad.append(f"deeply nested content: {status} {text[:200]}")
h = json.load(u.urlopen(f"http://127.0.0.1:{router}/health", timeout=10))
if any(w["in_flight"] != 0 for w in h["workers"]): bad.append(f"load not released: {h}")
models = json.load(u.urlopen(f"http://127.0.0.1:{router}/v1/models", timeout=10))
if not models.get("data"): bad.append(f"/v1/models: {models}")
if bad:
    print("\n".join(bad)); sys.exit(1)
print(f"ok: {len(prompts)} completions and streams through the router equal the worker's; per worker {per}")
PY

# A client that leaves a stream early: the router closes the worker's stream (the worker counts a
# client abort) and releases the request's load.
python3 - "$r_port" "$a_port" "$b_port" <<'PY'
import json, socket, sys, time, urllib.request as u
router, workers = sys.argv[1], sys.argv[2:]
def aborts():
    total = 0
    for w in workers:
        for line in u.urlopen(f"http://127.0.0.1:{w}/metrics", timeout=10).read().decode().splitlines():
            if line.startswith("kiln_client_aborts_total"):
                total += float(line.split()[-1])
    return total
before = aborts()
body = json.dumps({"prompt": "Once upon a time", "max_tokens": 480, "n": 4, "ignore_eos": True, "stream": True}).encode()
s = socket.create_connection(("127.0.0.1", int(router)), timeout=30)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
          + str(len(body)).encode() + b"\r\n\r\n" + body)
got = b""
while b"data: {" not in got:
    chunk = s.recv(4096)
    assert chunk, f"the stream ended before its first event: {got[:300]!r}"
    got += chunk
s.close()
deadline = time.time() + 20
while time.time() < deadline:
    h = json.load(u.urlopen(f"http://127.0.0.1:{router}/health", timeout=10))
    if all(w["in_flight"] == 0 for w in h["workers"]) and aborts() > before:
        break
    time.sleep(0.2)
else:
    sys.exit(f"after the client left: /health {h}, worker aborts {aborts()} (before {before})")
print("ok: a client leaving a stream ends the worker's request and releases its load")
PY

kill -9 "$b_pid"
wait "$b_pid" 2>/dev/null || true
b_pid=""
python3 - "$r_port" <<'PY'
import json, sys, time, urllib.error, urllib.request as u
router = sys.argv[1]
for i in range(6):  # every request is answered: the dead worker is left out
    req = u.Request(f"http://127.0.0.1:{router}/v1/completions", method="POST",
                    data=json.dumps({"prompt": f"Once upon a time {i}", "max_tokens": 8, "temperature": 0}).encode(),
                    headers={"Content-Type": "application/json"})
    r = json.load(u.urlopen(req, timeout=60))
    assert r["choices"][0]["text"] is not None
time.sleep(0.5)
h = json.load(u.urlopen(f"http://127.0.0.1:{router}/health", timeout=10))
ready = [w["ready"] for w in h["workers"]]
assert ready == [True, False], h
print("ok: with one worker killed every request is answered; /health:", ready)
PY

kill -9 "$a_pid"
wait "$a_pid" 2>/dev/null || true
a_pid=""
python3 - "$r_port" <<'PY'
import json, sys, time, urllib.error, urllib.request as u
router = sys.argv[1]
req = u.Request(f"http://127.0.0.1:{router}/v1/completions", method="POST",
                data=json.dumps({"prompt": "Hello", "max_tokens": 4}).encode(), headers={"Content-Type": "application/json"})
t = time.time()
try:
    u.urlopen(req, timeout=30)
    sys.exit("a request with no worker left succeeded")
except urllib.error.HTTPError as e:
    body = json.loads(e.read().decode())
    assert e.code == 503 and "no worker" in body["error"]["message"], (e.code, body)
assert time.time() - t < 15, "the 503 took too long"
try:
    u.urlopen(f"http://127.0.0.1:{router}/health", timeout=10)
    sys.exit("/health answered 200 with no worker")
except urllib.error.HTTPError as e:
    assert e.code == 503
print("ok: no worker left: 503 with an OpenAI error, /health 503")
PY

kill -TERM "$router_pid"
rc=0
wait "$router_pid" || rc=$?
router_pid=""
[ "$rc" = 0 ] || fail "kiln router exited $rc on SIGTERM"
set +e
"$KILN_BIN" router --port 0 >/dev/null 2>"$tmp/e1.txt"; rc1=$?
"$KILN_BIN" router --worker ftp://x --port 0 >/dev/null 2>"$tmp/e2.txt"; rc2=$?
"$KILN_BIN" router --worker http://127.0.0.1:1 --slack -1 >/dev/null 2>"$tmp/e3.txt"; rc3=$?
set -e
[ "$rc1" = 2 ] && grep -q "no --worker" "$tmp/e1.txt" || { cat "$tmp/e1.txt"; fail "no --worker"; }
[ "$rc2" = 2 ] && grep -q "worker URL" "$tmp/e2.txt" || { cat "$tmp/e2.txt"; fail "a bad worker URL"; }
[ "$rc3" = 2 ] && grep -q -- "--slack" "$tmp/e3.txt" || { cat "$tmp/e3.txt"; fail "--slack -1"; }
echo "ok: SIGTERM exits 0; bad command lines exit 2"
