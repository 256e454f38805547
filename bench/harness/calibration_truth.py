"""Benchmark (not a test): the gate's true A/A false-qualification rate on synthetic noise with
known structure, against what calibrate's simulation estimates from 20 of those brackets.

Synthetic brackets (exact-bands-quick's gate and N; values in tok/s, 7000 x noise):
- within-request noise: lognormal, sd `sd` (log scale);
- machine speed states: a two-state Markov chain over request slots (fast state x`fast`, 30%
  of the time), switching with probability `switch` per slot: a shared host's "neighbour
  busy / idle" states, which last for stretches as long as an arm;
- process offsets: each worker process (ABA: each block; interleaved: each arm) carries a
  lognormal offset of sd `proc` (memory layout, CPU placement).

ABA runs the arms one after another (one warm-up slot each); interleaved runs rounds of
A, cand, B. "true" is the share of BRACKETS fresh A/A brackets the real gate
(calibration._qualifies, i.e. analysis.verdict) qualifies; "sim" is calibration.simulate on
the first 20 of them (what `calibrate --repeats 20` would report); power likewise with the
candidate multiplied by 1.05 / 1.10.

    python bench/harness/calibration_truth.py [--brackets 2000] [--n 5 10]

Results (2026-11-29, issue 8; `--brackets 2000 --n 5 10`, seeds fixed, so reproducible):

| noise | schedule | N | true false % | sim false % | true power 5% / 10% |
| --- | --- | --- | --- | --- | --- |
| sd 2%, no states, no offsets | ABA | 5 / 10 | 0.65 / 0.50 | 1.2 / 0.4 | 82 / 100, 96 / 100 |
| same | interleaved | 5 / 10 | 0.65 / 0.25 | 1.5 / 1.7 | 81 / 100, 98 / 100 |
| sd 2%, states (switch 0.05, x1.45) | ABA | 5 / 10 | 1.05 / 1.95 | 2.7 / 2.7 | 63 / 78, 64 / 68 |
| same | interleaved | 5 / 10 | 0.50 / 0.10 | 0.5 / 1.7 | 67 / 81, 71 / 76 |
| same + process offsets sd 0.5% | ABA | 5 / 10 | 1.90 / 2.25 | 2.0 / 2.8 | 60 / 78, 60 / 68 |
| same | interleaved | 5 / 10 | 0.95 / 0.85 | 0.6 / 1.0 | 61 / 80, 70 / 76 |

Read: speed states make ABA qualify A/A noise more often the more requests it measures (the
per-request CI narrows, the block shift does not); interleaving keeps it under 1%. The
simulation over-states the rate on iid noise (it keeps each repeat's realized arm offsets,
sampling noise included, and adds fresh sampling noise) and is close when blocks dominate
(20 repeats: its own sampling error is about +-0.5 points here).
"""
from __future__ import annotations

import argparse
import copy

import numpy as np

from dflash_qualify.harness import analysis, protocol as protocol_mod
from dflash_qualify.harness.kinds.calibration import analysis as calibration

ARMS = ("A", "cand", "B")


def views() -> dict[str, dict]:
    """The A/A analysis view of exact-bands-quick, per schedule kind."""
    aa = calibration.aa_protocol(protocol_mod.load("exact-bands-quick").resolved,
                                 {"repeats": 1})
    plain = {k: v for k, v in aa.items() if k != "calibration"}
    out = {}
    for kind in ("ABA", "interleaved"):
        p = copy.deepcopy(plain)
        p["schedule_plan"] = {"kind": kind, "seed": None, "rounds": 1}
        out[kind] = analysis.check_protocol(p)
    return out


def states(rng: np.random.Generator, slots: int, switch: float, fast: float) -> np.ndarray:
    """Machine speed factor per request slot: two-state Markov chain (fast 30% of the time)."""
    s, out = rng.random() < 0.3, np.empty(slots)
    for t in range(slots):
        if rng.random() < switch:
            s = rng.random() < 0.3
        out[t] = fast if s else 1.0
    return out


def bracket(rng: np.random.Generator, kind: str, n: int, sd: float, switch: float, fast: float,
            proc: float) -> list[dict]:
    """One synthetic A/A bracket's measured records."""
    st, recs = states(rng, 3 * (n + 1), switch, fast), []

    def add(arm: str, block: int, j: int, factor: float) -> None:
        recs.append({"seq": len(recs), "arm": arm, "phase": "measured", "group": None,
                     "block": block, "index": j, "ok": True,
                     "value": float(7000.0 * factor * np.exp(sd * rng.normal()))})
    if kind == "ABA":
        t = 0
        for b, arm in enumerate(ARMS):
            off, t = np.exp(proc * rng.normal()), t + 1  # one warm-up slot
            for j in range(n):
                add(arm, b, j, st[t] * off)
                t += 1
    else:
        offs, t = {a: np.exp(proc * rng.normal()) for a in ARMS}, 3
        for j in range(n):
            for arm in ARMS:
                add(arm, j, j, st[t] * offs[arm])
                t += 1
    return recs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brackets", type=int, default=2000)
    ap.add_argument("--n", type=int, nargs="+", default=[5, 10])
    args = ap.parse_args(argv)
    vs = views()
    scenarios = [(0.02, 0.0, 1.0, 0.0), (0.02, 0.05, 1.45, 0.0), (0.02, 0.05, 1.45, 0.005)]
    print("| noise | schedule | N | true false % | sim false % | true power 5% / 10% |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sd, switch, fast, proc in scenarios:
        for kind, view in vs.items():
            for n in args.n:
                rng = np.random.default_rng(7)
                real = [bracket(rng, kind, n, sd, switch, fast, proc) for _ in range(args.brackets)]
                true = sum(calibration._qualifies(view, r) for r in real) / len(real) * 100
                cells = [calibration._Cells(r, kind == "interleaved") for r in real[:20]]
                sim = calibration.simulate(view, cells, [0.0], simulations=1000, seed=0)[0] / 10
                power = []
                for e in (5.0, 10.0):
                    hits = 0
                    for r in real[:500]:
                        eff = [{**x, "value": x["value"] * (1 + e / 100)} if x["arm"] == "cand"
                               else x for x in r]
                        hits += calibration._qualifies(view, eff)
                    power.append(hits / 5)
                print(f"| sd {sd:g}, switch {switch:g} x{fast:g}, offsets sd {proc:g} | {kind} | {n} "
                      f"| {true:.2f} | {sim:.1f} | {power[0]:.0f} / {power[1]:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
