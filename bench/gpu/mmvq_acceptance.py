"""Issue #9 acceptance 1 in one table: narrow-MMVQ TB/s against cuBLAS bf16 at the same shapes.

Usage: python3 bench/gpu/mmvq_acceptance.py KERNELS_BENCH.json CUBLAS.json [CUBLAS.json ...]

Reads the kernel bench's JSON (its 16384 x 16384 default-path rows and its per-launch fixed-cost
sizes, which include 32768 x 16384) and one JSON of bench/gpu/cublas_ref.py per row count, and
prints a markdown table per matrix shape: ncols 1..4, the MMVQ's weight TB/s (Q8_0: 34 bytes per
32 weights), cuBLAS bf16 `W @ xT` TB/s (2 bytes per weight) at the same shape, and their ratio.
Target (issue #9): >= 4.0 TB/s at 1..4 columns and >= 1.3x cuBLAS at 2 and 4, on >= 256 MiB.
Text in, text out; the device script runs it after the benches.
"""
from __future__ import annotations

import json
import sys

COLS = 16384
TARGET_TBPS = 4.0
TARGET_RATIO = 1.3


def mmvq_rates(kb: dict) -> dict[int, dict[int, float]]:
    """{rows: {ncols: TB/s}} from the default-path rows (16384) and the fixed-cost sizes."""
    out: dict[int, dict[int, float]] = {kb["matrix"]["rows"]: {r["ncols"]: r["tbps"] for r in kb["results"]
                                                               if r["kernel"] == "mmvq"}}
    for s in kb.get("fixed_cost", {}).get("sizes", []):
        if not s["what"].startswith("mmvq "):
            continue
        rows = round(s["mib"] * 2**20 * 32 / 34 / COLS)
        if rows == kb["matrix"]["rows"]:
            continue  # the default-path rows above are the headline at this shape
        out.setdefault(rows, {})[int(s["what"].split()[1])] = s["mib"] * 2**20 / (s["us"] * 1e-6) / 1e12
    return out


def render(kb: dict, cublas: list[dict]) -> str:
    rates = mmvq_rates(kb)
    lines = []
    for cb in sorted(cublas, key=lambda c: c["matrix"]["rows"]):
        rows = cb["matrix"]["rows"]
        mine = rates.get(rows)
        if mine is None:
            continue
        ref = {r["ncols"]: r["tbps"] for r in cb["results_w_at_xt"]}
        mib = rows * COLS * 34 / 32 / 2**20
        lines += [f"{rows} x {COLS}: Q8_0 {mib:.0f} MiB (cuBLAS bf16 {cb['matrix']['bytes'] / 2**20:.0f} MiB)", "",
                  "| ncols | MMVQ TB/s | cuBLAS bf16 W@xT TB/s | ratio | meets |", "| ---: | ---: | ---: | ---: | --- |"]
        for n in (1, 2, 3, 4):
            ratio = mine[n] / ref[n]
            ok = mine[n] >= TARGET_TBPS and (n not in (2, 4) or ratio >= TARGET_RATIO)
            lines.append(f"| {n} | {mine[n]:.3f} | {ref[n]:.3f} | {ratio:.2f}x | {'yes' if ok else 'no'} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    try:
        docs = []
        for path in argv:
            with open(path) as f:
                docs.append(json.load(f))
    except (OSError, json.JSONDecodeError) as e:
        print(f"gpu_mmvq_acceptance: {e}", file=sys.stderr)
        return 2
    try:
        text = render(docs[0], docs[1:])
    except (KeyError, TypeError, ValueError) as e:
        print(f"gpu_mmvq_acceptance: not a kernel bench JSON followed by cuBLAS JSONs (field {e})", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
