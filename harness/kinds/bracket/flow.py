"""The bracket and compare kinds' steps: the arms through the request loop (harness.runner),
an optional linked exactness check, stats.json and samples.csv, and the PR report."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from ... import analysis, reports
from ...errors import RunFailed
from ...protocol import read_document
from ...runner import Runner
from ...targets import make_target as default_make_target

EXACTNESS_INVOCATION = "dflash-qualify exactness {protocol}"


def run_arms(session: Any) -> dict[str, dict[str, Any]]:
    """The run flow: every arm through the request loop; samples.jsonl, responses/, logs/."""
    runner = Runner(session.protocol, session.writer,
                    session.option("make_target") or default_make_target,
                    session.option("on_event"))
    session.on_abandon.append(runner.stop_all)   # reversed order: kill first, then save logs
    session.on_abandon.append(runner.kill_all)
    session.state["samples"] = runner.run()
    return runner.arm_info


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


def analyze_samples(session: Any) -> dict[str, Any]:
    """samples.csv and stats.json (analysis.compute over protocol.json as stored)."""
    samples = session.state["samples"]
    session.writer.write_text("samples.csv", analysis.samples_csv(samples))
    stats = analysis.compute(session.stored, samples, response_reader(session.writer.path))
    session.writer.write_json("stats.json", stats)
    return stats


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
