#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-completion, llama-perplexity, llama-server and llama-quantize from the source that
# PyPI's llama-cpp-python sdist vendors, into a scratch folder outside the repository (kiln never
# commits llama.cpp's code). Not part of the tests. Prints the folder holding the binaries.
#
# usage: bench/compare/build_llama_cpp.sh [SCRATCH]   (default: $KILN_COMPARE_DIR or /tmp/kiln-compare)
# env:   LLAMA_CPP_PYTHON_VERSION (default 0.3.36), JOBS (default: nproc)
set -euo pipefail
SCRATCH=${1:-${KILN_COMPARE_DIR:-/tmp/kiln-compare}}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$SCRATCH"
cd "$SCRATCH"
SRC="llama_cpp_python-$VERSION/vendor/llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    echo "build_llama_cpp: fetching the llama-cpp-python $VERSION sdist from PyPI" >&2
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d . >&2
    tar xzf "llama_cpp_python-$VERSION.tar.gz"
fi
BUILD="$SCRATCH/llama.cpp-build"
# Native CPU flags, as a user building llama.cpp on this machine would get; no network, no GPU.
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$BUILD" -j "$JOBS" --target llama-bench llama-completion llama-perplexity llama-server llama-quantize >&2
echo "$BUILD/bin"
