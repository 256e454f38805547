# Sourced by the device scripts (gpu_device_run.sh, gpu_ab.sh) from the repository root:
# cuda_install LOG installs the package with the CUDA backend (DQ_CUDA=ON) into this python3's
# own environment (the lent machine is bare and given back after the call), logging to LOG.
# It prints one status line on stdout ("build: ok in N s" or "build: FAILED (see <log name>)")
# and, on failure, LOG's last 40 lines on stderr, then returns 1.
cuda_install() {
  local t0
  t0=$(date +%s)
  if python3 -m pip install --no-build-isolation --no-deps --no-cache-dir -C cmake.define.DQ_CUDA=ON . \
      >"$1" 2>&1; then
    echo "build: ok in $(( $(date +%s) - t0 )) s"
    return 0
  fi
  tail -40 "$1" >&2
  echo "build: FAILED (see $(basename "$1"))"
  return 1
}
