"""Derive stats.json (statistics, response identity, verdict) from a protocol and its raw samples.

The runner writes stats.json through `compute`; `verify` recomputes through the same
function and compares exactly, and `gate` re-decides through `verdict` with overridden
thresholds. The output is JSON-ready and deterministic (seeded bootstrap, sorted keys).
"""
from __future__ import annotations

import csv
import io
import math
import re
from typing import Callable

from . import bracket_order, builds, identity, sequential, stats, token_diff
from .errors import UsageError
from .protocol_model import Gate, Protocol, thaw, traits_of

STATS_SCHEMA = "dflash-qualify.stats"
# Version history:
#   1: first version (bracket and compare kinds, verdict with named reasons).
#   2: schedules: samples may carry `block`; bracket drift compares the first and last
#      reference block of a sequential schedule (ABA: arms A and B, as in 1); comparisons add
#      `schedule`, `drift_blocks`, `blocks` (per-block medians and drift) and `paired_test`
#      (Wilcoxon signed-rank). `verify` recomputes a version-1 file the version-1 way.
#   3: (this release, one version for two additions)
#      a response mismatch whose samples carry token ids names the first differing token
#      (responses.first_mismatch.first_differing_token, harness/token_diff.py); and
#      three answers. `verdict` adds `decision` (QUALIFIED | NOT QUALIFIED | INCONCLUSIVE) and
#      `design` ("fixed-N" | "sequential"). Sequential brackets (protocol `sequential`): samples'
#      `block` numbers blocks of fresh workers; a `sequential` table (blocks, every look,
#      decision, projection; harness/sequential.py) replaces the fixed-N CI/gain/drift
#      conditions by one `sequential_bound` condition. Versions 1 and 2 verify as written.
STATS_VERSION = 3
SUPPORTED_VERSIONS = (1, 2, 3)

GATE_KEYS = ("min_gain_pct", "max_drift_pct", "require_identical", "confidence",
             "bootstrap_resamples", "seed")
DEFAULT_GATE = {"min_gain_pct": 1.0, "max_drift_pct": 2.0, "require_identical": True,
                "confidence": 0.95, "bootstrap_resamples": 10000, "seed": 0}
DEFAULT_DECIMALS = 3  # protocol_model.DEFAULT_DECIMALS
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")

METHODS = {
    "median": "sample median of measured requests (warm-ups excluded)",
    "mad": "raw median absolute deviation from the median, unscaled (scipy scale=1)",
    "gain": "higher is better: (candidate median / pooled reference median - 1) x 100; "
            "lower is better ('lower time %'): (1 - candidate / reference) x 100",
    "drift": "|median of first reference arm - median of last| / pooled reference median x 100",
    "ci": "seeded percentile bootstrap of the gain, candidate and pooled reference resampled "
          "independently with replacement (Efron & Tibshirani 1993, ch. 13); numpy quantile 'linear'",
    "rank_test": "Mann-Whitney U, two-sided, candidate vs pooled reference (scipy.stats.mannwhitneyu)",
    "min_gain": "the point estimate of the gain must reach min_gain_pct; the CI must lie above zero",
}
METHODS_V2 = {
    **METHODS,
    "drift": "|median of the first reference block - median of the last| / pooled reference "
             "median x 100 (sequential schedules: a block is one worker visit, so ABA compares "
             "arms A and B; interleaved: the first and last reference arm)",
    "block_drift": "per block and arm: (block median / pooled reference median - 1) x 100",
    "paired_test": "Wilcoxon signed-rank, two-sided, on candidate - reference pairs (Wilcoxon "
                   "1945; scipy.stats.wilcoxon, zero differences dropped): compare protocols "
                   "pair request i of main with request i of PR in the same group; interleaved "
                   "brackets pair each round's candidate value with its reference median",
}


def _bad(field: str, expected: str, got: object, file: str = "protocol.json") -> UsageError:
    return UsageError("invalid value", file=file, field=field, expected=expected, got=got)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def unit_of(metric: str) -> str:
    """Display unit of a metric name: *_tok_s -> tok/s, *_ms -> ms, anything else none."""
    if metric.endswith("tok_s"):
        return "tok/s"
    if metric.endswith("_ms") or metric == "ms":
        return "ms"
    return ""


def check_gate(gate: object, file: str = "protocol.json", prefix: str = "gate") -> dict:
    """Validate the gate table (all keys of DEFAULT_GATE) and return it as a plain dict."""
    return Gate.from_json(gate, file, prefix).to_json()


def typed(protocol: Protocol | dict) -> Protocol:
    """The typed protocol: as given, or protocol.json checked once (Protocol.from_json)."""
    return protocol if isinstance(protocol, Protocol) else Protocol.from_json(protocol)


def check_samples(samples: object, protocol: Protocol) -> list[dict]:
    """Validate sample records against the protocol; raise UsageError naming the record."""
    if not isinstance(samples, list):
        raise _bad("(top level)", "a list of records", type(samples).__name__, "samples.jsonl")
    groups = set(protocol.analysis_groups)
    arm_ids = protocol.arm_ids
    for i, s in enumerate(samples):
        def bad(field: str, expected: str, got: object) -> UsageError:
            return _bad(f"record {i + 1}: {field}", expected, got, "samples.jsonl")
        if not isinstance(s, dict):
            raise bad("(record)", "an object", type(s).__name__)
        if s.get("arm") not in arm_ids:
            raise bad("arm", f"one of {sorted(arm_ids)}", s.get("arm"))
        if s.get("phase") not in ("warmup", "measured"):
            raise bad("phase", "'warmup' or 'measured'", s.get("phase"))
        seq = s.get("seq", i)
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise bad("seq", "an integer", seq)
        ok = s.get("ok", True)
        if not isinstance(ok, bool):
            raise bad("ok", "true or false", ok)
        value = s.get("value")
        if ok and s["phase"] == "measured" and not (_is_number(value) and value > 0):
            raise bad("value", "a finite number > 0", value)
        sha = s.get("response_sha256")
        if sha is not None and (not isinstance(sha, str) or not _SHA_RE.fullmatch(sha)):
            raise bad("response_sha256", "64 lowercase hex digits or null", sha)
        if s.get("group") not in groups:
            raise bad("group", f"one of {sorted(groups, key=str)}", s.get("group"))
        block = s.get("block")
        if block is not None and (not isinstance(block, int) or isinstance(block, bool) or block < 0):
            raise bad("block", "an integer >= 0 or null", block)
        hits = s.get("cache_hits")
        if hits is not None and (not isinstance(hits, int) or isinstance(hits, bool) or hits < 0):
            raise bad("cache_hits", "an integer >= 0 or null", hits)
    return samples


def measured_values(samples: list[dict], arm: str, group) -> list[float]:
    return [float(s["value"]) for s in sorted(samples, key=lambda s: s.get("seq", 0))
            if s["arm"] == arm and s.get("group") == group and s["phase"] == "measured"
            and s.get("ok", True)]


def _summary_json(summary: stats.Summary) -> dict:
    return {"n": summary.n, "median": summary.median, "mad": summary.mad}


def _measured_records(samples: list[dict], group) -> list[dict]:
    return [s for s in sorted(samples, key=lambda s: s.get("seq", 0))
            if s.get("group") == group and s["phase"] == "measured" and s.get("ok", True)]


def reference_units(view: Protocol, samples: list[dict], group) -> list[tuple[int | None, str, list[float]]]:
    """Reference values in drift units: (block, arm, values) per reference block of a sequential
    schedule in executed order, or per reference arm (interleaved, or samples without blocks)."""
    records = [s for s in _measured_records(samples, group) if s["arm"] in view.references]
    by_block = view.schedule_plan.kind in bracket_order.SEQUENTIAL and records \
        and all(s.get("block") is not None for s in records)
    if not by_block:
        return [(None, a, measured_values(samples, a, group)) for a in view.references]
    units: dict[int, tuple[int, str, list[float]]] = {}
    for s in records:
        units.setdefault(s["block"], (s["block"], s["arm"], []))[2].append(float(s["value"]))
    return list(units.values())  # insertion order = first seq = executed order


def _blocks_json(view: Protocol, samples: list[dict], group, pooled_median: float | None) -> list[dict]:
    """Per (block, arm): n, median and signed deviation from the pooled reference median."""
    cells: dict[tuple[int, str], list[float]] = {}
    for s in _measured_records(samples, group):
        if s.get("block") is not None:
            cells.setdefault((s["block"], s["arm"]), []).append(float(s["value"]))
    out = []
    for (block, arm), values in cells.items():
        m = stats.summarize(values).median
        delta = None if pooled_median is None or m is None else (m / pooled_median - 1.0) * 100.0
        out.append({"block": block, "arm": arm, "role": view.arm(arm).role, "n": len(values),
                    "median": m, "delta_pct": delta})
    return out


def _paired_json(view: Protocol, samples: list[dict], group) -> dict:
    """Wilcoxon signed-rank on candidate/reference pairs (compare, or interleaved brackets)."""
    records = _measured_records(samples, group)
    cand_id, refs = view.candidate, set(view.references)
    cand, ref = [], []
    if view.compares_groups:
        pairing = "request i of the reference arm with request i of the candidate (same group)"
        by_index: dict[int, dict[str, float]] = {}
        for s in records:
            by_index.setdefault(s.get("index", 0), {})[s["arm"]] = float(s["value"])
        ref_id = view.references[0]
        for i in sorted(by_index):
            if cand_id in by_index[i] and ref_id in by_index[i]:
                cand.append(by_index[i][cand_id])
                ref.append(by_index[i][ref_id])
    elif view.schedule_plan.kind == "interleaved":
        pairing = "each round's candidate value with the median of its reference values"
        rounds: dict[int, dict[str, list[float]]] = {}
        for s in records:
            if s.get("block") is not None:
                side = "cand" if s["arm"] == cand_id else "ref" if s["arm"] in refs else None
                if side:
                    rounds.setdefault(s["block"], {"cand": [], "ref": []})[side].append(float(s["value"]))
        for b in sorted(rounds):
            if rounds[b]["cand"] and rounds[b]["ref"]:
                cand.append(float(stats.summarize(rounds[b]["cand"]).median))
                ref.append(float(stats.summarize(rounds[b]["ref"]).median))
    else:
        return {"name": "wilcoxon signed-rank two-sided", "pairing": None, "n_pairs": 0,
                "statistic": None, "p_value": None,
                "reason": "not paired: sequential schedules run arms at different times"}
    t = stats.paired_test(cand, ref)
    return {"name": "wilcoxon signed-rank two-sided", "pairing": pairing, "n_pairs": t.n,
            "statistic": t.statistic, "p_value": t.p_value, "reason": t.reason}


def _comparison_json(view: Protocol, samples: list[dict], group, version: int = STATS_VERSION) -> dict:
    gate = view.gate
    if version >= 2:
        units = reference_units(view, samples, group)
        ref_arms = [u[2] for u in units]
    else:
        units = None
        ref_arms = [measured_values(samples, a, group) for a in view.references]
    cand = measured_values(samples, view.candidate, group)
    c = stats.compare(ref_arms, cand, view.direction, confidence=gate.confidence,
                      resamples=gate.bootstrap_resamples, seed=gate.seed)
    drift_reason = c.drift_reason
    if not view.gates_drift:
        drift_reason = "not applicable to compare protocols"
    out = _comparison_v1(view, c, group, drift_reason)
    if version < 2:
        return out
    bracket = view.gates_drift and len(units) > 1
    if bracket:
        out["drift_arms"] = [units[0][1], units[-1][1]]
    out["schedule"] = view.schedule_plan.kind
    out["drift_blocks"] = [units[0][0], units[-1][0]] if bracket and units[0][0] is not None else None
    out["blocks"] = _blocks_json(view, samples, group, c.reference.median)
    out["paired_test"] = _paired_json(view, samples, group)
    return out


def comparison(view: Protocol | dict, samples: list[dict], group, version: int = STATS_VERSION) -> dict:
    """One group's comparison (gain, drift, CI, rank and paired tests) from sample records;
    `calibration` decides simulated brackets through this and `verdict`, as a run does."""
    return _comparison_json(typed(view), samples, group, version)


def _comparison_v1(view: Protocol, c: stats.Comparison, group, drift_reason) -> dict:
    return {
        "group": group,
        "reference_arms": list(view.references),
        "candidate_arm": view.candidate,
        "pooled_reference": _summary_json(c.reference),
        "candidate": _summary_json(c.candidate),
        "gain_pct": c.gain_pct, "gain_reason": c.gain_reason,
        "drift_pct": c.drift_pct if view.gates_drift else None,
        "drift_reason": drift_reason,
        "drift_arms": [view.references[0], view.references[-1]]
        if view.gates_drift and len(view.references) > 1 else None,
        "ci": {"confidence": c.ci.confidence, "low": c.ci.low, "high": c.ci.high,
               "resamples": c.ci.resamples, "seed": c.ci.seed, "degenerate": c.ci.degenerate,
               "reason": c.ci.reason},
        "rank_test": {"name": "mann-whitney-u two-sided", "u": c.rank_test.u,
                      "p_value": c.rank_test.p_value, "reason": c.rank_test.reason},
    }


def requests_json(samples: list[dict]) -> dict:
    recorded = [s.get("cache_hits") for s in samples if s.get("cache_hits") is not None]
    return {"total": len(samples),
            "measured": sum(1 for s in samples if s["phase"] == "measured"),
            "warmup": sum(1 for s in samples if s["phase"] == "warmup"),
            "failed": sum(1 for s in samples if s.get("ok", True) is False),
            "cache_recorded": len(recorded),
            "cache_hit_requests": sum(1 for h in recorded if h > 0)}


def compute(protocol: Protocol | dict, samples: list[dict], response_bytes: Callable[[str], bytes], *,
            version: int = STATS_VERSION) -> dict:
    """Statistics, response identity and verdict for one run: the content of stats.json.

    Args:
        protocol: the typed protocol, or protocol.json (docs/evidence-format.md), typed here
            through Protocol.from_json (the one check of its shape).
        samples: samples.jsonl records, warm-ups included.
        response_bytes: sha256 hex -> the response's bytes (to locate a first differing byte).
        version: the stats.json version to produce (SUPPORTED_VERSIONS; verify passes the
            stored file's version so older evidence is recomputed the way it was written).
    Returns:
        A JSON-ready dict (no NaN; undefined numbers are null with a `*_reason`).
    Raises:
        UsageError naming the file and field when the protocol or a sample is malformed.
    """
    if version not in SUPPORTED_VERSIONS:
        raise _bad("version", f"one of {list(SUPPORTED_VERSIONS)}", version, "stats.json")
    view = typed(protocol)
    check_samples(samples, view)
    arms = []
    refs = list(view.references)
    for group in view.analysis_groups:
        for arm_id in [*refs[:1], view.candidate, *refs[1:]]:
            values = measured_values(samples, arm_id, group)
            s = stats.summarize(values)
            arm = view.arm(arm_id)
            arms.append({"id": arm_id, "label": arm.label, "role": arm.role, "group": group,
                         "values": list(s.values), "n": s.n, "median": s.median, "mad": s.mad,
                         "warmups": sum(1 for x in samples if x["arm"] == arm_id
                                        and x.get("group") == group and x["phase"] == "warmup")})
    out = {
        "schema": STATS_SCHEMA, "version": version,
        "kind": view.kind, "metric": view.metric, "unit": unit_of(view.metric),
        "direction": view.direction,
        "gain_name": "gain" if view.direction == stats.HIGHER else "lower time",
        "decimals": view.decimals, "methods": METHODS if version < 2 else METHODS_V2,
        "arms": arms,
        "comparisons": [_comparison_json(view, samples, g, version) for g in view.analysis_groups],
        "responses": identity.check(samples, set(view.references), response_bytes,
                                    tokens=version >= 3),
        "requests": requests_json(samples),
        "gate": view.gate.to_json(),
    }
    if view.build is not None:  # arms from git refs: their engine builds must be comparable
        arms_json = [a.to_json() for a in view.arms]
        out["builds"] = {"arms": {a["id"]: a.get("build") for a in arms_json},
                         "conflicts": builds.conflicts(arms_json)}
    if version >= 3 and view.sequential is not None:
        out["sequential"] = sequential_json(view, samples)
    out["verdict"] = verdict(out, out["gate"])
    return out


def sequential_verdict(view: Protocol, samples: list[dict]) -> sequential.SequentialVerdict:
    """The sequential rule recomputed from a sequential bracket's raw samples."""
    a, b = view.references[0], view.references[-1]
    try:
        blocks = sequential.blocks_from_records(samples, reference_a=a, candidate=view.candidate,
                                                reference_b=b, direction=view.direction)
    except ValueError as exc:
        raise _bad("samples", "every block with measured values of every arm", str(exc),
                   "samples.jsonl") from None
    gate = view.gate
    return sequential.decide(blocks, direction=view.direction, confidence=gate.confidence,
                             min_gain_pct=gate.min_gain_pct, max_drift_pct=gate.max_drift_pct)


STOPS = ("decided", "responses_differ", "max_rounds", "max_seconds")


def check_looks(protocol: Protocol | dict, samples: list[dict], looks: list[dict]) -> list[str]:
    """Where a sequential run's looks.jsonl (the looks that drove its stopping) does not follow
    from its samples: every look recomputed (sequential.check_recorded), and the stop justified
    (decided at that look; responses that differ; the round budget; the time budget).

    Returns:
        One sentence per problem (empty: the recorded stopping decision follows)."""
    view = typed(protocol)
    if view.sequential is None:
        return []
    fresh = sequential_verdict(view, samples)
    if not looks or not all(isinstance(x, dict) for x in looks):
        return ["no looks recorded for a sequential bracket"]
    last = looks[-1]
    recorded = last.get("decision")
    recorded = sequential.INCONCLUSIVE if recorded == sequential.CONTINUE else recorded
    out = [f"look {m.look if m.look is not None else '-'}: {m.field} recorded {m.recorded!r}, "
           f"recomputed from samples.jsonl {m.recomputed!r}"
           for m in sequential.check_recorded(looks, recorded, fresh)]
    stops = [x.get("stop") for x in looks]
    if any(stop is not None for stop in stops[:-1]):
        out.append("a look before the last one records a stop")
    stop, n = stops[-1], len(looks)
    per_block = max(a.measured or 0 for a in view.arms)
    budget = view.sequential
    if stop not in STOPS:
        out.append(f"the last look's stop: expected one of {list(STOPS)}, got {stop!r}")
    elif stop == "decided" and fresh.decided_at != n:
        out.append(f"stopped as decided after {n} blocks, but the rule decides "
                   f"{'at block ' + str(fresh.decided_at) if fresh.decided_at else 'at no block'}")
    elif stop == "responses_differ" and len({s.get("response_sha256") for s in samples
                                              if s.get("response_sha256")}) < 2:
        out.append("stopped for differing responses, but every response is identical")
    elif stop == "max_rounds" and (n + 1) * per_block <= budget["max_rounds"]:
        out.append(f"stopped for the round budget after {n} blocks of {per_block} rounds, but "
                   f"another block fits max_rounds = {budget['max_rounds']}")
    elif stop == "max_seconds" and not (isinstance(last.get("elapsed_s"), (int, float))
                                        and last["elapsed_s"] >= budget["max_seconds"]):
        out.append(f"stopped for the time budget at {last.get('elapsed_s')!r} s, before "
                   f"max_seconds = {budget['max_seconds']:g}")
    if stop != "decided" and fresh.decided_at is not None and fresh.decided_at < n:
        out.append(f"the rule decided at block {fresh.decided_at}, but the run went on")
    return out


def sequential_json(view: Protocol, samples: list[dict]) -> dict:
    """stats.json's `sequential` table: the rule's blocks, looks and decision, and the budget."""
    out = sequential.verdict_json(sequential_verdict(view, samples))
    out["budget"] = thaw(view.sequential)
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}%"


def condition(name: str, group, passed: bool, reason: str | None, message: str) -> dict:
    return {"name": name, "group": group, "passed": passed, "reason": None if passed else reason,
            "message": message}


def describe_mismatch(m: dict) -> str:
    """One sentence naming the first differing request and byte (from identity.check output)."""
    r, ref = m["request"], m["reference"]
    where = f"{r['arm']} {r['phase']} #{r['index']} (seq {r['seq']})"
    against = f"{ref['arm']} {ref['phase']} #{ref['index']} (seq {ref['seq']})"
    prompt = f"prompt {m['prompt_id']}" if m.get("prompt_id") else "the prompt"
    if m.get("group"):
        prompt += f" in group {m['group']}"
    text = f"request {where} for {prompt} returned {r['response_sha256']}, not the reference {against}'s {ref['response_sha256']}"
    if m.get("first_differing_token") is not None:
        text += "; " + token_diff.describe(m["first_differing_token"])
    if m.get("first_differing_byte") is not None:
        text += (f"; first differing byte at position {m['first_differing_byte']} "
                 f"(lengths {m['response_len']} vs reference {m['reference_len']})")
    elif m.get("reason"):
        text += f"; {m['reason']}"
    return text


def verdict(result: dict, gate: dict) -> dict:
    """Decide qualification from computed statistics and gate thresholds.

    Qualified only if: (a) all responses are identical (when gate.require_identical),
    no request failed and none hit a cache; per comparison (b) the gain's CI lies above
    zero, (c) the gain's point estimate reaches min_gain_pct; for brackets (d) drift is
    below max_drift_pct and (e) below half the gain. Each failed condition carries a
    named reason and a sentence.

    Args:
        result: compute()'s output (only comparisons, responses, requests are read).
        gate: thresholds (see check_gate); gate overrides them from the command line.
    Returns:
        {"qualified": bool, "thresholds": {...}, "conditions": [...], "reasons": [...]}
    """
    gate = check_gate(gate, file="gate", prefix="gate")
    conds: list[dict] = []
    resp = result["responses"]
    if gate["require_identical"]:
        if resp["identical"] is True:
            conds.append(condition("responses_identical", None, True, None,
                               f"all {resp['hashed']} hashed responses are identical per prompt"))
        elif resp["identical"] is None:
            conds.append(condition("responses_identical", None, False, "responses_unhashed",
                               "no request carried a response SHA-256, so identical output is unproven"))
        else:
            conds.append(condition("responses_identical", None, False, "responses_differ",
                               f"{resp['mismatches']} request(s) differ: "
                               + describe_mismatch(resp["first_mismatch"])))
    if result.get("builds") is not None:  # [build] (builds.conflicts)
        problems = result["builds"]["conflicts"]
        conds.append(condition("same_engine_build", None, not problems, "builds_differ",
                           "; ".join(problems) if problems else
                           "arms naming one ref run one engine build; the references run one"))
    req = result["requests"]
    conds.append(condition("requests_ok", None, req["failed"] == 0, "failed_requests",
                       f"{req['failed']} of {req['total']} requests failed"))
    if req["cache_recorded"]:
        conds.append(condition("cache_cold", None, req["cache_hit_requests"] == 0, "cache_hit",
                           f"{req['cache_hit_requests']} of {req['cache_recorded']} requests hit a cache"))
    seq = result.get("sequential")
    if seq is not None:
        conds.append(_sequential_condition(result, gate))
    else:
        for comp in result["comparisons"]:
            conds.extend(_comparison_conditions(comp, gate, traits_of(result["kind"]).gates_drift,
                                                result.get("gain_name", "gain")))
    failed = [c for c in conds if not c["passed"]]
    out = {"qualified": not failed, "thresholds": gate, "conditions": conds,
           "reasons": list(dict.fromkeys(c["reason"] for c in failed))}
    if result.get("version", 0) >= 3:
        # INCONCLUSIVE only when nothing but the budget stands in the way of an answer
        inconclusive = [c["reason"] for c in failed] == [sequential.REASON_BUDGET]
        out["decision"] = (sequential.QUALIFIED if not failed else
                           sequential.INCONCLUSIVE if inconclusive else sequential.NOT_QUALIFIED)
        out["design"] = "sequential" if seq is not None else "fixed-N"
    return out


def _sequential_condition(result: dict, gate: dict) -> dict:
    """The sequential rule's answer (recomputed under `gate`'s thresholds) as one condition."""
    seq = result["sequential"]
    if (gate["min_gain_pct"], gate["max_drift_pct"], gate["confidence"]) != (
            seq["min_gain_pct"], seq["max_drift_pct"], seq["confidence"]):
        raise UsageError("a sequential verdict is decided by its stopping rule at the thresholds "
                         "it ran with; re-run with the new gate instead of overriding it",
                         field="--min-gain/--max-drift")
    look = seq["looks"][-1] if seq["looks"] else None
    bound = ("no look" if look is None else
             f"{seq['confidence'] * 100:g}% confidence sequence after {look['n']} blocks: "
             f"[{_pct(look['lo_pct'])}, {_pct(look['hi_pct'])}]")
    g = _pct(seq["min_gain_pct"])
    if seq["decision"] == sequential.QUALIFIED:
        return condition("sequential_bound", None, True, None, f"{bound}: the lower bound clears {g}")
    if seq["reason"] == sequential.REASON_BELOW:
        msg = f"{bound}: the upper bound is below {g}"
    elif seq["reason"] == sequential.REASON_DRIFT:
        msg = (f"{bound}; the references A and B disagree beyond {_pct(seq['max_drift_pct'])}: "
               f"their drift's sequence [{_pct(look['drift_lo_pct'])}, "
               f"{_pct(look['drift_hi_pct'])}] lies outside +-{_pct(seq['max_drift_pct'])}")
    else:
        proj = seq["projection"] or {}
        likely = (f"about {proj['blocks']} blocks would likely decide it ({proj['decision']})"
                  if proj.get("blocks") else proj.get("reason") or "no projection")
        msg = f"INCONCLUSIVE: {bound} still contains {g} when the budget ran out: {likely}"
    return condition("sequential_bound", None, False, seq["reason"], msg)


def _comparison_conditions(comp: dict, gate: dict, gates_drift: bool, gain_name: str) -> list[dict]:
    g = comp["group"]
    tag = f" ({g})" if g is not None else ""
    gain, ci = comp["gain_pct"], comp["ci"]
    conds = []
    if ci["low"] is None:
        conds.append(condition("ci_excludes_zero", g, False, "ci_unavailable",
                           f"no confidence interval{tag}: {ci['reason']}"))
    else:
        span = f"{ci['confidence'] * 100:g}% CI [{_pct(ci['low'])}, {_pct(ci['high'])}]{tag}"
        if ci["low"] > 0:
            conds.append(condition("ci_excludes_zero", g, True, None, f"{span} lies above zero"))
        elif ci["high"] < 0:
            conds.append(condition("ci_excludes_zero", g, False, "ci_below_zero",
                               f"{span} lies below zero: the candidate is slower"))
        else:
            conds.append(condition("ci_excludes_zero", g, False, "ci_includes_zero",
                               f"{span} includes zero"))
    if gain is None:
        conds.append(condition("gain_meets_min", g, False, "gain_unavailable",
                           f"no {gain_name}{tag}: {comp['gain_reason']}"))
    else:
        ok = gain >= gate["min_gain_pct"]
        conds.append(condition("gain_meets_min", g, ok, "gain_below_min",
                           f"{gain_name} {_pct(gain)}{tag} {'reaches' if ok else 'is below'} "
                           f"the minimum {_pct(gate['min_gain_pct'])}"))
    if not gates_drift:
        return conds
    drift = comp["drift_pct"]
    if drift is None:
        conds.append(condition("drift_below_max", g, False, "drift_unavailable",
                           f"no bracket drift: {comp['drift_reason']}"))
        return conds
    ok = drift < gate["max_drift_pct"]
    conds.append(condition("drift_below_max", g, ok, "drift_above_max",
                       f"bracket drift {_pct(drift)} is {'below' if ok else 'not below'} "
                       f"the maximum {_pct(gate['max_drift_pct'])}"))
    half = None if gain is None else gain / 2
    ok = half is not None and drift < half
    conds.append(condition("drift_below_half_gain", g, ok, "drift_above_half_gain",
                       f"bracket drift {_pct(drift)} is {'below' if ok else 'not below'} "
                       f"half the gain ({_pct(half)})"))
    return conds


def samples_csv(samples: list[dict]) -> str:
    """samples.csv content: `arm,phase,value,response_sha256`, one row per record, seq order."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["arm", "phase", "value", "response_sha256"])
    for s in sorted(samples, key=lambda s: s.get("seq", 0)):
        value = s.get("value")
        w.writerow([s.get("arm"), s.get("phase"), "" if value is None else repr(float(value))
                    if _is_number(value) else value, s.get("response_sha256") or ""])
    return buf.getvalue()
