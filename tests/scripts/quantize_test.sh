#!/usr/bin/env bash
# Accuracy gates of `kiln quantize` on stories260K (its fp32 weights are the reference): every format
# is written in the compressed-tensors layout, loaded back by `kiln perplexity`, and scored on the
# second part of the TinyStories excerpt; the first 20000 bytes are the AWQ / GPTQ calibration text
# (never scored). Gates (docs/quantization.md): every format has a ceiling on its perplexity increase,
# the figure measured in docs/quantization.md's table plus a stated margin (so a bug that hurts every
# 4-bit format alike fails, not only one that reorders them); the issue's gates INT8 < 1%, FP8 < 2%,
# MXFP8 < 2% are tighter still; AWQ-W4 g32, GPTQ g32 and AWQ + GPTQ g32 below round-to-nearest with
# zero points at g32; NVFP4 below MXFP4. Every figure is printed. Bad input: an unknown format,
# --skip of nothing, AWQ or GPTQ without --calib exit 2 or 1 with a message; a quantized folder with
# a corrupted scale shape, or an E4M3 NaN code in an FP8 weight, fails to load with a message. FP8
# and MXFP8 load onto the FP8 kernels, and the FP8 model converted to an f32 GGUF file scores the
# same.
set -euo pipefail
: "${KILN_BIN:?}" "${KILN_TESTDATA:?}"
M="$KILN_TESTDATA/models/stories260K/stories260K.bin"
E="$KILN_TESTDATA/eval/tinystories_excerpt.txt"
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
[ -f "$M" ] && [ -f "$E" ] || skip_test "no test data ($M, $E)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
head -c 20000 "$E" > "$T/calib.txt"
tail -c +20001 "$E" > "$T/eval.txt"
ppl() { "$KILN_BIN" perplexity -m "$1" -f "$T/eval.txt" -t 2 --ctx 256 2>/dev/null | sed -n 's/^ppl = //p'; }
q() { local name=$1; shift; "$KILN_BIN" quantize "$M" "$T/$name" -t 2 --quiet "$@" 2> "$T/$name.log" || { cat "$T/$name.log"; exit 1; }; }

ref=$(ppl "$M")
echo "reference (f32) ppl $ref"
q int8 --format int8
q int8-sq --format int8 --calib "$T/calib.txt" --smoothquant 0.5
q fp8 --format fp8
q fp8-block --format fp8-block
q mxfp8 --format mxfp8
q mxfp4 --format mxfp4
q nvfp4 --format nvfp4
q w4-g32 --format w4-g32
q rtn-zp-g32 --format w4-g32 --zero-point
q awq-g32 --format awq-w4-g32 --calib "$T/calib.txt"
q awq-lin-g32 --format awq-w4-g32 --calib "$T/calib.txt" --awq-loss linear
q gptq-zp-g32 --format gptq-w4-g32 --zero-point --calib "$T/calib.txt"
q gptq-act-g32 --format gptq-w4-g32 --zero-point --act-order --calib "$T/calib.txt"
q awq-gptq-g32 --format awq-gptq-w4-g32 --calib "$T/calib.txt"
q skip --format int8 --skip down_proj --skip model.layers.0.self_attn.q_proj
: > "$T/table.txt"
for f in int8 int8-sq fp8 fp8-block mxfp8 mxfp4 nvfp4 w4-g32 rtn-zp-g32 awq-g32 awq-lin-g32 gptq-zp-g32 gptq-act-g32 awq-gptq-g32 skip; do
    echo "$f $(ppl "$T/$f")" >> "$T/table.txt"
done
python3 - "$ref" "$T/table.txt" <<'PY'
import sys
ref = float(sys.argv[1])
ppl = {k: float(v) for k, v in (l.split() for l in open(sys.argv[2]))}
pct = {k: 100 * (v / ref - 1) for k, v in ppl.items()}
# Ceilings on the perplexity increase (%): docs/quantization.md's measured figure (2026-12-04, release
# build, 2 threads, AVX-512 VNNI) plus a margin. The 4-bit formats get about +1 percentage point:
# thread counts, ISAs and kernel summation orders have moved them by at most 0.05 points, while a bug
# that hurts a 4-bit format (a scale off by a few percent, a wrong group's scale, a rounding mode)
# costs points. The 8-bit formats keep the issue's gates (1%, 2%), which need no tighter margin.
ceiling = {
    "int8": 1.0,          # measured +0.05
    "int8-sq": 1.0,       # +0.09
    "fp8": 2.0,           # +0.41
    "fp8-block": 1.5,     # +0.80
    "mxfp8": 2.0,         # +1.02
    "mxfp4": 24.5,        # +23.52
    "nvfp4": 15.1,        # +14.13
    "w4-g32": 22.5,       # +21.45
    "rtn-zp-g32": 14.9,   # +13.93
    "awq-g32": 8.4,       # +7.35
    "awq-lin-g32": 10.5,  # +9.49
    "gptq-zp-g32": 7.4,   # +6.42
    "gptq-act-g32": 6.4,  # +5.32 (2026-12-06, AMD EPYC AVX2)
    "awq-gptq-g32": 7.2,  # +6.17
    "skip": 1.0,          # +0.04
}
assert set(ceiling) == set(ppl), "every format needs a ceiling"
for k in ppl:
    print(f"  {k:12s} ppl {ppl[k]:8.4f}  {pct[k]:+6.2f}%  (ceiling +{ceiling[k]}%)")
fails = []
def gate(cond, what):
    if not cond:
        fails.append(what)
for k, c in ceiling.items():
    gate(pct[k] < c, f"{k}: {pct[k]:+.2f}% is over its ceiling +{c}%")
gate(ppl["awq-g32"] < ppl["rtn-zp-g32"], "AWQ-W4 g32 below RTN (zero points) g32")
gate(ppl["awq-lin-g32"] < ppl["rtn-zp-g32"], "AWQ-W4 g32 (per-Linear loss) below RTN (zero points) g32")
gate(ppl["gptq-zp-g32"] < ppl["rtn-zp-g32"], "GPTQ g32 below RTN (zero points) g32")
gate(ppl["gptq-act-g32"] < ppl["rtn-zp-g32"], "GPTQ act-order g32 below RTN (zero points) g32")
gate(ppl["awq-gptq-g32"] < ppl["rtn-zp-g32"], "AWQ + GPTQ g32 below RTN (zero points) g32")
gate(ppl["nvfp4"] < ppl["mxfp4"], "NVFP4 below MXFP4")
gate(abs(pct["skip"]) <= abs(pct["int8"]) + 0.5, "skipping layers keeps INT8's accuracy")
for k, v in pct.items():
    gate(v > -5, f"{k}: a quantized model far better than its reference is suspicious")
if fails:
    print("FAILED gates:", "; ".join(fails))
    sys.exit(1)
print("quantize_test: gates ok")
PY
grep -q '"quant_method": "compressed-tensors"' "$T/int8/config.json"
grep -q '"model.layers.0.self_attn.q_proj"' "$T/skip/config.json"
grep -q ", 6 kept f32" "$T/skip.log"  # both --skip lists: 5 down_proj and one q_proj
# FP8 weights run on the FP8 kernels (kiln's e4m3_b32 / mxfp8 blocks; 64-wide rows), and the same
# model dequantized to a GGUF file (F32 kernels) scores the same.
# (inspect's output goes to a file first: grep -q exiting early would SIGPIPE inspect under pipefail)
runs_as() {
    "$KILN_BIN" inspect "$1" > "$T/inspect.txt"
    grep -Eq "blk.0.attn_q.weight +$2 " "$T/inspect.txt" || { echo "FAIL: $1 does not run as $2"; exit 1; }
}
runs_as "$T/int8" i8
grep -q "^  i8: 35 matrices, [a-z0-9-]*, int8 per token activations" "$T/inspect.txt" ||
    { echo "FAIL: inspect does not show the W8A8 kernels"; cat "$T/inspect.txt"; exit 1; }
"$KILN_BIN" inspect "$T/int8" --isa ref > "$T/inspect.txt"
grep -q "^  i8: 35 matrices, ref, int8 per token activations$" "$T/inspect.txt" ||
    { echo "FAIL: inspect --isa ref"; cat "$T/inspect.txt"; exit 1; }
runs_as "$T/fp8" e4m3_b32
runs_as "$T/mxfp8" mxfp8
"$KILN_BIN" convert "$T/fp8" "$T/fp8.gguf" --to gguf --quiet
runs_as "$T/fp8.gguf" f32
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a / b - 1) < 1e-3, (a, b)' \
    "$(ppl "$T/fp8")" "$(ppl "$T/fp8.gguf")"
# W8A8 results do not depend on the thread count (the I8 kernels' integer dots are exact and the
# row split does not change any row's arithmetic).
[ "$(ppl "$T/int8")" = "$("$KILN_BIN" perplexity -m "$T/int8" -f "$T/eval.txt" -t 1 --ctx 256 2>/dev/null |
    sed -n 's/^ppl = //p')" ] || { echo "FAIL: int8 perplexity differs between 1 and 2 threads"; exit 1; }
# INT8 runs per-token W8A8 on I8 rows with row scales; dequantized to GGUF (f32 weights, row scales
# applied) it scores within activation rounding of that.
"$KILN_BIN" convert "$T/int8" "$T/int8.gguf" --to gguf --quiet
runs_as "$T/int8.gguf" f32
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a / b - 1) < 2e-3, (a, b)' \
    "$(ppl "$T/int8")" "$(ppl "$T/int8.gguf")"

# Bad input: clear errors, never a crash.
expect_fail() {
    local want=$1; shift
    set +e
    "$@" > "$T/out.txt" 2>&1
    local rc=$?
    set -e
    [ "$rc" = "$want" ] || { echo "FAIL: exit $rc (want $want): $*"; cat "$T/out.txt"; exit 1; }
    grep -q "kiln" "$T/out.txt" || { echo "FAIL: no message: $*"; exit 1; }
}
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format int4
expect_fail 2 "$KILN_BIN" inspect "$T/int8" --isa bogus
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format awq-w4-g32
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format gptq-w4-g32
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format gptq-fp8 --calib "$T/calib.txt"
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format fp8 --zero-point
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format awq-w4-g32 --calib "$T/calib.txt" --awq-loss mse
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format int8 --awq-loss linear
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format awq-w4-g32 --calib "$T/calib.txt" --gptq-one-pass
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format awq-w4-g32 --calib "$T/calib.txt" --act-order
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format int8 --smoothquant 0.5
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format int8 --calib "$T/calib.txt" --smoothquant 1.5
expect_fail 2 "$KILN_BIN" quantize "$M" "$T/x" --format fp8 --calib "$T/calib.txt" --smoothquant 0.5
expect_fail 1 "$KILN_BIN" quantize "$M" "$T/x" --format int8 --skip no_such_proj
# A scale tensor with the wrong shape in the header: the loader says which one.
python3 - "$T/int8/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = "model.layers.1.mlp.up_proj.weight_scale"
h[name]["shape"] = [h[name]["shape"][0] // 2, 2]
new = json.dumps(h).encode()
new += b" " * ((8 - len(new) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(new)) + new + b[8 + n:])
PY
expect_fail 1 "$KILN_BIN" perplexity -m "$T/int8" -f "$T/eval.txt" -t 2 --ctx 256
grep -q "up_proj" "$T/out.txt" || { echo "FAIL: the corrupt-file error does not name the tensor"; cat "$T/out.txt"; exit 1; }
# An E4M3 NaN code in an FP8 weight: refused at load, with the module named.
python3 - "$T/fp8/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
b[8 + n + h["model.layers.2.self_attn.k_proj.weight"]["data_offsets"][0] + 7] = 0x7F
open(p, "wb").write(b)
PY
expect_fail 1 "$KILN_BIN" perplexity -m "$T/fp8" -f "$T/eval.txt" -t 2 --ctx 256
grep -q "k_proj.*NaN" "$T/out.txt" || { echo "FAIL: the NaN-code error does not name the tensor"; cat "$T/out.txt"; exit 1; }
echo "quantize_test: ok"
