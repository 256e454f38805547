"""The matrix kind's steps: plan cells (protocol x host), run them on an executor, verify and store
each returned cell, then the records and the table; sealed by the one sealing path.

Matrix evidence (`<stamp>-<matrix name>/`), beside what the sealing path writes for every kind
(protocol.json: the resolved matrix; protocol.toml: the file; environment.json: the driver):
    nodes.json             each host: Ray node id, address, hostname, resources, labels, and the
                           identity its cells reported (host, CPU, GPU, driver); the gaps
    cells.json             executor, selection notes, and one record per cell: status (sealed |
                           failed), reason, pinned and actual node ids, the node each arm started
                           on, the cell manifest's SHA-256 and the cell's row of the table
    cells/<cell id>/...    each sealed cell's evidence exactly as its node sealed it
    report.md              the matrix table (report.py)
The matrix manifest lists every file, the cells' own manifest.json files included, so the matrix
id covers each cell's id. A cell that fails (its run failed, its node was lost, its returned
evidence did not verify) is recorded with its reason and the rest still seals.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from ... import protocol as protocol_mod
from ...errors import QualifyError, RunFailed, UsageError
from ...evidence import parse_json
from .cell import CellSpec, unpack
from .executors import Gap, LocalExecutor, Node, Selection
from .protocol import MatrixProtocol
from .summary import cell_summary

CELLS_SCHEMA = "dflash-qualify.matrix-cells"
# Version history:
#   1: first version: executor, notes, cells [{id, protocol, node, status, reason, dir,
#      pinned_node_id, ran_on_node_id, arms_on_node, ray_env_removed, identity,
#      manifest_sha256, summary}]
CELLS_VERSION = 1
CELL_COMMAND = "run"   # a cell runs any kind that `dflash-qualify run` runs (bracket, compare)

Event = Callable[[str, dict[str, Any]], None]


def cell_id(protocol_name: str, node: str) -> str:
    """A cell's id and directory name: `<protocol>--<node>`."""
    return f"{protocol_name}--{node}"


def load_protocols(matrix: MatrixProtocol, registry: Mapping[str, Any]) -> list[Any]:
    """Every cell protocol loaded through its kind's schema, on the driver, before anything runs.

    Raises:
        UsageError naming the matrix file, the entry and the protocol's own error; or a kind
        that `dflash-qualify run` does not run; or two protocols with one name.
    """
    loaded, seen = [], {}
    for i, spec in enumerate(matrix.protocol_paths):
        where = f"protocols[{i}]"
        try:
            document = protocol_mod.read_document(spec)
            named = document.doc.get("kind")
            kind = registry.get(named) if isinstance(named, str) else None
            if kind is None or kind.command != CELL_COMMAND or kind.schema is None:
                runnable = [k.name for k in registry.values() if k.command == CELL_COMMAND]
                raise UsageError("a matrix cell runs a protocol that `dflash-qualify run` runs",
                                 file=matrix.source_file, field=where,
                                 expected=" | ".join(runnable), got=named)
            lp = kind.schema(document, warmups=matrix.warmups, measured=matrix.measured)
        except UsageError as exc:
            if exc.file == matrix.source_file:
                raise
            raise UsageError(f"{where} = {matrix.protocols[i]!r}: {exc}",
                             file=matrix.source_file) from None
        name = lp.resolved["name"]
        if name in seen:
            raise UsageError(f"protocol name {name!r} appears twice (also protocols[{seen[name]}])",
                             file=matrix.source_file, field=where,
                             expected="protocols with distinct names", got=matrix.protocols[i])
        seen[name] = i
        loaded.append(lp)
    return loaded


# ---------------------------------------------------------------------- the kind's steps

def run_cells(session: Any) -> dict[str, dict[str, Any]]:
    """Run every cell on the executor (Session option `executor`, default local) and store each
    verified cell under cells/<id>/; no arms of its own (each cell records its arms)."""
    matrix = MatrixProtocol.from_json(session.protocol)
    executor = session.option("executor") or LocalExecutor()
    emit: Event = session.option("on_event") or (lambda name, details: None)
    registry = dict(session.registry)
    # the normal verify (harness.verify.verify), handed in by the caller: it consults the kind
    # registry, which registers this kind, so importing it here would close an import cycle
    verify_dir = session.option("verify")
    if verify_dir is None:
        raise RunFailed("the matrix flow needs options['verify'] (harness.verify.verify) to "
                        "re-verify each returned cell")
    loaded = session.option("cells") or load_protocols(matrix, registry)
    session.on_abandon.append(executor.close)  # interrupted: no cell left running
    try:
        selection: Selection = executor.select(matrix)
        specs, planned = _plan(loaded, selection, session.invocation, matrix.env, registry)
        emit("planned", {"cells": len(planned), "nodes": [n.name for n in selection.nodes],
                         "gaps": [g.reason for g in selection.gaps]})
        identities: dict[str, dict[str, Any]] = {}
        for result in executor.run(matrix, specs, emit):
            record = planned[result["cell_id"]]
            _store(session.writer, record, result, verify_dir)
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
    session.state.update(executor=executor.name, selection=selection, planned=planned,
                         identities=identities)
    return {}


def analyze_cells(session: Any) -> dict[str, Any]:
    """nodes.json and cells.json from what run_cells gathered; returns both (the results)."""
    selection: Selection = session.state["selection"]
    cells = [session.state["planned"][k] for k in sorted(session.state["planned"])]
    identities = session.state["identities"]
    nodes_json = {"nodes": [dict(n.to_json(), identity=identities.get(n.name),
                                 lost=any(c["node"] == n.name and
                                          str(c.get("reason") or "").startswith(f"node {n.name} lost")
                                          for c in cells))
                            for n in selection.nodes],
                  "gaps": [{"name": g.name, "reason": g.reason} for g in selection.gaps]}
    cells_json = {"schema": CELLS_SCHEMA, "version": CELLS_VERSION,
                  "executor": session.state["executor"], "notes": list(selection.notes),
                  "cells": cells}
    session.writer.write_json("nodes.json", nodes_json)
    session.writer.write_json("cells.json", cells_json)
    return {"nodes": nodes_json, "cells": cells_json}


def render_report(session: Any, results: dict[str, Any]) -> str:
    """report.md: the matrix table from the stored protocol and the records."""
    from .report import render_markdown
    return render_markdown(session.stored, results["nodes"], results["cells"])


def qualified(results: dict[str, Any]) -> bool:
    """True when every cell sealed and every cell's own verdict qualified."""
    cells = results["cells"]["cells"]
    return bool(cells) and all(c["status"] == "sealed" and (c["summary"] or {}).get("qualified")
                               for c in cells)


# ---------------------------------------------------------------------- cells

def _plan(loaded: list[Any], selection: Selection, invocation: str,
          env: tuple[tuple[str, str], ...],
          registry: Mapping[str, Any]) -> tuple[list[CellSpec], dict[str, dict[str, Any]]]:
    """Cell specs to run (protocol x node) and a record per cell, the gaps already failed."""
    specs: list[CellSpec] = []
    planned: dict[str, dict[str, Any]] = {}
    for lp in loaded:
        name = lp.resolved["name"]
        for node in selection.nodes:
            cid = cell_id(name, node.name)
            specs.append(CellSpec(cid, name, lp, node.name, node.node_id, invocation, env,
                                  registry))
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


def _store(writer: Any, record: dict[str, Any], result: dict[str, Any],
           verify_dir: Callable[[Path], Any]) -> None:
    """Verify a returned cell with the normal verify and store it under cells/<id>/; or record
    why the cell failed. Never raises for a bad cell: the rest of the matrix still seals."""
    record["identity"] = result.get("node")
    record["ran_on_node_id"] = (result.get("node") or {}).get("ray_node_id")
    record["arms_on_node"] = {k: list(v) for k, v in (result.get("arms_on_node") or {}).items()}
    record["ray_env_removed"] = list(result.get("ray_env_removed") or [])
    if not result.get("ok"):
        record.update(status="failed", reason=str(result.get("reason") or "no reason given"))
        return
    rejected = f"evidence returned by node {record['node']} rejected"
    try:
        files = unpack(result.get("evidence"), what=f"cell {record['id']}")
        manifest_sha, summary = _verified(record["id"], files, verify_dir)
    except QualifyError as exc:
        record.update(status="failed", reason=f"{rejected}: {exc}")
        return
    if manifest_sha != result.get("manifest_sha256"):
        record.update(status="failed", reason=f"{rejected}: its manifest is {manifest_sha}, the "
                                              f"node reported {result.get('manifest_sha256')}")
        return
    # the writer scrubs secrets from every byte: a cell holding one would no longer match its
    # own manifest, so it is refused whole rather than stored altered
    leaking = sorted(rel for rel, data in files.items() if writer.redactor.data(data) != data)
    if leaking:
        record.update(status="failed", reason=f"{rejected}: {leaking[0]} holds a value this "
                                              f"driver treats as a secret; not stored")
        return
    rel_dir = f"cells/{record['id']}"
    for rel, data in sorted(files.items()):
        writer.write_bytes(f"{rel_dir}/{rel}", data)
    record.update(status="sealed", dir=rel_dir, manifest_sha256=manifest_sha, summary=summary)


def _verified(cid: str, files: dict[str, bytes],
              verify_dir: Callable[[Path], Any]) -> tuple[str, dict[str, Any]]:
    """(manifest SHA-256, table row) of a cell's files after the normal verify passes on a
    scratch copy; UsageError naming the first problem otherwise."""
    if "stats.json" not in files:
        raise UsageError("it has no stats.json: a matrix cell must be a bracket or compare run")
    with tempfile.TemporaryDirectory(prefix="dq-matrix-cell-") as tmp:
        root = Path(tmp) / cid
        for rel, data in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        result = verify_dir(root)
        if not result.ok:
            raise UsageError(f"it does not verify: {result.problems[0]}"
                             + (f" (and {len(result.problems) - 1} more)"
                                if len(result.problems) > 1 else ""))
        try:
            stats = parse_json(files["stats.json"])
        except ValueError as exc:
            raise UsageError(f"stats.json is not valid JSON ({exc})") from None
        return str(result.manifest_sha), cell_summary(stats)
