#!/usr/bin/env bash
# One command on a CUDA machine (the lent H200): build the package with the CUDA backend into a
# throwaway venv, run the GPU tests, the kernel bench (and, where torch is installed, the cuBLAS
# bf16 reference with issue #9's acceptance-1 table), the ds4-gpu prefill bench and the GPU
# A/B/A qualification (run + verify), writing logs and figures under $OUT (summary.md build.log tests.log bench.log kernels_bench.json gpu_prefill.json qualify.log
# evidence.tar.gz; with --peer also llama_build.log peer_cuda.md peer_cuda.json) and a
# short table at the end of stdout. Needs python3 with numpy, pandas, scipy, rich, click, aiohttp,
# matplotlib, pybind11, scikit-build-core, cmake, ninja, pytest, hypothesis, and nvcc; no network.
#
# Usage: OUT=/some/dir scripts/gpu_device_run.sh [--skip-qualify] [--peer]
#   --peer: also the llama.cpp CUDA peer (bench/peers/llamacpp_cuda.py; files peer_cuda.md,
#   peer_cuda.json, llama_build.log). llama.cpp builds in the background while our package
#   builds and the tests run (scripts/build_llamacpp.sh --cuda; DQ_LLAMA_SDIST names a local
#   copy of the sdist: the lent machine reaches no index); every timed step waits for it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
skip_qualify=0
peer=0
for arg in "$@"; do
  case "$arg" in
    --skip-qualify) skip_qualify=1 ;;
    --peer) peer=1 ;;
    *) echo "usage: $0 [--skip-qualify] [--peer]" >&2; exit 2 ;;
  esac
done
peer_pid=
if [ $peer = 1 ]; then
  echo "[$(date -u +%H:%M:%S)] llama.cpp CUDA build (background)"
  JOBS=${DQ_LLAMA_JOBS:-$(( $(nproc) / 2 + 1 ))} bash scripts/build_llamacpp.sh --cuda >"$OUT/llama_build.log" 2>&1 &
  peer_pid=$!
fi
# Timed steps must not share the host with a compiler.
wait_peer_build() {
  if [ -n "$peer_pid" ]; then
    echo "[$(date -u +%H:%M:%S)] waiting for the llama.cpp build"
    wait "$peer_pid"; echo "llama.cpp build exit $?" >>"$OUT/llama_build.log"; peer_pid=
  fi
}
summary="$OUT/summary.md"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
stamp() { date -u +%H:%M:%S; }

# Installs into the machine's own python3 environment (the lent machine is bare and given back
# after the call; tests expect the dflash-qualify script beside sys.executable). Elsewhere, run
# it inside a venv made for the purpose (python3 -m venv --system-site-packages).
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
note "# dflash-qualify on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader 2>/dev/null | head -1)"
echo "[$(stamp)] build (DQ_CUDA=ON)"
source scripts/cuda_install.sh
cuda_install "$OUT/build.log" | tee -a "$summary" || exit 1  # pipefail: cuda_install's status
cd "$(mktemp -d)"  # run from outside the checkout so the installed package is imported
repo=$OLDPWD

echo "[$(stamp)] GPU tests"
t0=$(date +%s)
timeout "${DQ_TESTS_TIMEOUT:-240}" python3 -m pytest -q -rs -s -p no:cacheprovider "$repo"/tests/test_gpu*.py >"$OUT/tests.log" 2>&1
rc=$?
note "tests/test_gpu*.py: exit $rc in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/tests.log")"
grep -h "CPU vs GPU" "$OUT/tests.log" | head -1 | tee -a "$summary"

if [ "${DQ_SKIP_KERNEL_BENCH:-0}" != 1 ] && [ -f "$repo/bench/gpu/kernels_bench.cu" ]; then
  echo "[$(stamp)] kernel bench"
  if cmake -S "$repo" -B ./build-bench -G Ninja -DDQ_CUDA=ON -DDQ_GPU_BENCH=ON -DCMAKE_BUILD_TYPE=Release \
      -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >>"$OUT/bench.log" 2>&1 &&
     cmake --build ./build-bench --target gpu_kernels_bench >>"$OUT/bench.log" 2>&1; then
    cp ./build-bench/gpu_kernels_bench ./gpu_kernels_bench
    wait_peer_build
    timeout 240 ./gpu_kernels_bench "$OUT/kernels_bench.json" >>"$OUT/bench.log" 2>&1
    note "kernel bench: exit $? (bench.log, kernels_bench.json)"
    # Acceptance 1 of issue #9: the MMVQ against cuBLAS bf16 at the same two shapes (torch needed).
    if [ "${DQ_SKIP_CUBLAS:-0}" != 1 ] && [ -f "$OUT/kernels_bench.json" ] && python3 -c "import torch" 2>/dev/null; then
      echo "[$(stamp)] cuBLAS bf16 reference"
      cb=$(mktemp -d)
      for r in 16384 32768; do
        timeout 120 python3 "$repo/bench/gpu/cublas_ref.py" "$cb/cublas_$r.json" --rows $r >>"$OUT/bench.log" 2>&1
      done
      python3 "$repo/bench/gpu/mmvq_acceptance.py" "$OUT/kernels_bench.json" "$cb"/cublas_*.json | tee -a "$summary"
      grep -A 30 "per-launch fixed cost" "$OUT/bench.log" | grep "empty kernel\|fit " | tee -a "$summary"
    fi
  else
    note "kernel bench: build FAILED (bench.log)"
  fi
fi

wait_peer_build
echo "[$(stamp)] ds4-gpu prefill bench"
md=$(mktemp)
timeout "${DQ_BENCH_TIMEOUT:-180}" python3 "$repo/bench/gpu/prefill.py" --json "$OUT/gpu_prefill.json" --markdown "$md" \
  --kernels-json "$OUT/kernels_bench.json" >>"$OUT/bench.log" 2>&1
note "bench/gpu/prefill.py: exit $?"
if python3 -c "import torch" 2>/dev/null; then  # the replayed step kernel by kernel (CUPTI through torch's profiler)
  echo "[$(stamp)] replayed-step timeline"
  tl=$(mktemp)
  timeout 120 python3 "$repo/bench/gpu/timeline.py" --modes 1,4 --all >"$tl" 2>&1
  note "bench/gpu/timeline.py: exit $? (bench.log)"
  grep -E '^## q' "$tl" | tee -a "$summary"
  cat "$tl" >>"$OUT/bench.log"
fi

if [ $peer = 1 ]; then
  echo "[$(stamp)] llama.cpp CUDA peer bench"
  llama_dir=$(tail -2 "$OUT/llama_build.log" | grep -m1 '/bin$')
  if [ -n "$llama_dir" ]; then
    timeout "${DQ_PEER_TIMEOUT:-240}" python3 "$repo/bench/peers/llamacpp_cuda.py" --llama-bin "$llama_dir" \
      --rounds "${DQ_PEER_ROUNDS:-3}" --kernels-json "$OUT/kernels_bench.json" --json "$OUT/peer_cuda.json" \
      --markdown "$OUT/peer_cuda.md" >>"$OUT/bench.log" 2>&1
    note "bench/peers/llamacpp_cuda.py: exit $?"
  else
    note "llama.cpp CUDA build: FAILED (llama_build.log)"
  fi
fi

if [ $skip_qualify = 0 ] && [ -f "$repo/protocols/exact-bands-gpu-aba.toml" ]; then
  echo "[$(stamp)] dflash-qualify run exact-bands-gpu-aba"
  ev=$(mktemp -d)
  {
    timeout "${DQ_QUALIFY_TIMEOUT:-300}" dflash-qualify run exact-bands-gpu-aba --out "$ev"
    echo "run exit code: $?"
    for d in "$ev"/*/; do dflash-qualify verify "$d"; echo "verify exit code: $?"; done
  } >"$OUT/qualify.log" 2>&1
  grep -E "exit code|QUALIFIED|gain|drift|manifest|Evidence" "$OUT/qualify.log" | head -12 | tee -a "$summary"
  tar -C "$ev" -czf "$OUT/evidence.tar.gz" .
fi

if [ "${DQ_PROFILE:-0}" = 1 ]; then  # optional: kernel time summary of a 64-token q1 + q4 prefill
  nsys_bin=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$nsys_bin" ]; then
    echo "[$(stamp)] nsys profile"
    timeout 180 "$nsys_bin" profile -t cuda -o ./prof --force-overwrite true python3 -c "
from dflash_qualify.engine import Engine
e = Engine('ds4-gpu', device='cuda'); t = list(range(1, 65))
for c in (1, 4): e.prefill(t, chunk=c, bands=c > 1)
for c in (1, 4): print('q%d' % c, e.prefill(t, chunk=c, bands=c > 1).prefill_ns / 64e3, 'us/token')
" >>"$OUT/bench.log" 2>&1
    "$nsys_bin" stats -r cuda_gpu_kern_sum,cuda_api_sum -f csv ./prof.nsys-rep 2>/dev/null | cut -c1-220 | head -60 >>"$OUT/bench.log"
    note "nsys: kernel summary appended to bench.log"
  else
    note "nsys: not found"
  fi
fi

echo "[$(stamp)] done"
cat "$md" >>"$summary" 2>/dev/null || tail -20 "$OUT/bench.log" >>"$summary"
[ -f "$OUT/peer_cuda.md" ] && cat "$OUT/peer_cuda.md" >>"$summary"
echo
cat "$summary"
