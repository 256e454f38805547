"""The calibration kind: A/A brackets of a bracket protocol measure this machine's noise floor,
the gate's false-qualification rate and power, and the N a gain needs (flow, analysis)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from ... import reports
from ...errors import UsageError
from ...evidence import Sealed, load_evidence, seal
from ..base import Kind
from ..bracket import pages_of, verify
from . import analysis, flow


def refuse_overrides(stats: dict[str, Any], min_gain_pct: float | None,
                     max_drift_pct: float | None) -> dict[str, Any]:
    """Calibrate evidence carries its own verdict (is the gate sound?): returned as is; gain
    and drift overrides are a usage error."""
    if min_gain_pct is not None or max_drift_pct is not None:
        raise UsageError("calibration evidence has no gain or drift verdict to re-decide; "
                         "re-run calibrate with the protocol's new gate instead",
                         field="--min-gain/--max-drift")
    return copy.deepcopy(stats)


def summary(root: Path, sha: str, stats: dict[str, Any]) -> str:
    ev = load_evidence(root)
    return reports.render_input(reports.ReportInput(ev.protocol, ev.environment, stats, ev.samples,
                                                    sha, ev.path), "md", reports.CALIBRATION_FORMATS)


CALIBRATION = Kind(
    name=analysis.KIND, what="calibration", command="calibrate", schema=None,
    run=flow.run_repeats, analyze=flow.analyze_repeats, render=flow.render_report,
    qualified=flow.gate_sound, required=verify.REQUIRED,
    recompute=verify.recompute_with(analysis.compute),
    pages=pages_of(reports.CALIBRATION_FORMATS), decide=refuse_overrides, summary=summary,
    claims=analysis.is_calibration)


def calibrate(loaded: Any, out_root: str | Path, settings: dict, *, invocation: str,
              make_target: Callable | None = None, on_event: Callable | None = None,
              on_repeat: Callable[[int, int], None] | None = None) -> Sealed:
    """Run settings["repeats"] A/A brackets of a loaded bracket protocol and seal the evidence.

    Args:
        loaded: protocol.LoadedProtocol (a bracket protocol; overrides already applied).
        out_root: evidence root; the directory is <root>/<stamp>-<name>-calibration.
        settings: calibration settings (analysis.DEFAULTS keys; validated here).
        invocation: the reproducing command line (environment.json).
        on_repeat: called with (repeat, repeats) before each repeat (progress display).
    Returns:
        Sealed: path, manifest SHA-256, qualified = the gate is sound on this machine, stats.
    Raises:
        UsageError for a compare protocol or bad settings; RunFailed as `run` does.
    """
    return seal(CALIBRATION, flow.derive(loaded, settings), out_root, invocation=invocation,
                options={"make_target": make_target, "on_event": on_event, "on_repeat": on_repeat})


__all__ = ["CALIBRATION", "calibrate"]
