"""Calibration statistics: the noise floor of A/A brackets, and the gate's false-qualification
rate and power estimated by resampling that noise (stats.json of `calibrate` evidence).

Calibration evidence holds K A/A brackets: every arm runs the protocol's reference
configuration, so any gain or drift it shows is noise. From them:

1. Noise floor: each repeat's spurious gain and drift (the protocol's own statistics), and
   how many A/A repeats the real gate qualified (observed false qualifications).
2. Simulation (two-stage hierarchical bootstrap; Davison & Hinkley 1997, "Bootstrap Methods
   and their Application", section 3.8, resampling clustered data; Efron & Tibshirani 1993):
   stage 1 draws one A/A repeat uniformly with replacement (keeping that bracket's real
   between-block levels, i.e. its drift); stage 2 redraws, with replacement, the measured
   values inside each of its blocks (sequential schedules) or its rounds (interleaved),
   n per block scaled to the simulated N. The candidate's values are multiplied by
   (1 + e/100) (higher is better) or (1 - e/100) (lower is better): a true effect of e %.
   Each simulated bracket goes through the protocol's exact comparison and verdict code
   (`analysis.comparison` + `analysis.verdict`, same gate, bootstrap and seed), with
   identical responses and no failed requests assumed. The qualified fraction at e = 0 is
   the false-qualification rate; at e > 0 it is the power. The same draws serve every
   effect size (common random numbers), so the power curve is not noisier than it must be.
3. Recommendation: the smallest N on a grid whose simulated power at the chosen effect
   reaches the chosen power.

Deterministic for a given protocol, samples and numpy/scipy (seeded PCG64), so `verify`
recomputes it exactly. Pure: dicts in, dicts out; no IO.
"""
from __future__ import annotations

import datetime as _dt
import math
from typing import Any, Callable, Mapping

import numpy as np

from ... import analysis, identity, sequential, stats
from ... import bracket_order
from ...environment import redact_env
from ...errors import UsageError
from ...protocol_model import Protocol, thaw
from .model import DEFAULTS, CalibrationProtocol, CalibrationSettings

KIND = "calibration"

METHODS = {
    "noise_floor": "each A/A repeat analysed exactly like a run (stats v2): spurious gain "
                   "(candidate-position arm vs pooled references) and drift; quantiles numpy 'linear'",
    "simulation": "two-stage hierarchical bootstrap (Davison & Hinkley 1997, sec. 3.8): draw an A/A "
                  "repeat, then redraw values within each block (sequential schedules) or whole "
                  "rounds (interleaved) with replacement; multiply the candidate by (1 + e/100) "
                  "(higher is better) or (1 - e/100) (lower is better); decide with the protocol's "
                  "own comparison and verdict; common random numbers across effects",
    "false_qualification_rate": "share of simulated A/A brackets (e = 0) the gate qualifies",
    "power": "share of simulated brackets with a true effect e the gate qualifies",
    "recommended_n": "smallest N on n_grid whose simulated power at target_effect_pct reaches "
                     "target_power, found by bisection over the grid (power assumed not to fall "
                     "as N grows); N = measured requests per arm, warm-ups unchanged",
}


def _bad(field: str, expected: str, got: object) -> UsageError:
    return UsageError("invalid value", file="protocol.json", field=field, expected=expected, got=got)


def check_settings(protocol: dict) -> dict:
    """The protocol's `calibration` table, validated (UsageError naming the field)."""
    return CalibrationSettings.from_json(protocol).to_json()


def is_calibration(protocol: object) -> bool:
    """Whether a protocol.json is that of `calibrate` evidence."""
    return isinstance(protocol, dict) and "calibration" in protocol


def _repeat_of(s: dict, repeats: int, i: int) -> int:
    r = s.get("repeat")
    if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < repeats:
        raise UsageError("invalid value", file="samples.jsonl", field=f"record {i + 1}: repeat",
                         expected=f"an integer 0..{repeats - 1}", got=r)
    return r


def _quantiles(values: list[float]) -> dict:
    """median, 95th percentile and maximum of |values| (None when there are none)."""
    if not values:
        return {"n": 0, "median_abs": None, "p95_abs": None, "max_abs": None}
    a = np.abs(np.asarray(values, dtype=np.float64))
    return {"n": int(a.size), "median_abs": float(np.median(a)),
            "p95_abs": float(np.quantile(a, 0.95)), "max_abs": float(a.max())}


# --------------------------------------------------------------------------- simulation

class _Cells:
    """One A/A repeat's measured values as resampling cells: blocks (sequential) or rounds."""

    def __init__(self, records: list[dict], interleaved: bool) -> None:
        self.interleaved = interleaved
        if interleaved:  # a cell is a round: every arm's value in that round, kept together
            rounds: dict[Any, list[dict]] = {}
            for s in records:
                rounds.setdefault(s.get("block"), []).append(s)
            self.rounds = list(rounds.values())
        else:  # a cell is one block (one worker visit) of one arm
            blocks: dict[tuple, list[dict]] = {}
            for s in records:
                key = (s.get("block"), s["arm"]) if s.get("block") is not None else (s["arm"],)
                blocks.setdefault(key, []).append(s)
            self.blocks = [(cell[0].get("block"), cell[0]["arm"],
                            np.asarray([float(x["value"]) for x in cell])) for cell in blocks.values()]

    def draw(self, rng: np.random.Generator, scale: float) -> list[tuple]:
        """Random index draws for one simulated bracket at N = scale x the measured N."""
        if self.interleaved:
            n = max(1, int(round(len(self.rounds) * scale)))
            return [("rounds", rng.integers(0, len(self.rounds), size=n))]
        return [(b, a, v, rng.integers(0, v.size, size=max(1, int(round(v.size * scale)))))
                for b, a, v in self.blocks]

    def records(self, draws: list[tuple], candidate: str, factor: float) -> list[dict]:
        out: list[dict] = []
        if self.interleaved:
            for k, r in enumerate(draws[0][1]):
                for s in self.rounds[int(r)]:
                    v = float(s["value"]) * (factor if s["arm"] == candidate else 1.0)
                    out.append({"seq": len(out), "arm": s["arm"], "phase": "measured", "group": None,
                                "block": k, "index": k, "value": v, "ok": True})
            return out
        for block, arm, values, idx in draws:
            f = factor if arm == candidate else 1.0
            for j in idx:
                out.append({"seq": len(out), "arm": arm, "phase": "measured", "group": None,
                            "block": block, "index": len(out), "value": float(values[j]) * f,
                            "ok": True})
        return out


def _qualifies(view: Protocol, records: list[dict]) -> bool:
    """The protocol's verdict on simulated measured values (responses identical, no failures).

    Same numbers as a run (analysis's reference units, stats.gain_pct / drift_pct /
    bootstrap_gain_ci with the gate's settings) and the same `analysis.verdict`; the
    bootstrap is skipped when the gain or drift conditions already fail, because every
    condition must pass (the answer is the same, only cheaper). tests/test_calibration.py
    checks it against the full `analysis.comparison` path.
    """
    gate, direction = view.gate, view.direction
    units = [u[2] for u in analysis.reference_units(view, records, None)]
    pooled = [v for u in units for v in u]
    cand = analysis.measured_values(records, view.candidate, None)
    if not pooled or not cand:
        return False
    ref_median, cand_median = float(np.median(pooled)), float(np.median(cand))
    gain = stats.gain_pct(cand_median, ref_median, direction)
    drift = None
    if view.gates_drift:
        if len(units) < 2:
            return False
        drift = stats.drift_pct(float(np.median(units[0])), float(np.median(units[-1])), ref_median)
        if not (drift < gate.max_drift_pct and drift < gain / 2):
            return False
    if gain < gate.min_gain_pct:
        return False
    ci = stats.bootstrap_gain_ci(cand, pooled, direction, confidence=gate.confidence,
                                 resamples=gate.bootstrap_resamples, seed=gate.seed)
    comp = {"group": None, "gain_pct": gain, "gain_reason": None, "drift_pct": drift,
            "drift_reason": None,
            "ci": {"confidence": ci.confidence, "low": ci.low, "high": ci.high, "reason": ci.reason}}
    n = len(records)
    result = {"kind": view.kind, "gain_name": "gain", "comparisons": [comp],
              "responses": {"identical": True, "hashed": n, "mismatches": 0, "first_mismatch": None},
              "requests": {"total": n, "failed": 0, "cache_recorded": 0, "cache_hit_requests": 0}}
    return bool(analysis.verdict(result, gate.to_json())["qualified"])


def _qualifies_full(view: Protocol, records: list[dict]) -> bool:
    """The same decision through the full analysis.comparison (the reference for tests)."""
    comp = analysis.comparison(view, records, None)
    n = len(records)
    result = {"kind": view.kind, "gain_name": "gain", "comparisons": [comp],
              "responses": {"identical": True, "hashed": n, "mismatches": 0, "first_mismatch": None},
              "requests": {"total": n, "failed": 0, "cache_recorded": 0, "cache_hit_requests": 0}}
    return bool(analysis.verdict(result, view.gate.to_json())["qualified"])


def _factor(effect_pct: float, direction: str) -> float:
    return 1.0 + effect_pct / 100.0 if direction == stats.HIGHER else 1.0 - effect_pct / 100.0


def simulate(view: Protocol, cells: list[_Cells], effects_pct: list[float], *, simulations: int,
             seed: int, scale: float = 1.0) -> list[int]:
    """How many of `simulations` resampled brackets the gate qualifies, per effect size.

    Args:
        view: the typed A/A protocol (its gate, direction, candidate).
        cells: one _Cells per A/A repeat.
        effects_pct: true candidate effects in percent (0 = A/A: false qualifications).
        simulations: resampled brackets per effect (the same draws for every effect).
        seed: PCG64 seed; scale: simulated N / measured N.
    Returns:
        Qualified counts, one per effect.
    """
    rng = np.random.default_rng(seed)
    counts = [0] * len(effects_pct)
    for _ in range(simulations):
        repeat = cells[int(rng.integers(0, len(cells)))]
        draws = repeat.draw(rng, scale)
        for k, e in enumerate(effects_pct):
            counts[k] += _qualifies(view, repeat.records(draws, view.candidate,
                                                          _factor(e, view.direction)))
    return counts


# --------------------------------------------------------------------------- stats.json

def compute(protocol: CalibrationProtocol | dict, samples: list[dict], response_bytes: Callable[[str], bytes], *,
            version: int = analysis.STATS_VERSION) -> dict:
    """stats.json of calibrate evidence (see the module docstring for every method).

    Args:
        protocol: the A/A protocol.json (a bracket whose arms all run the reference
            configuration) with its `calibration` table.
        samples: samples.jsonl records of every repeat, each with `repeat`.
        response_bytes: sha256 -> stored response bytes.
        version: stats version (2 or later: calibration needs block-aware statistics).
    Returns:
        A JSON-ready dict with kind "calibration", the noise floor, observed and simulated
        false-qualification rates, the power table, the recommended N and a verdict.
    """
    if version < 2:
        raise _bad("version", "2 or later for calibration evidence", version)
    typed = (protocol if isinstance(protocol, CalibrationProtocol)
             else CalibrationProtocol.from_json(protocol))
    settings, view = typed.settings, typed.bracket
    if view.compares_groups:
        raise _bad("kind", "'bracket' (calibration runs A/A brackets)", view.kind)
    analysis.check_samples(samples, view)
    repeats = settings.repeats
    by_repeat: list[list[dict]] = [[] for _ in range(repeats)]
    for i, s in enumerate(samples):
        by_repeat[_repeat_of(s, repeats, i)].append(s)

    rows, gains, drifts, cells = [], [], [], []
    interleaved = view.schedule_plan.kind == "interleaved"
    for r, sub in enumerate(by_repeat):
        if not sub:
            raise _bad("calibration.repeats", f"samples for every repeat (none for repeat {r})", repeats)
        res = analysis.compute(view, sub, response_bytes, version=version)
        comp = res["comparisons"][0]
        rows.append({"repeat": r, "gain_pct": comp["gain_pct"], "drift_pct": comp["drift_pct"],
                     "ci_low": comp["ci"]["low"], "ci_high": comp["ci"]["high"],
                     "reference_median": comp["pooled_reference"]["median"],
                     "candidate_median": comp["candidate"]["median"],
                     "qualified": res["verdict"]["qualified"], "reasons": res["verdict"]["reasons"]})
        if comp["gain_pct"] is not None:
            gains.append(comp["gain_pct"])
        if comp["drift_pct"] is not None:
            drifts.append(comp["drift_pct"])
        measured = [s for s in sorted(sub, key=lambda s: s.get("seq", 0))
                    if s["phase"] == "measured" and s.get("ok", True)]
        cells.append(_Cells(measured, interleaved))

    sims = settings.simulations
    effects = [0.0, *settings.effects_pct]
    counts = simulate(view, cells, effects, simulations=sims, seed=settings.seed)
    false_rate = counts[0] / sims * 100.0
    power = [{"effect_pct": e, "qualified": c, "simulations": sims, "power": c / sims}
             for e, c in zip(effects[1:], counts[1:])]
    n_measured = min(a.measured for a in view.arms)
    recommendation = _recommend(view, cells, settings, n_measured)
    observed = sum(1 for row in rows if row["qualified"])
    out = {
        "schema": analysis.STATS_SCHEMA, "version": version, "kind": KIND,
        "metric": view.metric, "unit": analysis.unit_of(view.metric),
        "direction": view.direction,
        "gain_name": "gain" if view.direction == stats.HIGHER else "lower time",
        "decimals": view.decimals, "methods": {**analysis.METHODS_V2, **METHODS},
        "settings": settings.to_json(), "schedule": view.schedule_plan.kind,
        "measured_per_arm": n_measured,
        "repeats": rows,
        "noise_floor": {"gain_pct": _quantiles(gains), "drift_pct": _quantiles(drifts)},
        "false_qualification": {
            "observed": {"qualified": observed, "repeats": repeats,
                         "rate_pct": observed / repeats * 100.0},
            "simulated": {"qualified": counts[0], "simulations": sims, "rate_pct": false_rate}},
        "power": power,
        "recommendation": recommendation,
        "responses": identity.check(samples, set(view.references), response_bytes),
        "requests": analysis.requests_json(samples),
        "gate": view.gate.to_json(),
    }
    budget = typed.table.get("sequential")
    if budget is not None:  # the source protocol is sequential: each repeat was one block
        out["sequential"] = _sequential_rates(view, budget, by_repeat, settings)
    out["verdict"] = verdict(out)
    return out


SEQUENTIAL_GAINS_PCT = (0.0, 2.0, 5.5, 10.0)


def _sequential_rates(view: Protocol, budget: Mapping[str, Any], by_repeat: list[list[dict]],
                      settings: CalibrationSettings) -> dict:
    """A sequential protocol's calibration: every A/A repeat is one block; the rule's
    false-qualification, false-refusal and inconclusive rates and the time to a verdict at
    0, 2, 5.5 and 10% (sequential.bootstrap_rates over those blocks, within the budget)."""
    a, b = view.references[0], view.references[-1]
    cand = view.candidate
    blocks, spans = [], []
    for sub in by_repeat:
        measured = [s for s in sub if s["phase"] == "measured" and s.get("ok", True)]
        values = {arm: [float(s["value"]) for s in measured if s["arm"] == arm] for arm in (a, cand, b)}
        blocks.append(sequential.block_stat(len(blocks), values[a], values[cand], values[b],
                                            view.direction))
        stamps = sorted(s["t_start_utc"] for s in sub if isinstance(s.get("t_start_utc"), str))
        if len(stamps) > 1:
            spans.append((_dt.datetime.fromisoformat(stamps[-1].replace("Z", "+00:00"))
                          - _dt.datetime.fromisoformat(stamps[0].replace("Z", "+00:00"))).total_seconds())
    per_block = max(arm.measured or 0 for arm in view.arms)
    # a block's wall time: its requests' span (starts excluded, so a lower bound)
    spb = float(np.median(spans)) if spans else None
    max_blocks = budget["max_rounds"] // per_block
    if spb:
        max_blocks = max(1, min(max_blocks, math.ceil(budget["max_seconds"] / spb)))
    gate = view.gate
    rates = sequential.bootstrap_rates(
        [x.r for x in blocks], [x.drift for x in blocks], SEQUENTIAL_GAINS_PCT,
        direction=view.direction, confidence=gate.confidence,
        min_gain_pct=gate.min_gain_pct, max_drift_pct=gate.max_drift_pct,
        max_blocks=max_blocks, seconds_per_block=spb, simulations=settings.simulations,
        seed=settings.seed)
    g = gate.min_gain_pct
    return {"method": "A/A blocks resampled with replacement into sequential brackets, true gain "
                      "added to every block (sequential.bootstrap_rates), decided by the "
                      "protocol's own rule at every look within its budget",
            "blocks": len(blocks), "seconds_per_block": spb, "max_blocks": max_blocks,
            "budget": thaw(budget),
            "rates": [{"gain_pct": x.gain_pct, "simulations": x.simulations,
                       "qualified": x.qualified, "not_qualified": x.not_qualified,
                       "inconclusive": x.inconclusive,
                       "qualified_pct": 100.0 * x.qualified / x.simulations,
                       "not_qualified_pct": 100.0 * x.not_qualified / x.simulations,
                       "inconclusive_pct": 100.0 * x.inconclusive / x.simulations,
                       # an error where the truth is on the other side of min_gain
                       "error": ("false qualification" if x.gain_pct < g else
                                 "false refusal" if x.gain_pct > g else "at min_gain"),
                       "median_blocks": x.median_blocks, "median_seconds": x.median_seconds}
                      for x in rates]}


def _recommend(view: Protocol, cells: list[_Cells], settings: CalibrationSettings, n_measured: int) -> dict:
    """Smallest N on the grid reaching the target power at the target effect, by bisection
    over the grid (assumes power does not fall as N grows; every N tried is listed)."""
    effect, target, sims = settings.target_effect_pct, settings.target_power, settings.simulations
    grid = settings.n_grid
    tried: dict[int, float] = {}

    def power_at(n: int) -> float:
        if n not in tried:
            count = simulate(view, cells, [effect], simulations=sims, seed=settings.seed,
                             scale=n / n_measured)[0]
            tried[n] = count / sims
        return tried[n]

    lo, hi = 0, len(grid) - 1
    if power_at(grid[hi]) < target:
        return {"effect_pct": effect, "power": target, "n": None, "achieved_power": None,
                "tried": [{"n": n, "power": p} for n, p in sorted(tried.items())],
                "reason": f"no N up to {grid[-1]} reaches power {target:g} for a {effect:g}% "
                          f"effect on this machine's noise"}
    while lo < hi:  # invariant: grid[hi] reaches the target
        mid = (lo + hi) // 2
        if power_at(grid[mid]) >= target:
            hi = mid
        else:
            lo = mid + 1
    return {"effect_pct": effect, "power": target, "n": grid[hi], "achieved_power": tried[grid[hi]],
            "tried": [{"n": n, "power": p} for n, p in sorted(tried.items())], "reason": None}


def verdict(result: dict) -> dict:
    """Is the gate sound on this machine? Conditions (reason when failed):
    `responses_identical` (`responses_differ`, `responses_unhashed`; A/A arms must agree),
    `requests_ok` (`failed_requests`), `false_qualification_rate` (`false_alarm_rate_high`:
    the simulated rate must not exceed settings.max_false_rate_pct)."""
    conds = []
    resp, req = result["responses"], result["requests"]
    if result["gate"]["require_identical"]:
        ok = resp["identical"] is True
        reason = "responses_unhashed" if resp["identical"] is None else "responses_differ"
        conds.append(analysis.condition("responses_identical", None, ok, reason,
                                    f"{resp['hashed']} hashed responses, {resp['mismatches']} differ"))
    conds.append(analysis.condition("requests_ok", None, req["failed"] == 0, "failed_requests",
                                f"{req['failed']} of {req['total']} requests failed"))
    sim = result["false_qualification"]["simulated"]
    limit = result["settings"]["max_false_rate_pct"]
    if result.get("sequential"):  # the protocol's gate is its sequential rule: judge that
        aa = result["sequential"]["rates"][0]
        sim = {"rate_pct": aa["qualified_pct"], "simulations": aa["simulations"],
               "qualified": aa["qualified"]}
    ok = sim["rate_pct"] <= limit
    conds.append(analysis.condition("false_qualification_rate", None, ok, "false_alarm_rate_high",
                                f"simulated false-qualification rate {sim['rate_pct']:.2f}% "
                                f"({sim['qualified']}/{sim['simulations']}) "
                                f"{'is within' if ok else 'exceeds'} {limit:g}%"))
    failed = [c for c in conds if not c["passed"]]
    return {"qualified": not failed, "thresholds": {"max_false_rate_pct": limit},
            "conditions": conds, "reasons": list(dict.fromkeys(c["reason"] for c in failed))}


def aa_protocol(resolved: dict, settings: dict) -> dict:
    """The A/A version of a bracket protocol: every arm runs the first reference arm's
    configuration (env, engine args, program), ids/roles/counts/schedule unchanged; the
    `calibration` table carries the settings and the original arms."""
    if Protocol.from_json(resolved).compares_groups:
        raise UsageError("calibrate runs A/A brackets: it takes a bracket protocol, not "
                         f"a {resolved['kind']} protocol", field="kind")
    ref = next(a for a in resolved["arms"] if a["role"] == "reference")
    arms = []
    for arm in resolved["arms"]:
        new = {**arm, "label": f"{arm['label']} (A/A: runs {ref['id']}'s configuration)"}
        for key in ("env", "engine", "command", "url", "ref"):   # ref: [build] (builds.py)
            if key in ref:
                new[key] = ref[key]
            else:
                new.pop(key, None)
        arms.append(new)
    seq = resolved.get("sequential")
    out = {**{k: v for k, v in resolved.items() if k != "sequential"}, "arms": arms,
           "name": f"{resolved['name']}-calibration",
           "description": f"A/A calibration of {resolved['name']}: every arm runs reference arm "
                          f"{ref['id']}'s configuration"}
    out["calibration"] = {**DEFAULTS, **settings, "reference_arm": ref["id"],
                          "source_protocol": resolved["name"],
                          "source_arms": [{**a, "env": redact_env(a.get("env", {}))}
                                          for a in resolved["arms"]]}
    if seq is not None:  # each A/A repeat is one block of the sequential protocol
        out["calibration"]["sequential"] = dict(seq)
    problem = bracket_order.check(out)
    if problem:
        raise UsageError(problem, field="schedule")
    return out
