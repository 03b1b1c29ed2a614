#!/usr/bin/env bash
# `kiln synth` + `kiln bench` end to end on the 2-layer "tiny" preset: f32, q4_0 and bf16 files are written,
# read back by `kiln inspect`, and run by `kiln bench --json`, whose fields are checked with python3
# (positive figures, percentages equal to the ratios they stand for, bytes/ops per token matching the
# model's shapes). The same seed gives byte-identical files, whatever the thread count. Bad presets,
# dtypes and arguments exit non-zero with a message. No timing is checked, only consistency.
set -euo pipefail
: "${KILN_BIN:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for dt in f32 q4_0 bf16; do
    "$KILN_BIN" synth --preset tiny --dtype "$dt" --layers 2 --seed 7 -t 2 -o "$T/tiny_$dt.gguf" 2> "$T/synth.err"
    grep -q "wrote" "$T/synth.err" || { echo "synth $dt: no summary"; cat "$T/synth.err"; exit 1; }
    "$KILN_BIN" inspect --json "$T/tiny_$dt.gguf" > "$T/inspect_$dt.json"
    "$KILN_BIN" bench -m "$T/tiny_$dt.gguf" -p 8 -n 4 -r 1 -t 2 --probe-mib 128 --json > "$T/bench_$dt.json"
done
# The avx-vnni level where the CPU has it: its own peak (256-bit vpdpbusd)
if grep -qw avx_vnni /proc/cpuinfo; then
    "$KILN_BIN" bench -m "$T/tiny_q4_0.gguf" -p 8 -n 4 -r 1 -t 2 --probe-mib 128 --isa avx-vnni --json > "$T/bench_avxvnni.json"
fi
# -d: both tests after 6 tokens already in the cache
"$KILN_BIN" bench -m "$T/tiny_f32.gguf" -p 8 -n 4 -d 6 -r 1 -t 2 --probe-mib 128 --json > "$T/bench_depth.json"
"$KILN_BIN" synth --preset tiny --dtype q4_0 --layers 2 --seed 7 -t 1 -o "$T/again.gguf" 2> /dev/null
cmp "$T/tiny_q4_0.gguf" "$T/again.gguf" || { echo "same seed, different file (threads 1 vs 2)"; exit 1; }
"$KILN_BIN" synth --preset tiny --dtype q4_0 --layers 2 --seed 8 -o "$T/other.gguf" 2> /dev/null
if cmp -s "$T/tiny_q4_0.gguf" "$T/other.gguf"; then echo "seeds 7 and 8 gave the same file"; exit 1; fi
# generate loads the embedded tokenizer and runs the model.
"$KILN_BIN" generate -m "$T/tiny_q4_0.gguf" -p "hello" -n 4 -t 2 > /dev/null 2> "$T/gen.err" || {
    echo "generate failed"; cat "$T/gen.err"; exit 1; }

python3 - "$T" <<'PY'
import json, math, os, sys
T = sys.argv[1]
def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)
for dt in ("f32", "q4_0", "bf16"):
    ins = json.load(open(os.path.join(T, f"inspect_{dt}.json")))
    c = ins["config"]
    assert c["num_layers"] == 2 and c["hidden_size"] == 128 and c["vocab_size"] == 512, c
    dtypes = {t["name"]: t["type"] for t in ins["tensors"]}
    assert dtypes["blk.0.attn_q.weight"] == dt and dtypes["blk.0.attn_norm.weight"] == "f32", dtypes
    assert "output.weight" in dtypes, "tiny is untied: output.weight expected"
    res = json.load(open(os.path.join(T, f"bench_{dt}.json")))
    assert [r["test"] for r in res] == ["pp8", "tg4"], [r["test"] for r in res]
    H, F, V, L = 128, 352, 512, 2
    q, kv = 4 * 32, 2 * 32
    layer_mm = L * (H * q + 2 * H * kv + q * H + 3 * H * F)
    for r in res:
        for k in ("tokens_per_s", "bytes_per_token", "achieved_gbps", "bw_limit_gbps", "pct_of_bw_limit",
                  "achieved_gops", "peak_gops", "pct_of_peak", "int8_peak_gops", "ops_per_token",
                  "f32_fma_peak_gflops", "bw_floor_tokens_per_s"):
            assert isinstance(r[k], (int, float)) and math.isfinite(r[k]) and r[k] > 0, (dt, r["test"], k, r[k])
        assert r["threads"] == 2 and r["isa"] in ("avx2+fma", "scalar") and r["weights_dtype"] == dt, r
        assert r["model"].endswith(f"tiny_{dt}.gguf"), r["model"]
        assert len(r["samples_tokens_per_s"]) == 1 and close(r["samples_tokens_per_s"][0], r["tokens_per_s"])
        assert close(r["achieved_gbps"], r["bytes_per_token"] * r["tokens_per_s"] / 1e9)
        assert close(r["pct_of_bw_limit"], 100 * r["achieved_gbps"] / r["bw_limit_gbps"])
        assert close(r["achieved_gops"], r["ops_per_token"] * r["tokens_per_s"] / 1e9)
        assert close(r["pct_of_peak"], 100 * r["achieved_gops"] / r["peak_gops"])
        # tg: decode against read passes between its steps (one run here, so the medians are it).
        if r["test"].startswith("tg"):
            amb = r["ambient_bw_gbps"]
            assert isinstance(amb, float) and math.isfinite(amb) and amb > 0, amb
            assert r["samples_ambient_bw_gbps"] == [amb], r["samples_ambient_bw_gbps"]
            assert close(r["pct_of_ambient_bw"], 100 * r["achieved_gbps"] / amb), r["pct_of_ambient_bw"]
        else:
            assert r["ambient_bw_gbps"] is None and r["pct_of_ambient_bw"] is None, r
        # The compute peak is the one of the arithmetic the matmul does: VNNI (512-bit vpdpbusd),
        # AVX-VNNI (256-bit) or AVX2 int8 dots, BF16 dots (vdpbf16ps), or f32 FMAs.
        vnni_isa = r["matmul"].startswith("avx512-vnni")
        avx_vnni_isa = r["matmul"].startswith("avx-vnni")
        if "int8 activations" in r["matmul"]:
            want = ("vnni_int8" if vnni_isa and r["vnni_int8_peak_gops"] else
                    "avx_vnni_int8" if avx_vnni_isa and r["avx_vnni_int8_peak_gops"] else "int8_dot")
        elif "bf16 activations" in r["matmul"] and vnni_isa and r["bf16_peak_gflops"]:
            want = "bf16_dot"
        else:
            want = "f32_fma"
        assert r["peak_kind"] == want, (r["peak_kind"], r["matmul"])
        peak_field = {"vnni_int8": "vnni_int8_peak_gops", "avx_vnni_int8": "avx_vnni_int8_peak_gops",
                      "int8_dot": "int8_peak_gops",
                      "bf16_dot": "bf16_peak_gflops", "f32_fma": "f32_fma_peak_gflops"}[want]
        assert r["peak_gops"] == r[peak_field], (want, r["peak_gops"], r[peak_field])
        if dt == "f32":
            assert want == "f32_fma", r["matmul"]
        if dt == "bf16":
            assert "bf16 activations" in r["matmul"] or "reference" in r["matmul"], r["matmul"]
        assert r["vnni_int8_peak_gops"] is None or r["vnni_int8_peak_gops"] > 0
        assert r["avx_vnni_int8_peak_gops"] is None or r["avx_vnni_int8_peak_gops"] > 0
        assert r["bf16_peak_gflops"] is None or r["bf16_peak_gflops"] > 0
        per_forward = 8 if r["test"] == "pp8" else 1
        assert close(r["ops_per_token"], 2 * layer_mm + 2 * V * H / per_forward), (r["ops_per_token"], layer_mm)
    tg, pp = res[1], res[0]
    # Decode reads every weight once per token; prefill shares one pass among its 8 tokens.
    assert pp["bytes_per_token"] < tg["bytes_per_token"], (pp["bytes_per_token"], tg["bytes_per_token"])
    # tg also reads the K/V cache: 2 * L * kv_dim * 4 bytes per position, mean length (n + 1) / 2.
    kv_pos = 2 * L * kv * 4
    if dt == "f32":
        weights = 4 * (layer_mm + V * H + L * 2 * H + H)  # matrices, output, norms
        want = weights + 4 * H + kv_pos * 2.5
        assert close(tg["bytes_per_token"], want), (tg["bytes_per_token"], want)
        assert tg["depth"] == 0 and pp["depth"] == 0, (tg["depth"], pp["depth"])
        deep = json.load(open(os.path.join(T, "bench_depth.json")))
        assert [r["test"] for r in deep] == ["pp8@d6", "tg4@d6"], [r["test"] for r in deep]
        assert all(r["depth"] == 6 for r in deep), deep
        assert close(deep[1]["bytes_per_token"], weights + 4 * H + kv_pos * (6 + 2.5)), deep[1]["bytes_per_token"]
        assert close(deep[0]["bytes_per_token"], pp["bytes_per_token"]), (deep[0]["bytes_per_token"], pp)
avx_vnni = os.path.join(T, "bench_avxvnni.json")
if os.path.exists(avx_vnni):
    for r in json.load(open(avx_vnni)):
        assert r["matmul"].startswith("avx-vnni, int8 activations"), r["matmul"]
        assert r["peak_kind"] == "avx_vnni_int8" and r["peak_gops"] == r["avx_vnni_int8_peak_gops"] > 0, r
        assert r["tokens_per_s"] > 0, r
print("synth + bench JSON ok")
PY

# expect CODE PATTERN CMD...: exit status CODE and a message on stderr matching PATTERN.
expect() {
    local code=$1 pattern=$2; shift 2
    set +e; "$@" > "$T/out" 2> "$T/err"; local rc=$?; set -e
    if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" "$T/err"; then
        echo "FAIL: $* -> exit $rc (want $code), stderr: $(head -c 300 "$T/err")"; exit 1
    fi
}
expect 2 "unknown preset 'gpt-9'.*tiny" "$KILN_BIN" synth --preset gpt-9 --dtype q4_0 -o "$T/x.gguf"
expect 2 "unsupported --dtype 'q3_k'" "$KILN_BIN" synth --preset tiny --dtype q3_k -o "$T/x.gguf"
expect 2 "unsupported --dtype 'int3'" "$KILN_BIN" synth --preset tiny --dtype int3 -o "$T/x.gguf"
expect 2 "needs every matrix row to be whole blocks; token_embd.weight has 128 columns" "$KILN_BIN" synth --preset tiny --dtype q4_k -o "$T/x.gguf"
expect 2 "needs every matrix row to be whole blocks; token_embd.weight has 128 columns" "$KILN_BIN" synth --preset tiny --dtype q5_k -o "$T/x.gguf"
expect 2 "required" "$KILN_BIN" synth --preset tiny --dtype q4_0
expect 2 "--layers" "$KILN_BIN" synth --preset tiny --dtype q4_0 --layers 0 -o "$T/x.gguf"
expect 2 "--seed" "$KILN_BIN" synth --preset tiny --dtype q4_0 --seed -3 -o "$T/x.gguf"
expect 1 "cannot (create|check free space)" "$KILN_BIN" synth --preset tiny --dtype q4_0 -o "$T/no/such/dir/x.gguf"
[ ! -e "$T/x.gguf" ] || { echo "a failed synth left a file"; exit 1; }
expect 2 "no model given" "$KILN_BIN" bench
expect 2 "--n-prompt" "$KILN_BIN" bench -m "$T/tiny_f32.gguf" -p abc
expect 2 "--reps" "$KILN_BIN" bench -m "$T/tiny_f32.gguf" -r 0
expect 2 "nothing to measure" "$KILN_BIN" bench -m "$T/tiny_f32.gguf" -p 0 -n 0
expect 2 "--depth" "$KILN_BIN" bench -m "$T/tiny_f32.gguf" -d x1
expect 2 "context length" "$KILN_BIN" bench -m "$T/tiny_f32.gguf" -d 1048576
expect 1 "cannot open|not found" "$KILN_BIN" bench -m "$T/missing.gguf"
"$KILN_BIN" synth --list | grep -q "llama-3-8b" || { echo "synth --list lacks llama-3-8b"; exit 1; }
echo ok
