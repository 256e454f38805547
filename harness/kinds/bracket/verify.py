"""Verify step of run and calibrate evidence: stats.json recomputed from samples.jsonl and the
stored responses, samples.csv re-derived, every response present, and a sequential bracket's
looks.jsonl recomputed (harness.verify calls it)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

from ... import analysis
from ...errors import QualifyError
from ...evidence import first_difference, read_json, read_jsonl

REQUIRED = ("protocol.json", "environment.json", "samples.jsonl", "samples.csv", "stats.json")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def recompute_with(compute: Callable[..., dict]) -> Callable[[Path, Any], None]:
    """A kind's verify step that recomputes stats.json through `compute` (analysis.compute for
    runs, the calibration analysis for calibrate evidence) and samples.csv from samples.jsonl."""
    def recompute(root: Path, result: Any) -> None:
        _recompute(root, result, compute)
    return recompute


def _recompute(root: Path, result: Any, compute: Callable[..., dict]) -> None:
    """Add a problem for every way stats.json or samples.csv disagrees with samples.jsonl."""
    try:
        protocol = read_json(root, "protocol.json")
        samples = read_jsonl(root, "samples.jsonl")
        stored = read_json(root, "stats.json")
    except QualifyError as exc:
        result.add("stats.json", f"cannot recompute: {exc}")
        return

    def response_bytes(sha: str) -> bytes:
        if not _SHA_RE.fullmatch(str(sha)):
            raise KeyError(sha)
        p = root / "responses" / f"{sha}.bin"
        if os.path.islink(p):
            raise KeyError(sha)
        return p.read_bytes()

    version = stored.get("version") if isinstance(stored, dict) else None
    if version not in analysis.SUPPORTED_VERSIONS or isinstance(version, bool):
        result.add("stats.json", f"version: expected one of {list(analysis.SUPPORTED_VERSIONS)}, "
                                 f"got {version!r}")
        return
    try:
        recomputed = compute(protocol, samples, response_bytes, version=version)
    except QualifyError as exc:
        result.add("stats.json", f"cannot recompute: {exc}")
        return
    difference = first_difference(stored, recomputed, "")
    if difference:
        result.add("stats.json", f"does not match statistics recomputed from samples.jsonl: {difference}")
    if version >= 3 and isinstance(protocol, dict) and protocol.get("sequential") is not None:
        _recompute_looks(root, protocol, samples, result)
    for s in samples:
        sha = s.get("response_sha256")
        if sha and s.get("ok", True) is not False and not os.path.isfile(root / "responses" / f"{sha}.bin"):
            result.add(f"responses/{sha}.bin", f"missing: response of request seq {s.get('seq')} is not stored")
            break
    csv_path = root / "samples.csv"
    if os.path.lexists(csv_path) and not os.path.islink(csv_path):
        if csv_path.read_bytes() != analysis.samples_csv(samples).encode("utf-8"):
            result.add("samples.csv", "does not match samples.jsonl (analysis.samples_csv)")


def _recompute_looks(root: Path, protocol: dict, samples: list, result: Any) -> None:
    """A sequential bracket's looks.jsonl: the stopping decision must follow from the samples
    (analysis.check_looks: every look recomputed, the stop justified)."""
    try:
        looks = read_jsonl(root, "looks.jsonl")
        problems = analysis.check_looks(protocol, samples, looks)
    except QualifyError as exc:
        result.add("looks.jsonl", f"cannot recompute: {exc}")
        return
    for problem in problems:
        result.add("looks.jsonl", f"does not follow from samples.jsonl: {problem}")
