"""Verify matrix evidence, after the normal verify has re-hashed every file (cells' included):
each sealed cell is nested evidence that verify checks whole (`nested`); `recompute` checks the
records against the cells: each row of cells.json from its cell's stats.json, each cell's
manifest SHA-256, the nodes each cell and arm ran on, and report.md re-rendered.

Never raises on hostile input: every finding is a `result.add(path, message)` naming its cell.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ...evidence import check_rel_path, parse_json
from .summary import cell_summary

REQUIRED = ("protocol.json", "protocol.toml", "environment.json", "nodes.json", "cells.json",
            "report.md")
_CELL_STATUSES = ("sealed", "failed")


def _cells(root: Path) -> list[dict[str, Any]] | None:
    try:
        doc = parse_json((Path(root) / "cells.json").read_bytes())
    except (OSError, ValueError):
        return None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        return None
    return cells


def nested(root: Path) -> list[str]:
    """The sealed cells' directories (cells/<id>), each verified whole by the normal verify."""
    out = []
    for cell in _cells(root) or []:
        rel = f"cells/{cell.get('id')}"
        if cell.get("status") == "sealed" and cell.get("dir") == rel and check_rel_path(rel) is None \
                and os.path.isdir(Path(root) / rel) and not os.path.islink(Path(root) / rel):
            out.append(rel)
    return out


def recompute(root: Path, result: Any) -> None:
    """Every way cells.json, nodes.json or report.md disagree with the stored cells."""
    root = Path(root)
    try:
        matrix = parse_json((root / "protocol.json").read_bytes())
        cells_json = parse_json((root / "cells.json").read_bytes())
        nodes = parse_json((root / "nodes.json").read_bytes())
    except (OSError, ValueError) as exc:
        result.add("cells.json", f"cannot read the matrix records: {exc}")
        return
    cells = _cells(root)
    if cells is None or not isinstance(nodes, dict) or not isinstance(matrix, dict):
        result.add("cells.json", "cells: expected a list of cell records")
        return
    recorded = set()
    for i, cell in enumerate(cells):
        _check_cell(root, cell, i, result)
        if cell.get("status") == "sealed":
            recorded.add(f"cells/{cell.get('id')}")
    cells_root = root / "cells"
    if os.path.isdir(cells_root) and not os.path.islink(cells_root):
        for entry in sorted(os.listdir(cells_root)):
            if f"cells/{entry}" not in recorded:
                result.add(f"cells/{entry}", "a cell directory cells.json does not record as sealed")
    if result.ok:
        from .report import render_markdown
        expected = render_markdown(matrix, nodes, cells_json)
        if (root / "report.md").read_text(encoding="utf-8", errors="replace") != expected:
            result.add("report.md", "does not match the report rendered from cells.json")


def _check_cell(root: Path, cell: dict[str, Any], i: int, result: Any) -> None:
    cid = cell.get("id")
    label = f"cell {cid} ({cell.get('protocol')} on {cell.get('node')})"
    status = cell.get("status")
    expected_dir = f"cells/{cid}"
    if status not in _CELL_STATUSES or not isinstance(cid, str) or check_rel_path(expected_dir):
        result.add("cells.json", f"cells[{i}]: id {cid!r} / status {status!r} is not a cell "
                                 f"record (status one of {list(_CELL_STATUSES)})")
        return
    if status == "failed":
        if not isinstance(cell.get("reason"), str) or not cell["reason"]:
            result.add("cells.json", f"{label}: failed without a named reason")
        if cell.get("dir") is not None or os.path.lexists(root / expected_dir):
            result.add(expected_dir, f"{label}: a failed cell has evidence on disk")
        return
    if cell.get("dir") != expected_dir or not os.path.isdir(root / expected_dir):
        result.add("cells.json", f"{label}: dir {cell.get('dir')!r}, expected {expected_dir!r} on disk")
        return
    try:
        manifest = (root / expected_dir / "manifest.json").read_bytes()
        stats = parse_json((root / expected_dir / "stats.json").read_bytes())
    except (OSError, ValueError) as exc:
        result.add(expected_dir, f"{label}: unreadable: {exc}")
        return
    sha = hashlib.sha256(manifest).hexdigest()
    if sha != cell.get("manifest_sha256"):
        result.add(f"{expected_dir}/manifest.json", f"{label}: manifest SHA-256 {sha}, cells.json "
                                                    f"records {cell.get('manifest_sha256')}")
    if not isinstance(stats, dict) or cell_summary(stats) != cell.get("summary"):
        result.add("cells.json", f"{label}: summary does not match the one recomputed from "
                                 f"{expected_dir}/stats.json")
    pinned, ran = cell.get("pinned_node_id"), cell.get("ran_on_node_id")
    if pinned != ran:
        result.add("cells.json", f"{label}: ran on node {ran}, pinned to {pinned}")
    arms = cell.get("arms_on_node")
    for arm, seen in (arms.items() if isinstance(arms, dict) else ()):
        if not isinstance(seen, list) or any(node != pinned for node in seen):
            result.add("cells.json", f"{label}: arm {arm} started on {seen}, not only on {pinned}")
