#!/usr/bin/env bash
# A/B of source trees on the lent H200 in one call (for changes an environment switch cannot
# select: kernel code, launch bounds, layouts). Builds every tree side by side with DQ_CUDA=ON,
# each into its own --target folder (imported through PYTHONPATH, which the CLI subprocesses the
# tests start inherit), runs the GPU tests (q1 == bands bitwise) of every tree but the first, then
# bench/gpu/prefill.py --repeats 3 for all trees in a rotating order (A B C .., then reversed, per
# round; each run a separate process), then bench/gpu/timeline.py for each (where torch is
# installed). Prints one line per prefill run (its exit code and q1 / q4 rows) and leaves under
# $OUT: summary.txt and logs.tar.gz (build, test, prefill and timeline logs): two files, inside
# the device tool's eight.
#
# Usage: OUT=dir [ROUNDS=2] bash scripts/gpu_ab_trees.sh TREE_A TREE_B [TREE_C ...]
#   (DQ_CUDA_BUILD=OFF builds without CUDA: a dry run of the script's own steps on a machine
#   without a GPU, where the GPU tests skip and the prefill runs fail.)
#   TREE_*: a source tree (a folder with pyproject.toml), e.g. . and .gpuwt/experiment (a copy of
#   another branch made with `git archive`; carry it to the device). A is the reference.
set -uo pipefail
if [ $# -lt 2 ]; then echo "usage: OUT=dir [ROUNDS=2] bash scripts/gpu_ab_trees.sh TREE_A TREE_B [TREE_C ...]" >&2; exit 2; fi
trees=()
for tree in "$@"; do
  if [ ! -f "$tree/pyproject.toml" ]; then
    echo "error: $tree is not a source tree (no pyproject.toml)" >&2
    case "$tree" in .gpuwt/*|./.gpuwt/*) echo "  .gpuwt/ is git-ignored: name $tree in the device call's carry list" >&2 ;; esac
    exit 2
  fi
  abs=$(cd "$tree" && pwd)
  for seen in "${trees[@]}"; do
    if [ "$seen" = "$abs" ]; then echo "error: $tree is given twice (each tree builds in its own folder)" >&2; exit 2; fi
  done
  trees+=("$abs")
done
rounds=${ROUNDS:-2}
case "$rounds" in ''|*[!0-9]*) echo "error: ROUNDS must be a whole number, got '$rounds'" >&2; exit 2 ;; esac
n=${#trees[@]}
names=(A B C D E F G H)
if [ "$n" -gt ${#names[@]} ]; then echo "error: at most ${#names[@]} trees, got $n" >&2; exit 2; fi
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
logs=$(mktemp -d)
summary="$OUT/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "# on $(nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv,noheader 2>/dev/null | head -1)"
for i in $(seq 0 $((n - 1))); do say "${names[$i]} = ${trees[$i]}"; done
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(( $(nproc) / n > 2 ? $(nproc) / n : 2 ))}
source "$(dirname "$0")/cuda_install.sh"
sites=()
pids=()
t0=$(date +%s)
for i in $(seq 0 $((n - 1))); do
  sites+=("$(mktemp -d)")
  cuda_install "$logs/build_${names[$i]}.log" "${trees[$i]}" "${sites[$i]}" >"$logs/status_${names[$i]}" 2>&1 &
  pids+=($!)
done
failed=0
for i in $(seq 0 $((n - 1))); do
  wait "${pids[$i]}" || failed=1
  say "${names[$i]} $(tail -1 "$logs/status_${names[$i]}")"
done
[ $failed = 0 ] || cat "$logs"/status_* >&2
say "builds: $(( $(date +%s) - t0 )) s"
pack() { tar czf "$OUT/logs.tar.gz" -C "$logs" . ; }
if [ $failed = 1 ]; then pack; exit 1; fi
on() { local i=$1; shift; PYTHONPATH="${sites[$i]}" PATH="${sites[$i]}/bin:$PATH" "$@"; }
cd "$(mktemp -d)"  # outside every tree, so the installed packages are imported
for i in $(seq 1 $((n - 1))); do
  on "$i" timeout "${DQ_TESTS_TIMEOUT:-240}" python3 -m pytest -q -rs -p no:cacheprovider "${trees[$i]}"/tests/test_gpu*.py \
    >"$logs/tests_${names[$i]}.log" 2>&1
  say "${names[$i]} GPU tests: exit $?: $(tail -1 "$logs/tests_${names[$i]}.log")"
done
order=()
for i in $(seq 0 $((n - 1))); do order+=("$i"); done
for i in $(seq $((n - 1)) -1 0); do order+=("$i"); done
for r in $(seq 1 "$rounds"); do
  for i in "${order[@]}"; do
    log="$logs/prefill_${names[$i]}_round${r}_$(date +%s%N).log"
    on "$i" timeout "${DQ_BENCH_TIMEOUT:-180}" python3 "${trees[0]}/bench/gpu/prefill.py" --repeats 3 >"$log" 2>&1
    rc=$?
    say "${names[$i]} round $r: exit $rc $(grep -E '^\| q[14] ' "$log" | tr '\n' ' ')"
    [ $rc = 0 ] || say "  $(tail -2 "$log" | tr '\n' ' ')"
  done
done
if python3 -c "import torch" 2>/dev/null; then
  for i in $(seq 0 $((n - 1))); do
    on "$i" timeout 120 python3 "${trees[0]}/bench/gpu/timeline.py" --modes 1,4 --all >"$logs/timeline_${names[$i]}.log" 2>&1
    say "timeline ${names[$i]}: exit $? $(grep -E '^## q1' "$logs/timeline_${names[$i]}.log" | head -1)"
  done
fi
pack
