#!/usr/bin/env bash
# The CPU engine on another host in one command: build without CUDA, the prefill bench on every
# SIMD path (DQ_SIMD_PATH), the llama.cpp peer bench per path (both peer models), then the kernel and per-path exactness tests,
# logs and figures under $OUT (summary.md first). For hosts without network: pass a tar.xz of
# llama.cpp's source (the llama-cpp-python sdist's vendor/llama.cpp) to build llama-bench from,
# and put the `gguf` package on PYTHONPATH for the peer GGUF. Needs python3 with numpy, scipy,
# pybind11, scikit-build-core, cmake (pytest for the tests).
#
# Usage: OUT=/some/dir scripts/cpu_device_run.sh [LLAMA_SRC.tar.xz]
# Options: PREFILL_ARGS (default "--repeats 5"; e.g. "--model ds4-gpu --tokens 64 --repeats 3"),
# PREFILL_TIMEOUT (s per path, default 90), PEER_PATHS, PEER_ROUNDS, DQ_SKIP_TESTS=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
S="$OUT/summary.md"
: >"$S"
note() { echo "$*" | tee -a "$S"; }
J=$(nproc)
note "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $J CPUs; SIMD flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|amx_tile|amx_int8)$' | xargs)"
lscpu >"$OUT/lscpu.txt" 2>&1
LLBIN=""
if [ -n "${1:-}" ] && [ -f "$1" ]; then
  W=$(mktemp -d)
  tar xJf "$1" -C "$W"
  ( cmake -S "$W/llama.cpp" -B "$W/b" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      >"$OUT/llama_build.log" 2>&1 &&
    cmake --build "$W/b" -j $(( J > 3 ? J / 2 : 1 )) --target llama-bench >>"$OUT/llama_build.log" 2>&1 ) &
  LLPID=$!
  LLBIN="$W/b/bin"
fi
t0=$(date +%s)
if ! CMAKE_ARGS="-DDQ_CUDA=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$J python3 -m pip install --no-build-isolation --no-deps \
    --no-cache-dir . >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"
  note "build: FAILED (build.log)"
  exit 1
fi
note "build: ok in $(( $(date +%s) - t0 )) s"
repo=$PWD
cd "$(mktemp -d)"  # import the installed package, not the checkout
# Every SIMD path this CPU has but the scalar reference (amx too, where granted).
PATHS=$(python3 -c "from dflash_qualify.engine import _core; print(' '.join(p for p in _core.kernels.cpu_features()['paths'] if p != 'scalar'))")
note "SIMD paths: $PATHS"
for path in $PATHS; do
  # shellcheck disable=SC2086  # PREFILL_ARGS is a word list on purpose
  DQ_SIMD_PATH=$path timeout "${PREFILL_TIMEOUT:-90}" python3 "$repo/bench/engine/prefill.py" --threads 1,2 \
    ${PREFILL_ARGS:---repeats 5} --json "$OUT/prefill_$path.json" >"$OUT/prefill_$path.txt" 2>&1
  note "prefill ($path): exit $?"
  grep -E "^model|^q1 |^q4 |paired per round" "$OUT/prefill_$path.txt" | tee -a "$S"
done
if [ -n "$LLBIN" ]; then
  wait "$LLPID"
  note "llama.cpp build: exit $?"
fi
if [ -n "$LLBIN" ] && [ -x "$LLBIN/llama-bench" ]; then
  # The peer bench per SIMD path of ours (PEER_PATHS, default every path above; llama.cpp stays
  # on its native build), both peer models, PEER_ROUNDS interleaved rounds.
  for path in ${PEER_PATHS:-$PATHS}; do
    DQ_SIMD_PATH=$path timeout 300 python3 "$repo/bench/peers/llamacpp_bench.py" --threads 1,2 \
      --rounds "${PEER_ROUNDS:-5}" --llama-bin "$LLBIN" --json "$OUT/peer_$path.json" >"$OUT/peer_$path.txt" 2>&1
    note "peer bench ($path): exit $?"
    grep -v "^peer:" "$OUT/peer_$path.txt" | tee -a "$S"
  done
fi
if [ -n "${DQ_SKIP_TESTS:-}" ]; then
  note "tests: skipped (DQ_SKIP_TESTS)"
elif python3 -c "import pytest, hypothesis" 2>/dev/null; then
  timeout "${DQ_TESTS_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider "$repo/tests/test_kernels.py" \
    "$repo/tests/test_simd_paths.py" >"$OUT/tests.log" 2>&1
  note "tests (kernels, exactness per SIMD path): exit $?: $(tail -1 "$OUT/tests.log")"
else
  note "tests: skipped (no pytest/hypothesis)"
fi
