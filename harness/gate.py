"""Gate: re-decide sealed evidence's verdict with overridden thresholds (through its kind);
JUnit and step-summary text.

Pure: dicts in, dicts/text out. The CLI (cli/gate.py) verifies, loads, writes files and exits.
"""
from __future__ import annotations

from . import kinds
from .errors import UsageError
from .reports.junit import render_junit


def decide(stats: dict, *, min_gain_pct: float | None = None,
           max_drift_pct: float | None = None) -> dict:
    """stats.json with its verdict re-decided under overridden thresholds (a new dict), by the
    kind that wrote it (harness.kinds: Kind.decide; its stats carry the kind's name)."""
    kind = kinds.lookup(str(stats.get("kind")))
    if kind.decide is None:
        raise UsageError(f"{kind.what} evidence has no gate verdict to re-decide", field="kind")
    return kind.decide(stats, min_gain_pct, max_drift_pct)


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
