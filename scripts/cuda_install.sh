# Sourced by the device scripts (gpu_device_run.sh, gpu_ab.sh, gpu_ab_trees.sh):
# cuda_install LOG [SOURCE [TARGET]] installs the package at SOURCE (default: the current folder)
# with the CUDA backend (DQ_CUDA=ON; DQ_CUDA_BUILD=OFF builds without it, for dry runs where
# there is no GPU) into this python3's own environment (the lent machine is bare and given back
# after the call) or, given TARGET, into that folder (pip --target), logging to LOG.
# It prints one status line on stdout ("build: ok in N s" or "build: FAILED (see <log name>)")
# and, on failure, LOG's last 40 lines on stderr, then returns 1.
cuda_install() {
  local t0 src=${2:-.}
  local where=()
  [ -n "${3:-}" ] && where=(--target "$3")
  t0=$(date +%s)
  if python3 -m pip install --no-build-isolation --no-deps --no-cache-dir ${where[@]+"${where[@]}"} \
      -C cmake.define.DQ_CUDA="${DQ_CUDA_BUILD:-ON}" "$src" >"$1" 2>&1; then
    echo "build: ok in $(( $(date +%s) - t0 )) s"
    return 0
  fi
  tail -40 "$1" >&2
  echo "build: FAILED (see $(basename "$1"))"
  return 1
}
