"""JSON report: stats, verdict and evidence id in one schema-versioned document (returns text)."""
from __future__ import annotations

import json

from .base import ReportInput

REPORT_SCHEMA = "dflash-qualify.report"
# Version history:
#   1: first version: protocol summary, evidence {path, manifest_sha256}, qualified,
#      verdict, stats (stats.json as written by analysis.compute), invocation.
REPORT_VERSION = 1


def render(inp: ReportInput) -> str:
    """Registry entry: the JSON report (indent 2, sorted keys, trailing newline)."""
    protocol = inp.protocol
    env = inp.environment if isinstance(inp.environment, dict) else {}
    doc = {
        "schema": REPORT_SCHEMA,
        "version": REPORT_VERSION,
        "protocol": {k: protocol.get(k) for k in ("name", "kind", "description", "metric", "direction")},
        "evidence": {"path": None if inp.path is None else str(inp.path),
                     "manifest_sha256": inp.manifest_sha},
        "qualified": inp.stats["verdict"]["qualified"],
        "verdict": inp.stats["verdict"],
        "stats": inp.stats,
        "invocation": env.get("invocation"),
    }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
