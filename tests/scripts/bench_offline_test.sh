#!/usr/bin/env bash
# `kiln bench offline` end to end on stories260K: 12 requests sharing a prefix through the serving
# engine, checked for consistency (no timing): every JSON field present and finite, output tokens/s =
# requests x output-len / seconds, a prefix-cache hit rate > 0 with a shared prefix and 0 without the
# cache, a warm/cold TTFT probe, KV blocks used within the pool. A tiny KV budget (committed at start,
# --kv-prefault) still completes (preemption); impossible parameters exit 2 with a message.
set -euo pipefail
: "${KILN_BIN:?}" "${KILN_TESTDATA:?}"
M="$KILN_TESTDATA/models/stories260K/stories260K.bin"
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
[ -f "$M" ] || skip_test "no test data ($M)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run() { "$KILN_BIN" bench offline -m "$M" -t 2 --json "$@"; }
run --requests 12 --input-len 40 --output-len 10 --shared-prefix 32 > "$T/shared.json"
run --requests 12 --input-len 40 --output-len 10 --shared-prefix 32 --no-prefix-cache > "$T/nocache.json"
run --requests 6 --input-len 60 --output-len 20 --kv-cache-gb 0.0004 --block-size 4 --kv-prefault > "$T/tight.json"
python3 - "$T" <<'PY'
import json, math, os, sys
T = sys.argv[1]
def load(n): return json.load(open(os.path.join(T, n + ".json")))
s, n, t = load("shared"), load("nocache"), load("tight")
for r in (s, n, t):
    for k in ("requests_per_s", "output_tokens_per_s", "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean",
              "tpot_ms_p50", "tpot_ms_p99", "seconds", "steps", "peak_kv_blocks_in_use", "kv_blocks_total"):
        assert isinstance(r[k], (int, float)) and math.isfinite(r[k]) and r[k] > 0, (k, r[k])
    assert abs(r["output_tokens_per_s"] * r["seconds"] - r["requests"] * r["output_len"]) < 1e-6 * r["requests"] * r["output_len"] + 1e-3, r
    assert abs(r["requests_per_s"] * r["seconds"] - r["requests"]) < 1e-6 * r["requests"] + 1e-6, r
    assert r["ttft_ms_p50"] <= r["ttft_ms_p99"] and r["tpot_ms_p50"] <= r["tpot_ms_p99"], r
    assert r["peak_kv_blocks_in_use"] <= r["kv_blocks_total"], r
    assert 0 <= r["schedule_pct_of_step"] < 100, r
# 32 shared tokens of 40 = 2 full blocks of 16 per request, cached after the probe: hits on every request.
assert abs(s["prefix_hit_rate"] - 32 / 40) < 1e-9, s["prefix_hit_rate"]
assert n["prefix_hit_rate"] == 0, n["prefix_hit_rate"]
for k in ("ttft_cold_ms", "ttft_warm_ms", "ttft_warm_over_cold"):
    assert s[k] > 0, (k, s[k])
assert t["preemptions"] > 0 and t["kv_block_size"] == 4, t
print("bench offline: ok")
PY
expect_usage() {
    if "$KILN_BIN" bench offline -m "$M" "$@" > "$T/out" 2> "$T/err"; then echo "accepted: $*"; exit 1; fi
    grep -q "kiln bench offline" "$T/err" || { echo "no message for: $*"; cat "$T/err"; exit 1; }
}
expect_usage --requests 0
expect_usage --input-len 8 --shared-prefix 8
expect_usage --max-seqs -3
expect_usage --kv-cache-gb abc
expect_usage --input-len 600 --output-len 10
echo ok
