"""The bracket and compare kinds: arms run through the request loop, stats with honest
uncertainty, identical responses, the PR report (flow, verify, pages; harness.analysis)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from ... import analysis, reports
from ...evidence import load_evidence
from ...protocol import DEFAULT_PROTOCOL, from_document
from ..base import Kind, Page
from . import flow, verify


def pages_of(formats: dict[str, Callable[[reports.ReportInput], str]]) -> dict[str, Page]:
    """Report pages of run-shaped evidence (stats.json, samples.jsonl) from reports' formats."""
    def page(fmt: str) -> Page:
        return lambda root, sha: reports.render(load_evidence(root), fmt, formats)
    return {fmt: page(fmt) for fmt in formats}


def decide(stats: dict[str, Any], min_gain_pct: float | None,
           max_drift_pct: float | None) -> dict[str, Any]:
    """stats.json with its gate and verdict recomputed under overridden thresholds (a new dict)."""
    gate = dict(stats["gate"])
    if min_gain_pct is not None:
        gate["min_gain_pct"] = float(min_gain_pct)
    if max_drift_pct is not None:
        gate["max_drift_pct"] = float(max_drift_pct)
    gate = analysis.check_gate(gate, file="gate", prefix="gate")
    out = copy.deepcopy(stats)
    out["gate"] = gate
    out["verdict"] = analysis.verdict(out, gate)
    return out


def summary(root: Path, sha: str, stats: dict[str, Any]) -> str:
    """The PR report of re-decided stats (gate's step summary)."""
    ev = load_evidence(root)
    return reports.render_markdown(ev.protocol, ev.environment, stats, ev.samples, sha)


def _kind(name: str) -> Kind:
    return Kind(name=name, what="run", command="run", schema=from_document, run=flow.run_arms,
                analyze=flow.analyze_samples, render=flow.render_report, qualified=flow.qualified,
                required=verify.REQUIRED, recompute=verify.recompute_with(analysis.compute),
                pages=pages_of(reports.FORMATS), link=flow.link_exactness, decide=decide,
                summary=summary, default_protocol=DEFAULT_PROTOCOL)


BRACKET = _kind("bracket")
COMPARE = _kind("compare")
