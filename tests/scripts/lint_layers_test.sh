#!/usr/bin/env bash
# scripts/lint_layers.py must pass on this tree and fail on each of a set of planted bad includes, in
# a copy of the tree's sources, naming the file and line: a reverse include between layers, the oracle
# (kernels/ref) including what it checks (kernels/cpu) or a backend including the oracle, one backend
# including another, the kernel choice (kernels/select) included from below, the public API
# including src/, a library linking a higher one, a file including a layer its library does not link,
# and CUDA, HTTP and MPI headers outside the folders that may use them.
set -euo pipefail
: "${KILN_SOURCE_DIR:?}"
lint="$KILN_SOURCE_DIR/scripts/lint_layers.py"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 "$lint" "$KILN_SOURCE_DIR" > "$T/out.txt" || { cat "$T/out.txt"; echo "FAIL: the tree itself does not pass"; exit 1; }
copy() {  # a fresh copy of the sources the lint reads
    rm -rf "$T/tree"
    (cd "$KILN_SOURCE_DIR" && find src include tools bench tests -type f \
        \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt \) -print0 |
        tar --null -cf - -T -) | (mkdir -p "$T/tree" && cd "$T/tree" && tar -xf -)
}
failures=0
# plant FILE LINE: appends LINE to FILE in a fresh copy; the lint must exit 1 naming FILE.
plant() {
    copy
    [ -f "$T/tree/$1" ] || { echo "FAIL: no $1 to plant into"; failures=$((failures + 1)); return; }
    printf '%s\n' "$2" >> "$T/tree/$1"
    if python3 "$lint" "$T/tree" > "$T/out.txt"; then
        echo "FAIL: not caught: $2 in $1"; failures=$((failures + 1))
    elif ! grep -Eq "^layering: $1(:[0-9]+)?: " "$T/out.txt"; then
        echo "FAIL: caught, but the message does not name $1:"; cat "$T/out.txt"; failures=$((failures + 1))
    else
        echo "caught: $2 in $1"
    fi
}
plant src/core/status.cc '#include "engine/engine_core.h"'
plant src/formats/gguf.cc '#include "quant/int_quant.h"'
plant src/kernels/ref/dequant.cc '#include "kernels/cpu/matmul.h"'
plant src/kernels/cpu/matmul.cc '#include "kernels/cuda/device.h"'
plant src/kernels/cpu/attention.cc '#include "kernels/ref/transformer.h"'
plant src/kernels/ref/transformer.cc '#include "kernels/select/kernel_select.h"'
plant src/kernels/kernel_params.h '#include "kernels/ref/dequant.h"'
plant include/kiln/engine.h '#include "core/status.h"'
plant src/kv/CMakeLists.txt 'kiln_library(kv DEPS kiln_engine kiln_core)'
plant src/kv/block_pool.cc '#include "formats/gguf.h"'
plant src/model/cpu_model.cc '#include <cuda_runtime.h>'
plant src/engine/engine_core.cc '#include <httplib.h>'
plant src/engine/engine_core.cc '#include <mpi.h>'
plant src/kernels/cuda/device.h '#include <nccl.h>'
[ "$failures" -eq 0 ] || { echo "lint_layers_test: $failures failure(s)"; exit 1; }
echo "lint_layers_test: ok"
