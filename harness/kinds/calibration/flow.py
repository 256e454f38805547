"""The calibration kind's steps: K A/A brackets of a protocol through the request loop into one
evidence directory, stats from the calibration analysis, and the calibration report.

Evidence layout is a run's (docs/evidence-format.md) with: protocol.json = the A/A protocol
plus its `calibration` table; samples.jsonl records of every repeat carrying `repeat` (seq
is global); logs under logs/repeat-<k>/. Failures and interrupts leave the directory
`.partial` with INCOMPLETE, exactly as `run` does (harness.evidence.sealing); nothing here prints.
"""
from __future__ import annotations

from typing import Any

from ... import reports
from ...protocol import LoadedProtocol
from ...runner import Runner
from ...targets import make_target as default_make_target
from ..bracket.flow import analyze_with, build_arms
from . import analysis as calibration


class RepeatWriter:
    """The evidence writer as one repeat's runner sees it: records gain `repeat` and a global
    seq, logs go under logs/repeat-<k>/."""

    def __init__(self, writer: Any, repeat: int, seq_offset: int) -> None:
        self.writer, self.repeat, self.offset = writer, repeat, seq_offset
        self.path = writer.path

    def tag(self, record: dict) -> dict:
        return {**record, "repeat": self.repeat, "seq": record["seq"] + self.offset}

    def append_jsonl(self, rel: str, record: dict) -> None:
        self.writer.append_jsonl(rel, self.tag(record))

    def write_text(self, rel: str, text: str) -> None:
        if rel.startswith("logs/"):
            rel = f"logs/repeat-{self.repeat:03d}/{rel[len('logs/'):]}"
        self.writer.write_text(rel, text)

    def store_response(self, data: bytes) -> str:
        return self.writer.store_response(data)


def derive(loaded: LoadedProtocol, settings: dict) -> LoadedProtocol:
    """The A/A protocol `calibrate` runs for a loaded bracket protocol (protocol.toml stays the
    file the user gave). UsageError for a compare protocol or bad settings."""
    protocol = calibration.aa_protocol(loaded.resolved, settings)
    calibration.check_settings(protocol)
    return LoadedProtocol(resolved=protocol, source_bytes=loaded.source_bytes, path=loaded.path)


def run_repeats(session: Any) -> dict[str, dict[str, Any]]:
    """The run flow: settings.repeats A/A brackets, every record tagged with its repeat."""
    protocol = session.protocol
    if protocol.get("build"):   # arms from git refs: every A/A arm runs the reference's ref
        build_arms(session)
    make_target = session.option("make_target") or default_make_target
    on_repeat = session.option("on_repeat")
    repeats = protocol["calibration"]["repeats"]
    samples: list[dict] = []
    gpu_visits: dict[str, list[dict]] = {}   # cuda targets: every repeat's GPU readings
    runner: Runner | None = None
    for r in range(repeats):
        if on_repeat is not None:
            on_repeat(r, repeats)
        view = RepeatWriter(session.writer, r, len(samples))
        runner = Runner(protocol, view, make_target, session.option("on_event"))
        session.on_abandon.append(runner.stop_all)
        session.on_abandon.append(runner.kill_all)
        samples += [view.tag(s) for s in runner.run()]
        for arm_id, info in runner.arm_info.items():
            gpu_visits.setdefault(arm_id, []).extend(
                {"repeat": r, **v} for v in info.get("gpu") or [])
    session.state["samples"] = samples
    return {arm_id: {**info, "gpu": gpu_visits.get(arm_id) or None}
            for arm_id, info in (runner.arm_info if runner else {}).items()}


analyze_repeats = analyze_with(calibration.compute)   # samples.csv + the calibration's stats.json


def render_report(session: Any, stats: dict[str, Any]) -> str:
    """report.md: the calibration report."""
    inp = reports.ReportInput(session.stored, session.environment, stats,
                              session.state["samples"], None)
    return reports.render_input(inp, "md", reports.CALIBRATION_FORMATS)


def gate_sound(stats: dict[str, Any]) -> bool:
    return bool(stats["verdict"]["qualified"])
