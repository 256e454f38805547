"""The bracket and compare kinds' steps: the arms through the request loop (harness.runner),
an optional linked exactness check, stats.json and samples.csv, and the PR report."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from ... import analysis, builds, reports
from ...environment import redact_protocol
from ...errors import RunFailed
from ...protocol import read_document
from ...runner import Event, Runner
from ...targets import make_target as default_make_target

EXACTNESS_INVOCATION = "dflash-qualify exactness {protocol}"


def run_arms(session: Any) -> dict[str, dict[str, Any]]:
    """The run flow: every arm through the request loop; samples.jsonl, responses/, logs/."""
    if session.protocol.get("build"):   # arms from git refs: built before any arm starts
        build_arms(session)
    runner = Runner(session.protocol, session.writer,
                    session.option("make_target") or default_make_target,
                    session.option("on_event"))
    session.on_abandon.append(runner.stop_all)   # reversed order: kill first, then save logs
    session.on_abandon.append(runner.kill_all)
    session.state["samples"] = runner.run()
    return runner.arm_info


def build_arms(session: Any) -> None:
    """[build]: build (or reuse from the cache) every arm's ref once per commit (builds.py); the
    arms' build records (commit, artifact SHA-256s) and {worktree}-filled commands go into
    protocol.json, rewritten before any arm starts, and each build log into logs/."""
    on_event = session.option("on_event")

    def progress(text: str) -> None:
        if on_event is not None:
            on_event(Event(kind="build", arm="", label=text))

    done = builds.prepare(session.protocol, on_progress=progress)
    session.stored = redact_protocol(session.protocol)
    session.writer.write_json("protocol.json", session.stored)
    for b in {b.commit: b for b in done.values()}.values():
        session.writer.write_text(f"logs/build-{b.commit[:12]}.log",
                                  b.log.read_text(encoding="utf-8", errors="replace"))


def link_exactness(session: Any) -> dict[str, Any]:
    """[exactness] protocol = NAME: that exactness check sealed as its own evidence under the
    same root; environment.json keeps the link (protocol, directory, manifest SHA-256, passed,
    verdicts; or the error)."""
    spec = session.protocol.get("exactness")
    if not spec:
        return {}
    link: dict[str, Any] = {"protocol": spec["protocol"]}
    kind = session.registry["exactness"]
    try:
        loaded = kind.schema(read_document(spec["protocol"]))
        outcome = session.seal_linked("exactness", loaded,
                                      invocation=EXACTNESS_INVOCATION.format(protocol=spec["protocol"]))
    except RunFailed as exc:
        return {"exactness": {**link, "passed": False, "error": str(exc), "evidence": None,
                              "manifest_sha256": None}}
    res = outcome.results
    return {"exactness": {**link, "passed": res["passed"], "error": None,
                          "evidence": outcome.path.name, "manifest_sha256": outcome.manifest_sha256,
                          "verdicts": {c["id"]: c["verdict"] for c in res["candidates"]},
                          "missing_coverage": res["missing_coverage"]}}


def analyze_with(compute: Callable[..., dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """A kind's analyze step: samples.csv, then stats.json = compute(protocol.json as stored,
    samples, response reader) — analysis.compute for runs, the calibration analysis for calibrate."""
    def analyze(session: Any) -> dict[str, Any]:
        samples = session.state["samples"]
        session.writer.write_text("samples.csv", analysis.samples_csv(samples))
        stats = compute(session.stored, samples, response_reader(session.writer.path))
        session.writer.write_json("stats.json", stats)
        return stats
    return analyze


analyze_samples = analyze_with(analysis.compute)


def render_report(session: Any, stats: dict[str, Any]) -> str:
    """report.md: the PR report."""
    return reports.render_markdown(session.stored, session.environment, stats,
                                  session.state["samples"], None)


def qualified(stats: dict[str, Any]) -> bool:
    return bool(stats["verdict"]["qualified"])


def response_reader(root: Path | str) -> Callable[[str], bytes]:
    """sha256 -> the stored response bytes (read back from the evidence being written)."""
    root = Path(root)

    def read(sha: str) -> bytes:
        data = (root / "responses" / f"{sha}.bin").read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            raise RunFailed(f"stored response {sha} does not match its hash")
        return data

    return read
