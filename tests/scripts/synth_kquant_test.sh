#!/usr/bin/env bash
# `kiln synth` K-quant weights (q4_k, q5_k, q6_k) on the "tiny-k" preset (widths multiple of 256),
# checked against an independent decoder: gguf-py's `gguf.quants.dequantize` must read every weight
# matrix back within the error a uniform quantizer of that width gives on normal data (relative RMS
# ~7.7% at 4 bits with 32-element sub-blocks, ~3.8% at 5, ~1.9% at 6 bits with 16-element
# sub-blocks; bounds 1.2x those) against the f32 file of the same seed, and above zero. `kiln bench`
# then runs each file (its K-quant kernels at this CPU's level).
set -euo pipefail
: "${KILN_BIN:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for dt in f32 q4_k q5_k q6_k; do
    "$KILN_BIN" synth --preset tiny-k --dtype "$dt" --seed 3 -t 2 -o "$T/$dt.gguf" 2> /dev/null
done
for dt in q4_k q5_k q6_k; do
    "$KILN_BIN" bench -m "$T/$dt.gguf" -p 8 -n 4 -r 1 -t 2 --probe-mib 64 --json > "$T/bench_$dt.json"
done
python3 - "$T" <<'PY'
import json, sys
import numpy as np
import gguf
T = sys.argv[1]
ref = {t.name: np.array(t.data, dtype=np.float32).reshape(-1) for t in gguf.GGUFReader(f"{T}/f32.gguf").tensors}
bounds = {"q4_k": 0.077 * 1.2, "q5_k": 0.038 * 1.2, "q6_k": 0.019 * 1.2}
for dt, bound in bounds.items():
    n = 0
    for t in gguf.GGUFReader(f"{T}/{dt}.gguf").tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            continue
        assert t.tensor_type.name == dt.upper(), (t.name, t.tensor_type)
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        want = ref[t.name]
        rel = float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)))
        assert 0 < rel < bound, (dt, t.name, rel, bound)
        n += 1
    assert n == 2 * 7 + 2, (dt, n)  # 7 matrices per layer, token_embd, output
    res = json.load(open(f"{T}/bench_{dt}.json"))
    assert [r["test"] for r in res] == ["pp8", "tg4"] and all(r["tokens_per_s"] > 0 for r in res), res
    assert all(r["weights_dtype"] == dt for r in res), res
print("synth k-quants: gguf-py reads them back within bounds")
PY
