#!/usr/bin/env bash
# Every GGUF file kiln writes, read back by someone else. kiln's own reader cannot vouch for kiln's
# writer (a mistake shared by both, e.g. a swapped nibble order or a wrong ggml type id, round-trips
# cleanly), so gguf-py (PyPI gguf, llama.cpp's reader) reads each file and gguf_readback.py compares:
# - `kiln synth` in every type it writes (f32, f16, bf16, q8_0, q4_0, q4_1, mxfp4 on "tiny"; q4_k,
#   q5_k, q6_k on "tiny-k", rows of whole 256-blocks), and each converted to GGUF again by
#   `kiln convert` (quantized bytes copied unchanged): tensor list (names, ggml types, shapes,
#   bytes), every metadata key and value, the llama.* hyper-parameters and the tokenizer must agree
#   with `kiln inspect --json`, and gguf-py's dequantize of every tensor must equal kiln's own
#   decoding (`kiln quantize --format int8` with every projection skipped writes the f32 weights it
#   decoded) bit for bit: both do the same float32 operations in the same order, so no tolerance
#   (only MXFP4 code 8, -0.0 in kiln and +0.0 in ggml/gguf-py, is allowed, counted and printed);
# - `kiln convert` to GGUF at f32, f16 and bf16 from stories260K.bin (llama2.c) and from an HF
#   safetensors folder written by the safetensors package: the tensors must equal the source arrays
#   parsed by numpy, exactly for f32, and round-to-nearest-even for f16 (numpy) and bf16 (computed
#   on the bits); hyper-parameters, general.file_type and the tok512.bin tokenizer as the source's;
# - a mutation: one byte of a q4_k tensor flipped must be reported, naming that tensor.
# Needs KILN_BIN, KILN_TESTDATA; skips (exit 77) without the test data or gguf/numpy/safetensors.
set -euo pipefail
: "${KILN_BIN:?}" "${KILN_TESTDATA:?}"
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
model="$KILN_TESTDATA/models/stories260K"
[ -f "$model/stories260K.bin" ] && [ -f "$model/tok512.bin" ] || skip_test "no $model/stories260K.bin or tok512.bin"
python3 -c "import gguf, numpy, safetensors" 2> /dev/null ||
    skip_test "python3 modules gguf, numpy and safetensors are needed (pip install -r scripts/requirements.txt)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "${BASH_SOURCE[0]}")/gguf_readback.py" "$KILN_BIN" "$KILN_TESTDATA" "$tmp"
