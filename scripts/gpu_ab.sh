#!/usr/bin/env bash
# A/B of GPU environment switches on one build (the lent H200; minutes of device time, not
# the full scripts/gpu_device_run.sh): build with DQ_CUDA=ON, run the GPU tests (q1 == bands
# bitwise) with every switch at its default and again with each switch at 0, then, per switch,
# bench/gpu/prefill.py alternating VAR=0 and VAR=1 for ROUNDS pairs (each a separate process,
# since the switches are read once; the other switches at their defaults), printing q1..q4.
# Files under $OUT: build.log tests.log tests_<VAR>_0.log ab_<VAR>_<v>_round<r>.json/.log.
#
# Usage: OUT=dir [ROUNDS=2] bash scripts/gpu_ab.sh VAR [VAR ...]
#   e.g. VAR = DQ_GPU_PDL, DQ_GPU_PREFETCH, DQ_GPU_FUSED_ATTN
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then echo "usage: OUT=dir [ROUNDS=2] bash scripts/gpu_ab.sh VAR [VAR ...]" >&2; exit 2; fi
for var in "$@"; do
  case "$var" in ''|*[!A-Z0-9_]*) echo "error: VAR must be an environment variable name (A-Z, 0-9, _), got '$var'" >&2; exit 2 ;; esac
done
rounds=${ROUNDS:-2}
case "$rounds" in ''|*[!0-9]*) echo "error: ROUNDS must be a whole number, got '$rounds'" >&2; exit 2 ;; esac
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | head -1
source scripts/cuda_install.sh
cuda_install "$OUT/build.log" || exit 1
repo=$PWD
cd "$(mktemp -d)"  # outside the checkout, so the installed package is imported
timeout "${DQ_TESTS_TIMEOUT:-240}" python3 -m pytest -q -rs -p no:cacheprovider "$repo"/tests/test_gpu*.py \
  >"$OUT/tests.log" 2>&1
echo "tests/test_gpu*.py: exit $?: $(tail -1 "$OUT/tests.log")"
for var in "$@"; do
  env "$var=0" timeout "${DQ_TESTS_TIMEOUT:-240}" python3 -m pytest -q -rs -p no:cacheprovider "$repo"/tests/test_gpu*.py \
    >"$OUT/tests_${var}_0.log" 2>&1
  echo "tests/test_gpu*.py with $var=0: exit $?: $(tail -1 "$OUT/tests_${var}_0.log")"
done
for var in "$@"; do
  for r in $(seq 1 "$rounds"); do
    for v in 0 1; do
      tag="ab_${var}_${v}_round${r}"  # no "=" in file names: the device tool leaves those behind
      env "$var=$v" timeout "${DQ_BENCH_TIMEOUT:-180}" python3 "$repo/bench/gpu/prefill.py" --repeats 3 \
        --json "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1
      echo "$var=$v round $r: exit $?"
      grep -E '^\| q[1-4] ' "$OUT/$tag.log"
    done
  done
done
