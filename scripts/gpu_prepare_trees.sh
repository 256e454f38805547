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
carry=()
trees=()
for arg in "$@"; do
  branch=${arg%%=*}
  name=${arg#*=}
  [ "$name" != "$arg" ] || name=${branch#gpu-}
  case "$name" in ''|*[!A-Za-z0-9._-]*) echo "error: tree name must be letters, digits, '.', '_' or '-', got '$name'" >&2; exit 2 ;; esac
  if ! git rev-parse --verify --quiet "$branch^{commit}" >/dev/null; then
    echo "error: $branch is not a branch or commit here" >&2; exit 2
  fi
  rm -rf ".gpuwt/$name"
  mkdir -p .gpuwt
  git archive --prefix="$name/" "$branch" | tar -x -C .gpuwt
  echo "$branch ($(git rev-parse --short "$branch")) -> .gpuwt/$name"
  carry+=("\".gpuwt/$name\"")
  trees+=(".gpuwt/$name")
done
echo "carry: [$(IFS=,; echo "${carry[*]}" | sed 's/,/, /g')]"
echo "command: OUT=\$OUT ROUNDS=1 bash scripts/gpu_ab_trees.sh . ${trees[*]}"
