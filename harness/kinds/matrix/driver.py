"""The matrix driver: plan cells (protocol x host), run them on an executor, verify and store each
returned cell, and seal the matrix with the one evidence writer.

Matrix evidence (`<stamp>-<matrix name>/`):
    matrix.toml            the matrix file as given (secret-named [env] values redacted)
    matrix.json            the resolved matrix protocol, executor, driver, selection notes
    nodes.json             each host: Ray node id, address, hostname, resources, labels, and the
                           identity its cells reported (host, CPU, GPU, driver)
    cells.json             one record per cell: status (sealed | failed), reason, pinned and
                           actual node ids, the node each arm started on, the cell manifest's
                           SHA-256 and the cell's row of the verdict table (summary.py)
    cells/<cell id>/...    each sealed cell's evidence exactly as its node sealed it
    report.md              the matrix table (report.py)
The matrix manifest lists every file above, the cells' own manifest.json files included, so
the matrix id covers each cell's id. A cell that fails (its run failed, its node was lost, its
returned evidence did not verify) is recorded with its reason and the rest still seals.
"""
from __future__ import annotations

import platform
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ... import protocol as protocol_mod
from ...errors import QualifyError, UsageError
from ...evidence import EvidenceWriter, parse_json, tool_version
from .cell import CellSpec, unpack
from .executors import Gap, Node, Selection
from .protocol import MatrixProtocol
from .summary import cell_summary, response_notes

CELLS_SCHEMA = "dflash-qualify.matrix-cells"
# Version history:
#   1: first version: cells [{id, protocol, node, status, reason, dir, pinned_node_id,
#      ran_on_node_id, arms_on_node, ray_env_removed, identity, manifest_sha256, summary}]
CELLS_VERSION = 1
RUN_KINDS = ("bracket", "compare")   # what a cell runs through the run flow today

Event = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class MatrixOutcome:
    """A sealed matrix: where it is, its id, and each cell's record."""

    path: Path
    manifest_sha256: str
    cells: list[dict[str, Any]]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.cells if c["status"] != "sealed"]


def cell_id(protocol_name: str, node: str) -> str:
    """A cell's id and directory name: `<protocol>--<node>`."""
    return f"{protocol_name}--{node}"


def load_protocols(matrix: MatrixProtocol) -> list[Any]:
    """Load every cell protocol on the driver first: a user error stops the matrix before any
    host runs anything (UsageError naming the matrix file, the entry and the protocol's own
    error)."""
    loaded, seen = [], {}
    for i, spec in enumerate(matrix.protocol_paths):
        try:
            lp = protocol_mod.load(spec, warmups=matrix.warmups, measured=matrix.measured)
        except UsageError as exc:
            raise UsageError(f"protocols[{i}] = {matrix.protocols[i]!r}: {exc}",
                             file=matrix.source_file) from None
        if lp.resolved["kind"] not in RUN_KINDS:
            raise UsageError("a matrix cell runs a bracket or compare protocol",
                             file=matrix.source_file, field=f"protocols[{i}]",
                             expected=" or ".join(RUN_KINDS), got=lp.resolved["kind"])
        name = lp.resolved["name"]
        if name in seen:
            raise UsageError(f"protocol name {name!r} appears twice (also protocols[{seen[name]}])",
                             file=matrix.source_file, field=f"protocols[{i}]",
                             expected="protocols with distinct names", got=matrix.protocols[i])
        seen[name] = i
        loaded.append(lp)
    return loaded


def run_matrix(matrix: MatrixProtocol, executor: Any, out_root: str | Path, *, invocation: str,
               on_event: Event | None = None) -> MatrixOutcome:
    """Run every cell of `matrix` on `executor`, store the verified cells, seal the matrix.

    Args:
        matrix: a validated MatrixProtocol.
        executor: executors.LocalExecutor or RayExecutor (select, run, close).
        out_root: evidence root; the matrix directory is <root>/<stamp>-<matrix name>.
        invocation: the command line that reproduces the matrix (recorded in matrix.json).
        on_event: progress callback (event name, details), for the CLI.
    Returns:
        MatrixOutcome of the sealed matrix (cells failed or not).
    Raises:
        UsageError before anything runs (a bad cell protocol); RunFailed if interrupted (the
        matrix directory is left incomplete with the reason).
    """
    from ... import environment
    from ...runner import failures_leave_incomplete
    from .report import render_markdown

    emit = on_event or (lambda name, details: None)
    loaded = load_protocols(matrix)
    selection: Selection = executor.select(matrix)
    specs, planned = _plan(loaded, selection, invocation, matrix.env)
    emit("planned", {"cells": len(planned), "nodes": [n.name for n in selection.nodes],
                     "gaps": [g.reason for g in selection.gaps]})
    writer = EvidenceWriter.create(Path(out_root), matrix.name)
    partial = str(writer.path)
    secrets = sorted((v for k, v in matrix.env if environment.is_secret_name(k) and len(v) >= 4),
                     key=len, reverse=True)
    identities: dict[str, dict[str, Any]] = {}
    with failures_leave_incomplete("matrix", writer, partial, lambda: None):
        try:
            writer.write_bytes("matrix.toml", environment.redact_bytes(matrix.source_bytes, secrets))
            for result in executor.run(matrix, specs, emit):
                record = planned[result["cell_id"]]
                _store(writer, record, result)
                if result.get("node"):
                    identities.setdefault(record["node"], result["node"])
                emit("cell_end", {"cell": record["id"], "status": record["status"],
                                  "reason": record["reason"],
                                  "verdict": (record["summary"] or {}).get("verdict")})
        finally:
            executor.close()
        for record in planned.values():  # a cell the executor never answered for
            if record["status"] == "planned":
                record.update(status="failed", reason="the executor returned no result for it")
        cells = [planned[k] for k in sorted(planned)]
        matrix_json = {**_redacted(matrix.to_json(), environment),
                       "executor": executor.name, "invocation": invocation,
                       "notes": list(selection.notes),
                       "driver": {"host": socket.gethostname(), "tool_version": tool_version(),
                                  "python": platform.python_version()}}
        nodes_json = {"nodes": [dict(n.to_json(), identity=identities.get(n.name),
                                     lost=any(c["node"] == n.name and
                                              "lost" in str(c.get("reason") or "") for c in cells))
                                for n in selection.nodes],
                      "gaps": [{"name": g.name, "reason": g.reason} for g in selection.gaps]}
        cells_json = {"schema": CELLS_SCHEMA, "version": CELLS_VERSION, "cells": cells}
        writer.write_json("matrix.json", matrix_json)
        writer.write_json("nodes.json", nodes_json)
        writer.write_json("cells.json", cells_json)
        writer.write_text("report.md", render_markdown(matrix_json, nodes_json, cells_json))
        path, sha = writer.seal()
    return MatrixOutcome(Path(path), sha, cells)


def _redacted(matrix_json: dict[str, Any], environment: Any) -> dict[str, Any]:
    out = dict(matrix_json)
    out["env"] = environment.redact_env(dict(matrix_json.get("env") or {}))
    return out


def _plan(loaded: list[Any], selection: Selection, invocation: str,
          env: tuple[tuple[str, str], ...]) -> tuple[list[CellSpec], dict[str, dict[str, Any]]]:
    """Cell specs to run (protocol x node) and a record per cell, the gaps already failed."""
    specs: list[CellSpec] = []
    planned: dict[str, dict[str, Any]] = {}
    for lp in loaded:
        name = lp.resolved["name"]
        for node in selection.nodes:
            cid = cell_id(name, node.name)
            specs.append(CellSpec(cid, name, lp, node.name, node.node_id, invocation, env))
            planned[cid] = _record(cid, name, node, "planned", None)
        for gap in selection.gaps:
            cid = cell_id(name, gap.name)
            planned[cid] = _record(cid, name, gap, "failed", gap.reason)
    return specs, planned


def _record(cid: str, protocol_name: str, where: Node | Gap, status: str,
            reason: str | None) -> dict[str, Any]:
    return {"id": cid, "protocol": protocol_name, "node": where.name, "status": status,
            "reason": reason, "dir": None,
            "pinned_node_id": where.node_id if isinstance(where, Node) else None,
            "ran_on_node_id": None, "arms_on_node": {}, "ray_env_removed": [], "identity": None,
            "manifest_sha256": None, "summary": None}


def _store(writer: EvidenceWriter, record: dict[str, Any], result: dict[str, Any]) -> None:
    """Verify a returned cell with the normal verify and store it under cells/<id>/; or record
    why the cell failed. Never raises for a bad cell: the rest of the matrix still seals."""
    record["identity"] = result.get("node")
    record["ran_on_node_id"] = (result.get("node") or {}).get("ray_node_id")
    record["arms_on_node"] = {k: list(v) for k, v in (result.get("arms_on_node") or {}).items()}
    record["ray_env_removed"] = list(result.get("ray_env_removed") or [])
    if not result.get("ok"):
        record.update(status="failed", reason=str(result.get("reason") or "no reason given"))
        return
    try:
        files = unpack(result.get("evidence"), what=f"cell {record['id']}")
        manifest_sha, summary = _verified(record["id"], files)
    except QualifyError as exc:
        record.update(status="failed", reason=f"evidence returned by node {record['node']} "
                                              f"rejected: {exc}")
        return
    if manifest_sha != result.get("manifest_sha256"):
        record.update(status="failed", reason=f"evidence returned by node {record['node']} has "
                                              f"manifest {manifest_sha}, the node reported "
                                              f"{result.get('manifest_sha256')}")
        return
    rel_dir = f"cells/{record['id']}"
    for rel, data in sorted(files.items()):
        writer.write_bytes(f"{rel_dir}/{rel}", data)
    record.update(status="sealed", dir=rel_dir, manifest_sha256=manifest_sha, summary=summary)


def _verified(cid: str, files: dict[str, bytes]) -> tuple[str, dict[str, Any]]:
    """(manifest SHA-256, table row) of a cell's files after the normal verify passes on a
    scratch copy; UsageError naming the first problem otherwise."""
    from ...verify import verify
    with tempfile.TemporaryDirectory(prefix="dq-matrix-cell-") as tmp:
        root = Path(tmp) / cid
        for rel, data in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        result = verify(root)
        if not result.ok:
            raise UsageError(f"it does not verify: {result.problems[0]}"
                             + (f" (and {len(result.problems) - 1} more)"
                                if len(result.problems) > 1 else ""))
        stats = parse_json(files["stats.json"])
        return str(result.manifest_sha), cell_summary(stats)

