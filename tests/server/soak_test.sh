#!/usr/bin/env bash
# Soak test of `kiln serve` (stories260K, -t 2): `kiln bench serve --concurrency 8` streams requests
# of 64 prompt + 32 output tokens for KILN_SOAK_SECONDS (default 120) while the server's resident
# memory (VmRSS, /proc/PID/status) is sampled every 2 s. Passes when no request failed, some completed, the server's RSS at the end is
# below 1.10 x its RSS after warm-up (the largest sample between 12.5% and 21% of the run: 15-25 s
# of the default 120), and the server exits 0 on SIGTERM. Prints the figures (requests, req/s,
# tok/s, RSS warm-up / end / growth) quoted in docs/server.md.
# Needs KILN_BIN and KILN_TESTDATA; skips (exit 77, a failure under KILN_TEST_STRICT=1) without the
# test data.
# Labelled `slow`: not run by scripts/test, but before releases with `ctest --preset cpu-release -L slow`
# (a shorter run for trying it by hand: KILN_SOAK_SECONDS=20).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../scripts/skip.sh"
source "$here/start_server.sh"
: "${KILN_BIN:?KILN_BIN must point at the kiln binary}" "${KILN_TESTDATA:?KILN_TESTDATA must be set}"
model="$KILN_TESTDATA/models/stories260K/stories260K.bin"
[ -f "$model" ] || skip_test "soak_test: no test data ($model)"
seconds="${KILN_SOAK_SECONDS:-120}"
tmp="$(mktemp -d /tmp/kiln_soak_test.XXXXXX)"
server_pid=""
bench_pid=""
cleanup() {
    for pid in $bench_pid $server_pid; do
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

start_server "$tmp/serve.log" -m "$model" -t 2
url="http://127.0.0.1:$port"

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status"; }

echo "soak_test: RSS at start $(($(rss_kb) / 1024)) MiB"
echo "soak_test: $seconds s of kiln bench serve --concurrency 8 --input-len 64 --output-len 32 against $url"
"$KILN_BIN" bench serve --url "$url" --concurrency 8 --duration "$seconds" --input-len 64 --output-len 32 --json \
    >"$tmp/bench.json" 2>"$tmp/bench.err" &
bench_pid=$!
start_ns=$(date +%s%N)
elapsed_ms() { echo $((($(date +%s%N) - start_ns) / 1000000)); }
echo "0 $(rss_kb)" >"$tmp/rss.txt"
while kill -0 "$bench_pid" 2>/dev/null; do
    sleep 2
    echo "$(elapsed_ms) $(rss_kb)" >>"$tmp/rss.txt"
done
bench_rc=0
wait "$bench_pid" || bench_rc=$?
bench_pid=""
echo "$(elapsed_ms) $(rss_kb)" >>"$tmp/rss.txt"

kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=""

python3 - "$tmp/bench.json" "$tmp/rss.txt" "$seconds" "$bench_rc" "$server_rc" "$tmp/bench.err" <<'PY'
import json, sys
bench_path, rss_path, seconds, bench_rc, server_rc, err_path = sys.argv[1:7]
seconds, bench_rc, server_rc = float(seconds), int(bench_rc), int(server_rc)
bad = []
try:
    j = json.load(open(bench_path))
except ValueError:
    j = None
    bad.append("kiln bench serve printed no JSON: " + open(err_path).read().strip())
samples = [(float(t) / 1000, int(kb)) for t, kb in (line.split() for line in open(rss_path) if len(line.split()) == 2)]
lo, hi = 0.125 * seconds, 0.21 * seconds
warm = [kb for t, kb in samples if lo <= t <= hi] or [samples[min(len(samples) - 1, 1)][1]]
warm_kb = max(warm)
end_kb = max(kb for _, kb in samples[-3:])
peak_kb = max(kb for _, kb in samples)
growth = 100.0 * (end_kb - warm_kb) / warm_kb
if j:
    print(f"soak_test: {j['completed']} requests completed, {j['failed']} failed in {j['duration_s']:.1f} s: "
          f"{j['request_throughput']:.2f} req/s, {j['output_throughput']:.1f} output tok/s, "
          f"{j['total_token_throughput']:.1f} total tok/s")
    print(f"soak_test: TTFT median {j['median_ttft_ms']:.1f} ms p99 {j['p99_ttft_ms']:.1f} ms; "
          f"TPOT median {j['median_tpot_ms']:.2f} ms p99 {j['p99_tpot_ms']:.2f} ms; "
          f"E2E median {j['median_e2el_ms']:.1f} ms p99 {j['p99_e2el_ms']:.1f} ms")
    if j["failed"] != 0:
        bad.append(f"{j['failed']} requests failed: {j['errors']}")
    if j["completed"] <= 0:
        bad.append("no request completed")
print(f"soak_test: server RSS warm-up (max over {lo:.0f}-{hi:.0f} s) {warm_kb / 1024:.1f} MiB, "
      f"end {end_kb / 1024:.1f} MiB, peak {peak_kb / 1024:.1f} MiB, growth {growth:+.2f}% "
      f"({len(samples)} samples every 2 s)")
step = max(1, len(samples) // 12)
print("soak_test: RSS MiB over time (s): " +
      ", ".join(f"{t:.0f}:{kb / 1024:.1f}" for t, kb in samples[::step] + samples[-1:]))
if end_kb >= 1.10 * warm_kb:
    bad.append(f"RSS grew {growth:.1f}% after warm-up (limit 10%)")
if bench_rc != 0:
    bad.append(f"kiln bench serve exit status {bench_rc}")
if server_rc != 0:
    bad.append(f"kiln serve exit status {server_rc} after SIGTERM")
for b in bad:
    print("FAIL:", b)
print("soak_test:", "FAILED" if bad else "ok")
sys.exit(1 if bad else 0)
PY
