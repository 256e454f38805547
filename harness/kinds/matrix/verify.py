"""Verify a matrix directory: the matrix manifest over every file, then each cell with the normal
verify, then cells.json and report.md recomputed from the cells. Problems name their cell.

Never raises on hostile input (as harness.verify): every finding is a Problem.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ... import verify as verify_mod
from ...evidence import parse_json
from .summary import cell_summary

REQUIRED = ("matrix.json", "nodes.json", "cells.json", "report.md", "matrix.toml")
_CELL_STATUSES = ("sealed", "failed")


def is_matrix(directory: Path) -> bool:
    """True when a directory holds matrix evidence (matrix.json declares kind = "matrix")."""
    path = Path(directory) / "matrix.json"
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    try:
        return parse_json(path.read_bytes()).get("kind") == "matrix"
    except (OSError, ValueError, AttributeError):
        return False


def verify_matrix(directory: Path) -> verify_mod.VerifyResult:
    """Every problem of a matrix directory; a problem inside a cell names the cell."""
    root = Path(directory)
    result = verify_mod.VerifyResult(root)
    try:
        _verify(root, result)
    except Exception as exc:  # noqa: BLE001 - hostile input must become a finding, not a crash
        result.add(".", f"unexpected error while verifying: {type(exc).__name__}: {exc}")
    return result


def _verify(root: Path, result: verify_mod.VerifyResult) -> None:
    whole = verify_mod.verify(root)  # re-hash every file, cells' files included
    result.manifest_sha = whole.manifest_sha
    for p in whole.problems:
        # the run-evidence files verify expects at the top belong to the cells, not the matrix
        if p.path in verify_mod.REQUIRED and p.message == "required file missing":
            continue
        parts = p.path.split("/")
        if len(parts) > 2 and parts[0] == "cells":  # name the cell the file belongs to
            p = verify_mod.Problem(p.path, f"cell {parts[1]}: {p.message}")
        result.problems.append(p)
    if os.path.islink(root) or not os.path.isdir(root):
        return
    for rel in REQUIRED:
        if not os.path.isfile(root / rel):
            result.add(rel, "required file missing")
    try:
        cells_json = parse_json((root / "cells.json").read_bytes())
        matrix = parse_json((root / "matrix.json").read_bytes())
        nodes = parse_json((root / "nodes.json").read_bytes())
    except (OSError, ValueError) as exc:
        result.add("cells.json", f"cannot read the matrix records: {exc}")
        return
    cells = cells_json.get("cells") if isinstance(cells_json, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        result.add("cells.json", "cells: expected a list of cell records")
        return
    recorded_dirs = set()
    for i, cell in enumerate(cells):
        _check_cell(root, cell, i, result)
        if cell.get("status") == "sealed" and isinstance(cell.get("dir"), str):
            recorded_dirs.add(cell["dir"])
    cells_root = root / "cells"
    if os.path.isdir(cells_root) and not os.path.islink(cells_root):
        for entry in sorted(os.listdir(cells_root)):
            if f"cells/{entry}" not in recorded_dirs:
                result.add(f"cells/{entry}", "a cell directory cells.json does not record as sealed")
    if result.ok:
        from .report import render_markdown
        expected = render_markdown(matrix, nodes, cells_json)
        if (root / "report.md").read_text(encoding="utf-8", errors="replace") != expected:
            result.add("report.md", "does not match the report rendered from cells.json")


def _check_cell(root: Path, cell: dict[str, Any], i: int, result: verify_mod.VerifyResult) -> None:
    cid = cell.get("id")
    label = f"cell {cid} ({cell.get('protocol')} on {cell.get('node')})"
    status = cell.get("status")
    if status not in _CELL_STATUSES:
        result.add("cells.json", f"cells[{i}] ({cid}): status {status!r} is not one of "
                                 f"{list(_CELL_STATUSES)}")
        return
    expected_dir = f"cells/{cid}"
    if status == "failed":
        if not isinstance(cell.get("reason"), str) or not cell["reason"]:
            result.add("cells.json", f"{label}: failed without a named reason")
        if cell.get("dir") is not None or os.path.lexists(root / expected_dir):
            result.add(expected_dir, f"{label}: failed cell has evidence on disk")
        return
    if cell.get("dir") != expected_dir:
        result.add("cells.json", f"{label}: dir {cell.get('dir')!r}, expected {expected_dir!r}")
        return
    sub = verify_mod.verify(root / expected_dir)  # the normal verify, recompute included
    for p in sub.problems:
        where = expected_dir if p.path == "." else f"{expected_dir}/{p.path}"
        result.add(where, f"{label}: {p.message}")
    if not sub.ok:
        return
    if sub.manifest_sha != cell.get("manifest_sha256"):
        result.add(f"{expected_dir}/manifest.json", f"{label}: manifest SHA-256 "
                   f"{sub.manifest_sha}, cells.json records {cell.get('manifest_sha256')}")
    try:
        stats = parse_json((root / expected_dir / "stats.json").read_bytes())
    except (OSError, ValueError) as exc:
        result.add(f"{expected_dir}/stats.json", f"{label}: unreadable: {exc}")
        return
    if cell_summary(stats) != cell.get("summary"):
        result.add("cells.json", f"{label}: summary does not match the one recomputed from "
                                 f"{expected_dir}/stats.json")
    pinned, ran = cell.get("pinned_node_id"), cell.get("ran_on_node_id")
    if pinned != ran:
        result.add("cells.json", f"{label}: ran on node {ran}, pinned to {pinned}")
    for arm, seen in (cell.get("arms_on_node") or {}).items():
        if any(node != pinned for node in seen):
            result.add("cells.json", f"{label}: arm {arm} started on {seen}, not only on {pinned}")
