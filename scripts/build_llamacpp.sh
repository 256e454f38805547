#!/usr/bin/env bash
# Build llama.cpp's llama-server and llama-bench from the source vendored in the
# llama-cpp-python sdist (PyPI), natively for this CPU, into a cache outside the repo.
#
# Usage: scripts/build_llamacpp.sh [--cuda] [--check]   prints the cache's bin/ folder on its last line
#        --check: build nothing; exit 1 when the cache holds no build (tests/real_servers.py)
# Env:   DQ_LLAMA_CACHE  cache root (default ~/.cache/dflash-qualify)
#        DQ_LLAMA_VERSION llama-cpp-python version (default 0.3.36)
#        JOBS            build parallelism (default: nproc)
#        DQ_LLAMA_SDIST  a local copy of the sdist (any tarball holding llama_cpp_python-VERSION/
#                        vendor/llama.cpp), for a machine without the package index
# --cuda builds llama-bench only (the GPU peer bench needs no server), for sm_90.
# The cache key is the version, the backend and a hash of this CPU's flags (a -DGGML_NATIVE=ON
# build may not run on another CPU), so a second call on the same machine builds nothing.
# The sdist's vendor/llama.cpp/models/ggml-vocab-*.gguf files stay beside bin/ in src/.
set -euo pipefail
VERSION="${DQ_LLAMA_VERSION:-0.3.36}"
CACHE="${DQ_LLAMA_CACHE:-$HOME/.cache/dflash-qualify}"
JOBS="${JOBS:-$(nproc)}"
BACKEND=cpu
CHECK=0
for arg in "$@"; do
  case "$arg" in
    --cuda) BACKEND=cuda ;;
    --check) CHECK=1 ;;
    *) echo "usage: $0 [--cuda] [--check]" >&2; exit 2 ;;
  esac
done
CPU_KEY="$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-12)"
DEST="$CACHE/llama.cpp-$VERSION-$BACKEND-$CPU_KEY"
TARGETS=(llama-server llama-bench)
[ "$BACKEND" = cuda ] && TARGETS=(llama-bench)
built=1
for t in "${TARGETS[@]}"; do [ -x "$DEST/bin/$t" ] || built=0; done
if [ "$built" = 1 ]; then
  echo "$DEST/bin"; exit 0
fi
[ "$CHECK" = 1 ] && { echo "build_llamacpp: not built yet: $DEST" >&2; exit 1; }
mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "build_llamacpp: llama-cpp-python $VERSION sdist -> $DEST ($BACKEND, $JOBS jobs)" >&2
if [ -n "${DQ_LLAMA_SDIST:-}" ]; then
  tar xf "$DQ_LLAMA_SDIST" -C "$WORK"
else
  python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" \
    -d "$WORK" >&2
  tar xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
fi
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
ARGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
[ "$BACKEND" = cuda ] && ARGS+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
cmake -S "$SRC" -B "$WORK/build" "${ARGS[@]}" >"$WORK/configure.log" 2>&1 \
  || { tail -30 "$WORK/configure.log" >&2; exit 1; }
cmake --build "$WORK/build" -j "$JOBS" --target "${TARGETS[@]}" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; exit 1; }
STAGE="$WORK/stage"
mkdir -p "$STAGE/bin" "$STAGE/models"
for t in "${TARGETS[@]}"; do cp "$WORK/build/bin/$t" "$STAGE/bin/"; done
cp "$SRC"/models/ggml-vocab-*.gguf "$STAGE/models/" 2>/dev/null || true  # none in a slimmed copy
cp "$WORK/build.log" "$STAGE/build.log"
rm -rf "$DEST"
mv "$STAGE" "$DEST"          # appears whole or not at all
echo "$DEST/bin"
