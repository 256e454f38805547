"""Gate: re-decide a sealed run's verdict with overridden thresholds; JUnit and step-summary text.

Pure: dicts in, dicts/text out. The CLI (cli/gate.py) verifies, loads, writes files and exits.
"""
from __future__ import annotations

import copy

from . import analysis
from .errors import UsageError
from .reports.junit import render_junit


def thresholds(stats: dict, *, min_gain_pct: float | None = None,
               max_drift_pct: float | None = None) -> dict:
    """The run's gate table with command-line overrides applied (None keeps the stored value)."""
    gate = dict(stats["gate"])
    if min_gain_pct is not None:
        gate["min_gain_pct"] = float(min_gain_pct)
    if max_drift_pct is not None:
        gate["max_drift_pct"] = float(max_drift_pct)
    return analysis.check_gate(gate, file="gate", prefix="gate")


def decide(stats: dict, *, min_gain_pct: float | None = None,
           max_drift_pct: float | None = None) -> dict:
    """stats.json with its gate and verdict recomputed under overridden thresholds (a new dict).

    Calibrate evidence carries its own verdict (is the gate sound?): it is returned as is,
    and gain/drift overrides are a usage error there."""
    if stats.get("kind") == "calibration":
        if min_gain_pct is not None or max_drift_pct is not None:
            raise UsageError("calibration evidence has no gain or drift verdict to re-decide; "
                             "re-run calibrate with the protocol's new gate instead",
                             field="--min-gain/--max-drift")
        return copy.deepcopy(stats)
    gate = thresholds(stats, min_gain_pct=min_gain_pct, max_drift_pct=max_drift_pct)
    out = copy.deepcopy(stats)
    out["gate"] = gate
    out["verdict"] = analysis.verdict(out, gate)
    return out


def summary_line(name: str, verdict: dict) -> str:
    """One line for the terminal: the verdict's answer and its reasons."""
    if verdict["qualified"]:
        return f"{name}: QUALIFIED"
    answer = verdict.get("decision") or "NOT QUALIFIED"
    return f"{name}: {answer} ({', '.join(verdict['reasons'])})"


def junit(name: str, verdict: dict) -> str:
    """JUnit XML with one testcase per verdict condition."""
    return render_junit(f"dflash-qualify gate: {name}", verdict["conditions"])


def invalid_conditions(problems: list[str]) -> list[dict]:
    """The single failing condition that stands for evidence that did not verify."""
    detail = "; ".join(problems[:20]) + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
    return [{"name": "evidence_valid", "group": None, "passed": False, "reason": "evidence_invalid",
             "message": f"evidence failed verification: {detail}"}]


def invalid_junit(name: str, problems: list[str]) -> str:
    """JUnit XML for evidence that failed verification."""
    return render_junit(f"dflash-qualify gate: {name}", invalid_conditions(problems))


def invalid_summary(path: str, problems: list[str]) -> str:
    """Step-summary markdown for evidence that failed verification."""
    lines = ["# dflash-qualify gate: evidence invalid", "", f"`{path}` failed verification:", ""]
    lines += [f"- {p}" for p in problems]
    return "\n".join(lines) + "\n"
