"""CSV report: one row per request, warm-ups included (returns text).

The first columns are those `analyze` reads (arm, phase, value, response_sha256), so a
report can be fed back to `dflash-qualify analyze`; the rest describe each request.
"""
from __future__ import annotations

import csv
import io

from .base import ReportInput

COLUMNS = ("arm", "phase", "value", "response_sha256", "seq", "index", "role", "group",
           "prompt_id", "ok", "cache_hits", "error")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def render(inp: ReportInput) -> str:
    """Registry entry: the samples as CSV, in request order."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for s in sorted(inp.samples, key=lambda s: s.get("seq", 0) if isinstance(s.get("seq"), int) else 0):
        writer.writerow([_cell(s.get(c)) for c in COLUMNS])
    return buf.getvalue()
