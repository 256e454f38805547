#!/usr/bin/env bash
# A/B of two source trees on the lent H200 in one call (for changes an environment switch cannot
# select: kernel code, launch bounds, layouts). Builds A and B side by side with DQ_CUDA=ON (A into
# a --target folder, B into this python3's environment), runs B's GPU tests (q1 == bands bitwise),
# then bench/gpu/prefill.py --repeats 3 for A and B alternated (A B B A per round, each a separate
# process), then bench/gpu/timeline.py for each (where torch is installed). Prints one line per
# prefill run (its exit code and q1 / q4 rows) and leaves under $OUT: summary.txt and logs.tar.gz
# (build, test, prefill and timeline logs): two files, inside the device tool's eight.
#
# Usage: OUT=dir [ROUNDS=2] bash scripts/gpu_ab_trees.sh TREE_A TREE_B
#   TREE_*: a source tree (a folder with pyproject.toml), e.g. . and .gpuwt/experiment (a copy of
#   another branch made with `git archive`; carry it to the device).
set -uo pipefail
if [ $# -ne 2 ]; then echo "usage: OUT=dir [ROUNDS=2] bash scripts/gpu_ab_trees.sh TREE_A TREE_B" >&2; exit 2; fi
for tree in "$1" "$2"; do
  if [ ! -f "$tree/pyproject.toml" ]; then echo "error: $tree is not a source tree (no pyproject.toml)" >&2; exit 2; fi
done
rounds=${ROUNDS:-2}
case "$rounds" in ''|*[!0-9]*) echo "error: ROUNDS must be a whole number, got '$rounds'" >&2; exit 2 ;; esac
tree_a=$(cd "$1" && pwd); tree_b=$(cd "$2" && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
logs=$(mktemp -d)
summary="$OUT/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "# A = $tree_a, B = $tree_b on $(nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv,noheader 2>/dev/null | head -1)"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(( $(nproc) / 2 ))}
site_a=$(mktemp -d)
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-cache-dir --target "$site_a" \
  -C cmake.define.DQ_CUDA=ON "$tree_a" >"$logs/build_a.log" 2>&1 &
pid_a=$!
python3 -m pip install --no-build-isolation --no-deps --no-cache-dir \
  -C cmake.define.DQ_CUDA=ON "$tree_b" >"$logs/build_b.log" 2>&1 &
pid_b=$!
wait $pid_a; rc_a=$?
wait $pid_b; rc_b=$?
say "builds: A exit $rc_a, B exit $rc_b, $(( $(date +%s) - t0 )) s"
pack() { tar czf "$OUT/logs.tar.gz" -C "$logs" . ; }
if [ $rc_a != 0 ] || [ $rc_b != 0 ]; then tail -20 "$logs"/build_*.log >&2; pack; exit 1; fi
run_a() { PYTHONPATH="$site_a" "$@"; }
run_b() { "$@"; }
cd "$(mktemp -d)"  # outside both trees, so the installed packages are imported
timeout "${DQ_TESTS_TIMEOUT:-240}" python3 -m pytest -q -rs -p no:cacheprovider "$tree_b"/tests/test_gpu*.py \
  >"$logs/tests_b.log" 2>&1
say "B GPU tests: exit $?: $(tail -1 "$logs/tests_b.log")"
for r in $(seq 1 "$rounds"); do
  for side in a b b a; do
    log="$logs/prefill_${side}_round${r}_$(date +%s%N).log"
    "run_$side" timeout "${DQ_BENCH_TIMEOUT:-180}" python3 "$tree_a/bench/gpu/prefill.py" --repeats 3 >"$log" 2>&1
    rc=$?
    say "$side round $r: exit $rc $(grep -E '^\| q[14] ' "$log" | tr '\n' ' ')"
    [ $rc = 0 ] || say "  $(grep -iE 'error|differs' "$log" | head -2 | tr '\n' ' ')"
  done
done
if python3 -c "import torch" 2>/dev/null; then
  for side in a b; do
    "run_$side" timeout 120 python3 "$tree_a/bench/gpu/timeline.py" --modes 1,4 --all >"$logs/timeline_$side.log" 2>&1
    say "timeline $side: exit $? $(grep -E '^## q1' "$logs/timeline_$side.log" | head -1)"
  done
fi
pack
