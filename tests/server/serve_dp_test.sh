#!/usr/bin/env bash
# `kiln serve --dp 2` (data parallelism, docs/parallel.md) on stories260K: greedy completions equal a
# one-engine server's; requests are spread over both replicas; prompts that share a prefix go to the
# replica that ran it first (kiln_dp_prefix_routed_total) and their prefill hits its prefix cache;
# /metrics sums the replicas; bad --dp values and --dp with --tp are refused; SIGTERM exits 0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/skip.sh"
source "$here/start_server.sh"
: "${KILN_BIN:?KILN_BIN must point at the kiln binary}" "${KILN_TESTDATA:?KILN_TESTDATA must be set}"
model="$KILN_TESTDATA/models/stories260K/stories260K.bin"
[ -f "$model" ] || skip_test "serve_dp_test: no test data ($model)"
tmp="$(mktemp -d /tmp/kiln_serve_dp_test.XXXXXX)"
server_pid=""
one_pid=""
cleanup() {
    for p in "$server_pid" "$one_pid"; do
        if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill -9 "$p" 2>/dev/null || true; fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start_server "$tmp/one.log" -m "$model" -t 1 --block-size 4
one_pid=$server_pid
one_port=$port
start_server "$tmp/dp.log" -m "$model" -t 1 --block-size 4 --dp 2
grep -q "2 replicas" "$tmp/dp.log" || { cat "$tmp/dp.log"; fail "the start-up line does not say 2 replicas"; }

python3 - "$one_port" "$port" <<'PY'
import json, sys, urllib.request as u
one, dp = sys.argv[1], sys.argv[2]
def complete(port, prompt):
    req = u.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                    data=json.dumps({"prompt": prompt, "max_tokens": 24, "temperature": 0}).encode(),
                    headers={"Content-Type": "application/json"})
    return json.load(u.urlopen(req, timeout=60))
def metrics(port):
    text = u.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
stems = ["Once upon a time, there was a little girl named Lily who lived in a small house",
         "The dog ran to the park with his ball and saw a big red bird sitting on a tree",
         "Tom had a toy car. He liked to play with it every day in the garden near"]
prompts = [s for s in stems] + [s + " and" for s in stems] + [s + " but one day" for s in stems]
bad = []
for p in prompts:
    a, b = complete(one, p), complete(dp, p)
    if a["choices"][0]["text"] != b["choices"][0]["text"]:
        bad.append(f"{p!r}: one engine {a['choices'][0]['text']!r}, --dp 2 {b['choices'][0]['text']!r}")
m = metrics(dp)
per = [m.get('kiln_dp_requests_total{replica="0"}', 0), m.get('kiln_dp_requests_total{replica="1"}', 0)]
if sum(per) != len(prompts): bad.append(f"requests per replica {per}, sent {len(prompts)}")
if min(per) == 0: bad.append(f"one replica got nothing: {per}")
# the 6 prompts that extend a stem go where the stem went
if m.get("kiln_dp_prefix_routed_total", 0) < 6: bad.append(f"prefix-routed {m.get('kiln_dp_prefix_routed_total')}, want >= 6")
hit = m.get("kiln_prefix_cache_hit_rate", 0)
if hit < 0.4: bad.append(f"prefix cache hit rate {hit} with the router keeping prefixes together")
if bad:
    print("\n".join(bad)); sys.exit(1)
print(f"ok: {len(prompts)} greedy completions as one engine's; per replica {per}; prefix hit rate {hit:.2f}")
PY

kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[ "$rc" = 0 ] || fail "--dp 2 server exited $rc on SIGTERM"
set +e
"$KILN_BIN" serve -m "$model" --dp 0 --port 0 > /dev/null 2> "$tmp/e1.txt"; rc1=$?
"$KILN_BIN" serve -m "$model" --dp 2 --tp 2 --port 0 > /dev/null 2> "$tmp/e2.txt"; rc2=$?
set -e
[ "$rc1" = 2 ] && grep -q -- "--dp needs an integer" "$tmp/e1.txt" || { cat "$tmp/e1.txt"; fail "--dp 0"; }
[ "$rc2" = 2 ] && grep -q -- "not with --tp" "$tmp/e2.txt" || { cat "$tmp/e2.txt"; fail "--dp with --tp"; }
echo "ok: bad --dp refused; SIGTERM exits 0"
