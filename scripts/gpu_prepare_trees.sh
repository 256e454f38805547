#!/usr/bin/env bash
# Copies branches into the git-ignored .gpuwt/ folder for scripts/gpu_ab_trees.sh (run here,
# before the device call): .gpuwt/<name> = `git archive` of each branch, then prints the carry
# list and the command line the device call needs (.gpuwt/ is ignored, so the device tool copies
# a tree only when the call carries it; at most 8 carry paths).
#
# Usage: bash scripts/gpu_prepare_trees.sh BRANCH[=NAME] [BRANCH[=NAME] ...]
#   NAME defaults to the branch with any "gpu-" prefix dropped, e.g. gpu-attn-split -> attn-split.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then echo "usage: bash scripts/gpu_prepare_trees.sh BRANCH[=NAME] [BRANCH[=NAME] ...]" >&2; exit 2; fi
if [ $# -gt 7 ]; then echo "error: at most 7 branches (gpu_ab_trees.sh takes 8 trees, the first is this checkout), got $#" >&2; exit 2; fi
# Every argument is checked (branch, name, no name twice) before anything is copied.
branches=()
names=()
for arg in "$@"; do
  branch=${arg%%=*}
  name=${arg#*=}
  [ "$name" != "$arg" ] || name=${branch#gpu-}
  case "$name" in ''|.*|*[!A-Za-z0-9._-]*)
    echo "error: tree name must be letters, digits, '.', '_' or '-', not starting with '.', got '$name'" >&2; exit 2 ;;
  esac
  if ! git rev-parse --verify --quiet "$branch^{commit}" >/dev/null; then
    echo "error: $branch is not a branch or commit here" >&2; exit 2
  fi
  for seen in ${names[@]+"${names[@]}"}; do
    if [ "$seen" = "$name" ]; then echo "error: tree name $name is given twice" >&2; exit 2; fi
  done
  branches+=("$branch")
  names+=("$name")
done
mkdir -p .gpuwt
carry=""
trees=""
for i in "${!names[@]}"; do
  branch=${branches[$i]} name=${names[$i]}
  rm -rf ".gpuwt/$name"
  git archive --prefix="$name/" "$branch" | tar -x -C .gpuwt
  echo "$branch ($(git rev-parse --short "$branch")) -> .gpuwt/$name"
  carry+="${carry:+, }\".gpuwt/$name\""
  trees+=" .gpuwt/$name"
done
echo "carry: [$carry]"
echo "command: OUT=\$OUT ROUNDS=1 bash scripts/gpu_ab_trees.sh .$trees"
