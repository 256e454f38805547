"""The exactness kind's steps: the q1 oracle and each candidate traced through the worker
protocol (trace_arms), every record compared bitwise and coverage checked (analyze), the report.

Evidence layout (docs/evidence-format.md, "Exactness evidence"): protocol.json, protocol.toml,
environment.json, traces/<arm>/<request>.jsonl.gz (trace format v1), logs/<arm>.log,
exactness.json (analyze() of the traces; verify recomputes it), report.md.
"""
from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from ...errors import RunFailed
from ...evidence import EvidenceWriter
from ...reports import exactness_md
from ...targets import Request, WorkerTarget
from ...targets.worker import embedded_argv
from ...protocol_model import thaw
from .coverage import coverage
from .diff import VERDICT_IDENTICAL, TraceError, diff_traces, load_trace, verdict
from .model import ExactnessProtocol, TraceArm

RESULTS = "exactness.json"
RESULTS_SCHEMA = "dflash-qualify.exactness"
RESULTS_VERSION = 1


def trace_rel(arm: str, request: str) -> str:
    return f"traces/{arm}/{request}.jsonl.gz"


def analyze(protocol: ExactnessProtocol | dict[str, Any], read: Callable[[str], bytes]
            ) -> dict[str, Any]:
    """Recompute every verdict from the stored traces (read(rel) -> bytes). Pure over its input;
    raises TraceError for a trace that cannot be compared (UsageError for a malformed
    protocol.json, through ExactnessProtocol.from_json)."""
    if not isinstance(protocol, ExactnessProtocol):
        protocol = ExactnessProtocol.from_json(protocol)
    oracle, cands, reqs = protocol.oracle, protocol.candidates, protocol.requests
    ref = {q.id: load_trace(trace_rel(oracle.id, q.id), read(trace_rel(oracle.id, q.id)))
           for q in reqs}
    model = ref[reqs[0].id].header["model"]
    for q in reqs:
        bad = [s for s in ref[q.id].steps if s["width"] != 1 or s["kernel"] != "mmvq"]
        if bad:
            raise TraceError(f"the oracle trace of {q.id} is not q1: step {bad[0]['step']} has width "
                             f"{bad[0]['width']} ({bad[0]['kernel']})")
    out = []
    missing: list[str] = []
    for c in cands:
        runs, diffs = [], []
        for q in reqs:
            tr = load_trace(trace_rel(c.id, q.id), read(trace_rel(c.id, q.id)))
            runs.append((q.id, tr))
            diffs.append(diff_traces(tr, ref[q.id], q.id))
        v = verdict(diffs)
        first = next((d["first_divergence"] for d in diffs if d["first_divergence"]), None)
        rows = coverage(model, c.chunk or 1, runs, reqs)
        need = c.expect == "bitwise"
        cmiss = [f"{c.id}: {r['item']}" for r in rows if not r["ok"]] if need else []
        missing += cmiss
        passed = (v == VERDICT_IDENTICAL) if need else (v != VERDICT_IDENTICAL)
        steps = sum(len(tr.steps) for _, tr in runs)
        out.append({"id": c.id, "label": c.label, "expect": c.expect, "env": thaw(c.env),
                    "engine": thaw(c.engine), "verdict": v, "passed": passed and not cmiss,
                    "expectation_met": passed, "first_divergence": first, "requests": diffs,
                    "steps": steps, "tensors": sum(d["tensors"] for d in diffs),
                    "mmq_steps": sum(1 for _, tr in runs for s in tr.steps if s["kernel"] == "mmq"),
                    "coverage": rows, "coverage_required": need, "coverage_ok": not cmiss})
    return {"schema": RESULTS_SCHEMA, "version": RESULTS_VERSION, "oracle": oracle.id,
            "model": {k: model[k] for k in ("name", "ratios", "n_swa", "n_layers", "n_hash_layers")},
            "trace_schema": "dflash-qualify.trace/v1", "level": protocol.level,
            "requests": [q.id for q in reqs], "candidates": out, "missing_coverage": missing,
            "passed": all(c["passed"] for c in out) and not missing}


def trace_arms(session: Any) -> dict[str, dict[str, Any]]:
    """The run flow: trace every arm's requests into traces/<arm>/<request>.jsonl.gz; returns
    each arm's worker facts (environment.json arms)."""
    protocol = ExactnessProtocol.from_json(session.protocol)
    progress = session.option("progress") or (lambda msg: None)
    info: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dflash-trace-") as tmp:
        for arm in protocol.arms:
            info[arm.id] = _trace_arm(protocol, arm, Path(tmp), session.writer, progress)
    return info


def analyze_traces(session: Any) -> dict[str, Any]:
    """The analysis: every verdict recomputed from the stored traces, written as exactness.json."""
    try:
        results = analyze(session.stored, session.read)
    except TraceError as exc:
        raise RunFailed(f"traces cannot be compared: {exc}") from None
    session.writer.write_json(RESULTS, results)
    return results


def render_report(session: Any, results: dict[str, Any]) -> str:
    """report.md of exactness evidence."""
    return exactness_md.render(session.stored, results)


def passed(results: dict[str, Any]) -> bool:
    return bool(results["passed"])


def _trace_arm(protocol: ExactnessProtocol, arm: TraceArm, tmp: Path, writer: EvidenceWriter,
               progress: Callable[[str], None]) -> dict[str, Any]:
    target = thaw(protocol.target)
    argv = (embedded_argv(target, arm.to_json()) if target["kind"] == "embedded"
            else list(target["command"]))
    worker = WorkerTarget(arm.id, argv, thaw(arm.env), start_timeout_s=protocol.start_s)
    t0 = time.monotonic()
    try:
        facts = worker.prepare()
        facts["start_s"] = time.monotonic() - t0
        for q in protocol.requests:
            path = tmp / f"{arm.id}-{q.id}.jsonl.gz"
            trace = {"level": protocol.level, "path": str(path)}
            if q.snapshot_at:
                trace["snapshot_at"] = q.snapshot_at
            progress(f"{arm.id}: {q.id}")
            resp = worker.run_once(Request(id=q.id, prompt_id=q.id, max_tokens=protocol.max_tokens,
                                           timeout_s=protocol.request_s, text=q.text,
                                           options=thaw(arm.engine), trace=trace))
            if resp.trace is None or not path.is_file():
                raise RunFailed(f"arm {arm.id}: request {q.id}: the worker wrote no trace "
                                f"(does the target support the worker protocol's trace option?)")
            data = path.read_bytes()
            said = resp.trace.get("sha256")
            if said is not None and said != hashlib.sha256(data).hexdigest():
                raise RunFailed(f"arm {arm.id}: request {q.id}: the trace file's SHA-256 is not the "
                                f"one the worker reported")
            writer.write_bytes(trace_rel(arm.id, q.id), data)
            path.unlink()
    finally:
        log = worker.teardown()
        writer.write_text(f"logs/{arm.id}.log", log)
    return facts
