"""Benchmark (not a test): how often the sequential verdict is right, and how fast, on real
brackets with true effects injected (issue 22, acceptance 1-4).

Each bracket is the protocol's own sequential run (the runner's block loop and analysis, as
`dflash-qualify run` does, without writing evidence): blocks of one fresh worker process per
arm, the arms' order shuffled per block, the protocol's warm-up and measured rounds
interleaved inside, until the rule (harness/sequential.py) decides or the budget is spent.
Rows:

- `0%`: A/A, every arm the reference configuration (false qualification: acceptance 1);
- `S%`: the A/A arms with a real TEST ONLY prefill slowdown of S% on both reference arms
  (DFLASH_DS4_TEST_SLOWDOWN_PCT: the engine busy-waits S% of each measured prefill), so the
  candidate position is truly S% faster in tok/s (acceptance 2 and 3);
- `default`: the protocol as bundled (bands vs q1, ~80% on ds4-mini: acceptance 4).

Rows given together are run alternately (one bracket of each in turn), so every row sees
the same machine states. For each row it prints the rates of QUALIFIED / NOT QUALIFIED /
INCONCLUSIVE with 95% Clopper-Pearson intervals and the median time (and blocks) to a
verdict. `--simulate MODEL` replaces the real blocks by harness/noise_model.py blocks
(instant; the model names are noise_model.MODELS), to check the bench and the rule.

    python bench/harness/verdict_power.py [--protocol exact-bands-quick] [--rows 0,5.5]
        [--brackets 20] [--max-blocks N] [--max-seconds S] [--time-limit S] [--json OUT.json]
        [--simulate shared-vm]
    python bench/harness/verdict_power.py --merge A.json B.json   # one table from several runs

Nothing is written to evidence/; --json saves every bracket's blocks and looks, rewritten
after every bracket (an interrupted run keeps what it measured). Two runs side by side on a
2-CPU host: `taskset -c 0 python ...` and `taskset -c 1 python ...` ([target] pin_cpu = "auto"
resolves to the highest CPU the bench process may use, so each run's workers stay on its CPU).
Results: docs/verdicts.md (with the exact commands, counts and machine).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from dataclasses import asdict, dataclass

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.harness.memory_writer import MemoryWriter  # noqa: E402
from dflash_qualify.engine.options import ENV_TEST_SLOWDOWN  # noqa: E402
from dflash_qualify.harness import analysis, noise_model, sequential
from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness.runner import Runner


@dataclass(frozen=True)
class Bracket:
    """One bracket's outcome."""

    row: str
    decision: str
    reason: str
    blocks: int
    seconds: float
    identical: bool
    gain_pct: float | None
    lo_pct: float | None
    hi_pct: float | None
    r: tuple[float, ...]


def aa_protocol(resolved: dict) -> dict:
    """Every arm the reference configuration (the candidate runs the reference's env/args)."""
    out = copy.deepcopy(resolved)
    ref = next(a for a in out["arms"] if a["role"] == "reference")
    for arm in out["arms"]:
        if arm["role"] == "candidate":
            arm["env"], arm["engine"] = dict(ref["env"]), dict(ref["engine"])
            arm["label"] = "A/A candidate (reference configuration)"
    return out


def effect_protocol(aa: dict, slowdown_pct: float) -> dict:
    """The A/A protocol with a TEST ONLY slowdown on every reference arm."""
    out = copy.deepcopy(aa)
    for arm in out["arms"]:
        if arm["role"] == "reference":
            arm["env"] = {**arm["env"], ENV_TEST_SLOWDOWN: f"{slowdown_pct:g}"}
            arm["label"] += f" + TEST ONLY {slowdown_pct:g}% prefill slowdown"
    return out


def run_bracket(row: str, protocol: dict, args, sim: tuple[np.ndarray, np.ndarray] | None,
                gate: dict) -> Bracket:
    """One sequential bracket: the real runner's block loop (harness.runner._run_blocks, the
    code `dflash-qualify run` uses) and analysis.compute's verdict; or one simulated bracket."""
    t0 = time.monotonic()
    if sim is not None:  # the whole simulated sequence at once; decide() stops at the decision
        r, d = sim
        blocks = [sequential.BlockStat(i, 1.0, math.exp(r[i]), math.exp(-d[i]), r[i], d[i])
                  for i in range(min(args.max_blocks, r.size))]
        verdict = sequential.decide(blocks, **gate_args(gate))
        last = verdict.looks[-1]
        return Bracket(row, verdict.decision, verdict.reason, len(verdict.looks),
                       round(time.monotonic() - t0, 3), True, last.gain_pct, last.lo_pct,
                       last.hi_pct, tuple(b.r for b in blocks[:len(verdict.looks)]))
    writer = MemoryWriter()
    runner = Runner(protocol, writer)
    samples = runner.run()
    stats = analysis.compute(protocol, samples, writer.responses.__getitem__)
    seq, v = stats["sequential"], stats["verdict"]
    last = seq["looks"][-1]
    reason = seq["reason"] if v["decision"] != sequential.NOT_QUALIFIED or not v["reasons"] \
        else ",".join(v["reasons"])
    return Bracket(row, v["decision"], reason, len(seq["looks"]),
                   float(runner.looks[-1]["elapsed_s"]), stats["responses"]["identical"] is True,
                   last["gain_pct"], last["lo_pct"], last["hi_pct"],
                   tuple(b["r"] for b in seq["blocks"]))


def gate_args(gate: dict) -> dict:
    """sequential.decide's keyword arguments from the bench's gate settings."""
    return {"direction": gate["direction"], "confidence": gate["confidence"],
            "min_gain_pct": gate["min_gain_pct"], "max_drift_pct": gate["max_drift_pct"]}


def table(results: list[Bracket], rows: list[str]) -> str:
    """The acceptance table: per row the three rates with 95% Clopper-Pearson intervals."""
    lines = ["| row | brackets | QUALIFIED | NOT QUALIFIED | INCONCLUSIVE | median s to verdict "
             "| median blocks | median gain at the last look |",
             "| --- | ---: | --- | --- | --- | ---: | ---: | ---: |"]
    for row in rows:
        mine = [b for b in results if b.row == row]
        if not mine:
            continue
        n = len(mine)
        cells = []
        for decision in (sequential.QUALIFIED, sequential.NOT_QUALIFIED, sequential.INCONCLUSIVE):
            k = sum(b.decision == decision for b in mine)
            lo, hi = sequential.proportion_ci(k, n, 0.95)
            cells.append(f"{k}/{n} = {100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]")
        decided = [b for b in mine if b.decision != sequential.INCONCLUSIVE]
        med_s = f"{statistics.median(b.seconds for b in decided):.1f}" if decided else "-"
        med_b = f"{statistics.median(b.blocks for b in decided):g}" if decided else "-"
        gains = [b.gain_pct for b in mine if b.gain_pct is not None]
        med_g = f"{statistics.median(gains):.2f}%" if gains else "-"
        lines.append(f"| {row} | {n} | " + " | ".join(cells) + f" | {med_s} | {med_b} | {med_g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", default="exact-bands-quick")
    ap.add_argument("--rows", default="0,5.5", help="comma list of injected gains %% and/or 'default'")
    ap.add_argument("--brackets", type=int, default=20, help="brackets per row")
    ap.add_argument("--max-blocks", type=int, default=None,
                    help="budget in blocks (default: the protocol's max_rounds / measured)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="time budget (default: the protocol's max_seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=None,
                    help="start no new round of brackets after this many seconds (rows stay alternated)")
    ap.add_argument("--simulate", default=None, choices=sorted(noise_model.MODELS))
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="print one table from the brackets of these --json files and exit")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge)

    loaded = protocol_mod.load(args.protocol)
    resolved = copy.deepcopy(loaded.resolved)
    if not resolved.get("sequential"):
        ap.error(f"protocol {resolved['name']} is not sequential ([measure] sequential = true)")
    per_block = max(a["measured"] for a in resolved["arms"])
    if args.max_blocks is not None:
        resolved["sequential"]["max_rounds"] = args.max_blocks * per_block
    if args.max_seconds is not None:
        resolved["sequential"]["max_seconds"] = args.max_seconds
    args.max_blocks = resolved["sequential"]["max_rounds"] // per_block
    args.rounds = per_block
    g = resolved["gate"]
    gate = {"direction": resolved["direction"], "confidence": g["confidence"],
            "min_gain_pct": g["min_gain_pct"], "max_drift_pct": g["max_drift_pct"]}
    rows = [x.strip() for x in args.rows.split(",") if x.strip()]
    aa = aa_protocol(resolved)
    protocols = {row: (resolved if row == "default" else
                       aa if float(row) == 0 else effect_protocol(aa, float(row))) for row in rows}
    results: list[Bracket] = []
    t0 = time.monotonic()
    print(f"protocol {resolved['name']} ({resolved['target'].get('model')}), rows {rows}, "
          f"{args.brackets} brackets each, budget {args.max_blocks} blocks / "
          f"{resolved['sequential']['max_seconds']:g} s, {args.rounds} measured rounds per block, "
          f"gate {gate}"
          + (f", SIMULATED ({args.simulate})" if args.simulate else ""), flush=True)
    for k in range(args.brackets):
        if args.time_limit is not None and time.monotonic() - t0 >= args.time_limit:
            print(f"time limit {args.time_limit:g} s reached after {k} brackets per row", flush=True)
            break
        for j, row in enumerate(rows):
            sim = None
            if args.simulate:
                gain = 80.0 if row == "default" else float(row)
                sim_r, sim_d = noise_model.simulate_blocks(
                    noise_model.MODELS[args.simulate], sims=1, blocks=args.max_blocks,
                    rounds=args.rounds, gain_pct=gain, seed=args.seed * 1_000_003 + k * 101 + j)
                sim = (sim_r[0], sim_d[0])
            b = run_bracket(row, protocols[row], args, sim, gate)
            results.append(b)
            print(f"[{time.monotonic() - t0:7.0f}s] bracket {k + 1}/{args.brackets} row {row}: "
                  f"{b.decision} ({b.reason}) after {b.blocks} blocks, {b.seconds:.1f} s, gain "
                  f"{b.gain_pct:.2f}% [{_fmt(b.lo_pct)}, {_fmt(b.hi_pct)}]", flush=True)
            if args.json_out:
                save(args.json_out, {"argv": sys.argv, "gate": gate, "rows": rows,
                                     "protocol": resolved["name"],
                                     "budget": {"max_blocks": args.max_blocks,
                                                "max_seconds": resolved["sequential"]["max_seconds"]},
                                     "brackets": [asdict(b) for b in results]})
    print()
    print(table(results, rows))
    print(f"\ntotal {time.monotonic() - t0:.0f} s")
    return 0


def save(path: str, doc: dict) -> None:
    """Write the results so far; a crash or a kill leaves the previous complete file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def merge(paths: list[str]) -> int:
    """One table per protocol from several --json files (e.g. two runs side by side)."""
    by_protocol: dict[str, tuple[list[str], list[Bracket]]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        name = doc.get("protocol", "?")
        if doc.get("budget"):  # brackets under different budgets are different experiments
            name += f" (budget {doc['budget']['max_blocks']} blocks / {doc['budget']['max_seconds']:g} s)"
        rows, results = by_protocol.setdefault(name, ([], []))
        rows.extend(r for r in doc["rows"] if r not in rows)
        results.extend(Bracket(**{**b, "r": tuple(b["r"])}) for b in doc["brackets"])
    for name, (rows, results) in by_protocol.items():
        print(f"protocol {name}: {len(results)} brackets from {len(paths)} file(s)")
        print(table(results, rows))
        print()
    return 0


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}%"


if __name__ == "__main__":
    sys.exit(main())
