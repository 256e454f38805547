"""The exactness kind: tensor-level exactness of candidates against the q1 oracle, from traces
(schema: the protocol, flow: trace and analyze, diff/coverage: the comparison, verify)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ...evidence import Sealed, read_json, seal
from ...reports import exactness_md
from ..base import Kind
from . import flow, schema, verify
from .flow import RESULTS


def _md(root: Path, sha: str) -> str:
    return (exactness_md.render(read_json(root, "protocol.json"), read_json(root, RESULTS))
            + f"\nEvidence manifest SHA-256: {sha}\n")


def _json(root: Path, sha: str) -> str:
    return json.dumps({"manifest_sha256": sha, **read_json(root, RESULTS)}, indent=2,
                      sort_keys=True) + "\n"


EXACTNESS = Kind(
    name=schema.KIND, what="exactness", command="exactness", schema=schema.from_document,
    run=flow.trace_arms, analyze=flow.analyze_traces, render=flow.render_report,
    qualified=flow.passed, required=verify.REQUIRED, recompute=verify.recompute,
    pages={"md": _md, "json": _json}, default_protocol=schema.DEFAULT_PROTOCOL)


def run(loaded: Any, out_root: Path, *, invocation: str,
        progress: Callable[[str], None] = lambda msg: None) -> Sealed:
    """Trace every arm, analyze, write and seal exactness evidence (RunFailed, evidence left
    .partial with the reason, when a worker or request fails)."""
    return seal(EXACTNESS, loaded, out_root, invocation=invocation, options={"progress": progress})
