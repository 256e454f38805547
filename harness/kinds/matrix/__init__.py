"""The matrix kind: protocols x hosts, each cell one whole protocol sealed on the host that ran it,
one manifest over every cell (protocol: the matrix file; cell: one cell on its node; executors:
local and ray; driver: the run flow; summary and report: the table; verify). docs/matrix.md."""
from __future__ import annotations

import json
from pathlib import Path

from ...evidence import read_json
from ..base import Kind
from . import driver, verify
from .protocol import KIND, from_document


def _md(root: Path, sha: str) -> str:
    text = (Path(root) / "report.md").read_text(encoding="utf-8")
    return text.rstrip("\n") + f"\n\nMatrix evidence manifest SHA-256: {sha}\n"


def _json(root: Path, sha: str) -> str:
    return json.dumps({"manifest_sha256": sha, "matrix": read_json(root, "protocol.json"),
                       "nodes": read_json(root, "nodes.json"),
                       **read_json(root, "cells.json")}, indent=2, sort_keys=True) + "\n"


MATRIX = Kind(
    name=KIND, what="matrix", command="matrix", schema=from_document, run=driver.run_cells,
    analyze=driver.analyze_cells, render=driver.render_report, qualified=driver.qualified,
    required=verify.REQUIRED, recompute=verify.recompute, pages={"md": _md, "json": _json},
    nested=verify.nested)
