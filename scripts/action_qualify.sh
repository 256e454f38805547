#!/usr/bin/env bash
# The GitHub action's run -> verify -> gate steps (action.yml calls this; tests run it too).
# Inputs from the environment: DQ_PROTOCOL (required), DQ_OUT, DQ_WARMUPS, DQ_MEASURED,
# DQ_MIN_GAIN, DQ_MAX_DRIFT. Writes evidence_dir, manifest_sha256, junit, qualified and
# gate_rc to $GITHUB_OUTPUT; the gate appends the markdown report to $GITHUB_STEP_SUMMARY.
# Exit: 0 when sealed evidence verified and the gate ran (its verdict is in gate_rc), else the
# failing command's exit code (2 bad input, 3 run failed: a .partial directory says why).
set -euo pipefail
: "${DQ_PROTOCOL:?DQ_PROTOCOL is required}"
out="${DQ_OUT:-dflash-qualify-evidence}"
output="${GITHUB_OUTPUT:-/dev/null}"
mkdir -p "$out"
marker="$(mktemp)"          # directories newer than this were written by this run
trap 'rm -f "$marker"' EXIT

args=(run "$DQ_PROTOCOL" --out "$out")
[ -n "${DQ_WARMUPS:-}" ] && args+=(--warmups "$DQ_WARMUPS")
[ -n "${DQ_MEASURED:-}" ] && args+=(--measured "$DQ_MEASURED")
set +e
dflash-qualify "${args[@]}"
rc=$?
set -e
echo "run exit code: $rc (0 qualified, 1 not qualified, 2 bad input, 3 run failed)"
[ "$rc" -le 1 ] || exit "$rc"   # 0 and 1 sealed evidence; 2 and 3 did not

dir=$(find "$out" -mindepth 1 -maxdepth 1 -type d ! -name '*.partial' -newer "$marker" | sort | tail -n 1)
[ -n "$dir" ] || { echo "no sealed evidence directory under $out"; exit 3; }
echo "evidence_dir=$dir" >> "$output"
echo "manifest_sha256=$(sha256sum "$dir/manifest.json" | cut -d' ' -f1)" >> "$output"

dflash-qualify verify "$dir"

junit="$dir.junit.xml"
args=(gate "$dir" --junit "$junit")
[ -n "${DQ_MIN_GAIN:-}" ] && args+=(--min-gain "$DQ_MIN_GAIN")
[ -n "${DQ_MAX_DRIFT:-}" ] && args+=(--max-drift "$DQ_MAX_DRIFT")
set +e
dflash-qualify "${args[@]}"
gate_rc=$?
set -e
[ "$gate_rc" -le 1 ] || exit "$gate_rc"
echo "junit=$junit" >> "$output"
echo "gate_rc=$gate_rc" >> "$output"
echo "qualified=$([ "$gate_rc" -eq 0 ] && echo true || echo false)" >> "$output"
