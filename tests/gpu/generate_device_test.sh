#!/usr/bin/env bash
# `kiln generate --device cuda`, the whole path on a GPU (kiln::Engine -> EngineCore over the
# PagedModel -> CudaModel, CUDA graphs for the decode steps), against `--device cpu` on
# stories260K: greedy, f32 K/V on both, so the texts must be equal, also with repetition /
# frequency / presence penalties (applied by the GPU's sampling kernel); then seeded sampling with the
# same --seed twice on the GPU gives the same text; `kiln perplexity --device cuda` on the
# TinyStories excerpt equals the CPU's within 1e-4 (f32 weights and K/V on both); `--spec ngram` on the
# GPU gives the CPU's greedy text.
# Exit 77 (CTest: skipped) without a CUDA device or test data.
set -euo pipefail
: "${KILN_BIN:?}" "${KILN_TESTDATA:?}"
M="$KILN_TESTDATA/models/stories260K/stories260K.bin"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/skip.sh"
[ -f "$M" ] || skip_test "no test data ($M)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! "$KILN_BIN" generate -m "$M" -p "Once upon a time" -n 4 --device cuda 2> "$T/probe.err" > /dev/null; then
    if grep -q "does not exist (0 device" "$T/probe.err"; then
        echo "no CUDA device: skipped"
        exit 77
    fi
    cat "$T/probe.err"
    exit 1
fi
run() { "$KILN_BIN" generate -m "$M" -p "Once upon a time" --kv-cache-dtype f32 "$@"; }
run -n 200 --device cpu -t 2 2> /dev/null > "$T/cpu.txt"
run -n 200 --device cuda 2> "$T/gpu.err" > "$T/gpu.txt"
if ! cmp -s "$T/cpu.txt" "$T/gpu.txt"; then
    echo "greedy text differs between --device cpu and --device cuda:"
    diff "$T/cpu.txt" "$T/gpu.txt" || true
    cat "$T/gpu.err"
    exit 1
fi
# the load line (describe() at load) says the decode steps run as CUDA graphs by default
grep -q "decode steps in CUDA graphs" "$T/gpu.err" || { echo "CUDA graphs not enabled by default:"; cat "$T/gpu.err"; exit 1; }
# greedy with penalties: the GPU samples on the device (kernels/cuda/sample_rows, penalty entries
# from the host), the CPU on the host; the argmax after the same penalties must agree
pen=(-n 120 --repeat-penalty 1.3 --frequency-penalty 0.4 --presence-penalty 0.2)
run "${pen[@]}" --device cpu -t 2 2> /dev/null > "$T/cpu_pen.txt"
run "${pen[@]}" --device cuda 2> /dev/null > "$T/gpu_pen.txt"
if ! cmp -s "$T/cpu_pen.txt" "$T/gpu_pen.txt"; then
    echo "greedy text with penalties differs between --device cpu and --device cuda:"
    diff "$T/cpu_pen.txt" "$T/gpu_pen.txt" || true
    exit 1
fi
cmp -s "$T/cpu.txt" "$T/cpu_pen.txt" && { echo "the penalties changed nothing: not a test"; exit 1; }
# speculative decoding (n-gram drafts verified on the GPU: argmax ids back, or with penalties the
# logits rows back to the host's verifier): the same greedy text as the CPU without drafts
run -n 200 --device cuda --spec ngram --spec-ngram-min 1 2> "$T/spec.err" > "$T/gpu_spec.txt"
run "${pen[@]}" --device cuda --spec ngram --spec-ngram-min 1 2> /dev/null > "$T/gpu_spec_pen.txt"
for f in spec spec_pen; do
    want=cpu.txt; [ "$f" = spec_pen ] && want=cpu_pen.txt
    cmp -s "$T/$want" "$T/gpu_$f.txt" || { echo "--spec ngram on the GPU changed the greedy text ($f):"; diff "$T/$want" "$T/gpu_$f.txt" || true; exit 1; }
done
grep -q "accepted" "$T/spec.err" || { echo "no speculation summary:"; cat "$T/spec.err"; exit 1; }
run -n 64 --device cuda --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 2> /dev/null > "$T/s1.txt"
run -n 64 --device cuda --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 2> /dev/null > "$T/s2.txt"
cmp -s "$T/s1.txt" "$T/s2.txt" || { echo "the same --seed gave different texts on the GPU"; exit 1; }
[ -s "$T/s1.txt" ] || { echo "empty sampled text"; exit 1; }
E="$KILN_TESTDATA/eval/tinystories_excerpt.txt"
if [ -f "$E" ]; then
    cpu_ppl=$("$KILN_BIN" perplexity -m "$M" -f "$E" --ctx 256 -t 2 2> /dev/null | sed -n 's/^ppl = //p')
    gpu_ppl=$("$KILN_BIN" perplexity -m "$M" -f "$E" --ctx 256 --device cuda 2> /dev/null | sed -n 's/^ppl = //p')
    python3 -c "import sys; c, g = float('$cpu_ppl'), float('$gpu_ppl'); sys.exit(0 if abs(c - g) <= 1e-4 * c else 1)" ||
        { echo "perplexity: CPU $cpu_ppl, GPU $gpu_ppl"; exit 1; }
    echo "perplexity: CPU $cpu_ppl, GPU $gpu_ppl"
fi
echo "greedy: $(wc -c < "$T/gpu.txt") bytes equal on CPU and GPU (also with penalties); seeded sampling repeatable"
