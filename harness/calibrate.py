"""The `calibrate` flow: K A/A brackets of a protocol through the runner, one sealed evidence
directory, stats from harness.calibration, and the calibration report.

Evidence layout is a run's (docs/evidence-format.md) with: protocol.json = the A/A protocol
plus its `calibration` table; samples.jsonl records of every repeat carrying `repeat` (seq
is global); logs under logs/repeat-<k>/. Failures and interrupts leave the directory
`.partial` with INCOMPLETE, exactly as `run` does; nothing here prints.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from . import analysis, calibration, environment, evidence, reports
from .runner import (Event, MakeTarget, Outcome, Runner, _response_reader, _signals_raise,
                     failures_leave_incomplete)
from .targets import make_target as default_make_target


class _RepeatWriter:
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


def calibrate(loaded: Any, out_root: str | Path, settings: dict, *, invocation: str,
              make_target: MakeTarget = default_make_target,
              on_event: Callable[[Event], None] | None = None,
              on_repeat: Callable[[int, int], None] | None = None) -> Outcome:
    """Run settings["repeats"] A/A brackets of a loaded bracket protocol and seal the evidence.

    Args:
        loaded: protocol.LoadedProtocol (a bracket protocol; overrides already applied).
        out_root: evidence root; the directory is <root>/<stamp>-<name>-calibration.
        settings: calibration settings (calibration.DEFAULTS keys; validated here).
        invocation: the reproducing command line (environment.json).
        on_repeat: called with (repeat, repeats) before each repeat (progress display).
    Returns:
        Outcome: path, manifest SHA-256, qualified = the gate is sound on this machine, stats.
    Raises:
        UsageError for a compare protocol or bad settings; RunFailed as `run` does.
    """
    protocol = calibration.aa_protocol(loaded.resolved, settings)
    calibration.check_settings(protocol)
    secrets = sorted(set(environment.secret_values(protocol))
                     | set(environment.secret_values(loaded.resolved)), key=len, reverse=True)
    writer = evidence.EvidenceWriter.create(Path(out_root), protocol["name"])
    partial = str(writer.path)
    runner: Runner | None = None
    samples: list[dict] = []
    with failures_leave_incomplete("calibration", writer, partial, lambda: runner), \
            _signals_raise():
        redacted = environment.redact_protocol(protocol)
        writer.write_json("protocol.json", redacted)
        writer.write_bytes("protocol.toml",
                           environment.redact_bytes(loaded.source_bytes, secrets))
        env_record = environment.redact_strings(
            environment.capture(protocol, invocation=invocation), secrets)
        writer.write_json("environment.json", env_record)
        repeats = protocol["calibration"]["repeats"]
        gpu_visits: dict[str, list[dict]] = {}   # cuda targets: every repeat's GPU readings
        for r in range(repeats):
            if on_repeat is not None:
                on_repeat(r, repeats)
            view = _RepeatWriter(writer, r, len(samples))
            runner = Runner(protocol, view, make_target, on_event, secrets)
            samples += [view.tag(s) for s in runner.run()]
            for arm_id, info in runner.arm_info.items():
                gpu_visits.setdefault(arm_id, []).extend(
                    {"repeat": r, **v} for v in info.get("gpu") or [])
        arm_info = {arm_id: {**info, "gpu": gpu_visits.get(arm_id) or None}
                    for arm_id, info in (runner.arm_info if runner else {}).items()}
        env_record = environment.redact_strings(
            environment.finish(env_record, protocol, arm_info), secrets)
        writer.write_json("environment.json", env_record)
        writer.write_text("samples.csv", analysis.samples_csv(samples))
        stats = analysis.compute(redacted, samples, _response_reader(writer))
        writer.write_json("stats.json", stats)
        writer.write_text("report.md", reports.render_input(
            reports.ReportInput(redacted, env_record, stats, samples, None), "md"))
        path, manifest_sha = writer.seal()
    return Outcome(path=Path(path), manifest_sha256=manifest_sha,
                   qualified=bool(stats["verdict"]["qualified"]), stats=stats)


