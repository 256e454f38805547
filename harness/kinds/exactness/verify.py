"""Verification of exactness evidence (protocol.json kind "exactness"): every stored trace is
re-read and the verdicts, first divergences and coverage are recomputed and compared with
exactness.json field by field. harness.verify calls it (the registry's recompute) once the
manifest checks passed."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import QualifyError
from ...evidence import first_difference, read_json
from .diff import TraceError
from .flow import RESULTS, analyze, trace_rel
from .model import ExactnessProtocol

REQUIRED = ("protocol.json", "environment.json", RESULTS)


def recompute(root: Path, result: Any) -> None:
    """Add a problem to `result` (a VerifyResult) for every way exactness.json disagrees with
    what its traces say, or a trace that is missing or cannot be read."""
    try:
        protocol = read_json(root, "protocol.json")
        stored = read_json(root, RESULTS)
    except QualifyError as exc:
        result.add(RESULTS, f"cannot recompute: {exc}")
        return

    def read(rel: str) -> bytes:
        p = root / rel
        if os.path.islink(p) or not p.is_file():
            raise TraceError(f"{rel}: missing")
        return p.read_bytes()

    try:
        typed = ExactnessProtocol.from_json(protocol)
    except QualifyError as exc:
        result.add("protocol.json", f"cannot recompute: {exc}")
        return
    try:
        for arm in typed.arms:
            for q in typed.requests:
                rel = trace_rel(arm.id, q.id)
                if not (root / rel).is_file():
                    result.add(rel, "required trace missing")
                    return
        fresh = analyze(typed, read)
    except TraceError as exc:
        result.add("traces", f"cannot recompute: {exc}")
        return
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        result.add("protocol.json", f"cannot recompute: malformed exactness protocol or trace ({type(exc).__name__}: {exc})")
        return
    difference = first_difference(stored, fresh, "")
    if difference:
        result.add(RESULTS, f"does not match the verdicts recomputed from the traces: {difference}")
