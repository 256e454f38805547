"""Where matrix cells run: `local` (here, one after another, no Ray) or `ray` (one task per cell).

An executor selects the matrix's hosts (`select`) and runs cell specs (`run`), yielding one
result per cell (cell.run_cell's dict, or a failure naming its reason) as cells finish.

Ray executor: each cell is one Ray task pinned to its node with
NodeAffinitySchedulingStrategy(soft=False) (never moved elsewhere), asking for one unit of the
per-node custom resource `dflash_qualify_cell` (every matrix node is started with exactly 1, so
two cells never run at once on one node, even from two drivers); the driver also keeps at most
one cell in flight per node. The matrix `[env]` is the task's runtime env (`env_vars`); each
arm's own env travels inside the resolved protocol and is applied to that arm's fresh worker
process on the node, as in a local run. No retries: a cell whose node dies fails with a named
reason (a re-run elsewhere would be another experiment). Ray is imported only here, and only
when the ray executor is made.
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ...errors import RunFailed, UsageError
from .cell import CellSpec, run_cell
from .protocol import HostSelector, MatrixProtocol

SLOT = "dflash_qualify_cell"   # per-node custom resource: 1 on every node that runs cells
EXTRA_HINT = "pip install 'dflash-qualify[ray]'"
POLL_S = 2.0                   # how often the driver checks in-flight cells' nodes are alive

Event = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Node:
    """One host of the matrix: its name in cell ids and what Ray says about it."""

    name: str
    node_id: str | None = None
    address: str | None = None
    hostname: str | None = None
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ray_node_id": self.node_id, "address": self.address,
                "hostname": self.hostname, "resources": dict(sorted(self.resources.items())),
                "labels": dict(sorted(self.labels.items()))}


@dataclass(frozen=True)
class Gap:
    """A host the matrix asked for but cannot use: its cells fail with this reason."""

    name: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The hosts a matrix runs on, the gaps, and notes for the record."""

    nodes: tuple[Node, ...]
    gaps: tuple[Gap, ...] = ()
    notes: tuple[str, ...] = ()


def node_name(node_id: str) -> str:
    """A node's name in cell ids: `node-` and the first 12 hex digits of its Ray node id."""
    return f"node-{node_id[:12]}"


@contextlib.contextmanager
def _env_applied(env: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """The matrix [env] set in this process for one local cell, restored afterwards."""
    saved = {k: os.environ.get(k) for k, _ in env}
    os.environ.update(dict(env))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class LocalExecutor:
    """Cells on this machine, one after another, through the same cell path as Ray tasks."""

    name = "local"

    def select(self, matrix: MatrixProtocol) -> Selection:
        notes = ()
        if matrix.hosts:
            notes = (f"hosts {[h.text for h in matrix.hosts]} not applied: the local executor "
                     f"runs every cell on this host",)
        return Selection((Node("local", hostname=socket.gethostname()),), (), notes)

    def run(self, matrix: MatrixProtocol, specs: list[CellSpec],
            on_event: Event) -> Iterator[dict[str, Any]]:
        for spec in specs:
            on_event("cell_start", {"cell": spec.cell_id, "node": spec.node})
            with _env_applied(matrix.env):
                result = run_cell(spec)
            yield result

    def close(self) -> None:
        pass


def import_ray():
    """The ray module, or a UsageError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed: {EXTRA_HINT}",
                         field="--executor", expected="the `ray` extra installed",
                         got="ray") from None
    return ray


class RayExecutor:
    """Cells as Ray tasks, each pinned to its node; at most one cell at a time per node."""

    name = "ray"

    def __init__(self, address: str | None = None, *, local_object_store_bytes: int = 100 << 20) -> None:
        """Connect to the cluster at `address` ("auto", "HOST:PORT", "ray://..."), or start a
        one-node local cluster (num_cpus=1, one cell slot, small object store) when None and
        none is running in this process."""
        self.ray = import_ray()
        self._owns = False
        self._in_flight: dict[Any, CellSpec] = {}
        if not self.ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "logging_level": "WARNING"}
            if address is None:
                kwargs.update(num_cpus=1, resources={SLOT: 1},
                              object_store_memory=local_object_store_bytes)
            try:
                self.ray.init(address=address, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise UsageError(f"cannot connect to the Ray cluster: {exc}",
                                 field="--ray-address", expected="a running cluster's address",
                                 got=address) from None
            self._owns = True

    def close(self) -> None:
        """Cancel cells still in flight (an interrupted matrix leaves none running), then
        disconnect when this executor started or joined the cluster (never when it only used
        a connection that existed before it)."""
        for ref in list(self._in_flight):
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        self._in_flight.clear()
        if self._owns:
            with contextlib.suppress(Exception):
                self.ray.shutdown()
            self._owns = False

    # -------------------------------------------------------------- hosts
    def alive_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def select(self, matrix: MatrixProtocol) -> Selection:
        """Alive nodes chosen by `hosts` (default: every alive node with a cell slot)."""
        nodes: dict[str, Node] = {}
        gaps: list[Gap] = []
        notes: list[str] = []
        alive = self.alive_nodes()

        def as_node(n: dict[str, Any]) -> Node:
            return Node(node_name(n["NodeID"]), n["NodeID"], n.get("NodeManagerAddress"),
                        n.get("NodeManagerHostname"),
                        {k: float(v) for k, v in (n.get("Resources") or {}).items()},
                        {str(k): str(v) for k, v in (n.get("Labels") or {}).items()})

        def slot_ok(n: dict[str, Any]) -> bool:
            return (n.get("Resources") or {}).get(SLOT, 0) >= 1

        if not matrix.hosts:
            for n in alive:
                if slot_ok(n):
                    nodes[n["NodeID"]] = as_node(n)
                else:
                    notes.append(f"node {n['NodeID'][:12]} ({n.get('NodeManagerHostname')}) is "
                                 f"not a matrix host: it has no {SLOT} resource")
            if not nodes:
                gaps.append(Gap("no-host", f"no alive Ray node has a {SLOT} resource (start "
                                           f"each host with --resources='{{\"{SLOT}\": 1}}')"))
        for selector in matrix.hosts:
            matched = [n for n in alive if _matches(selector, n)]
            if not matched:
                gaps.append(Gap(_gap_name(selector), f"no alive Ray node matches hosts entry "
                                                     f"{selector.text!r}"))
                continue
            for n in matched:
                if not slot_ok(n):
                    gaps.append(Gap(node_name(n["NodeID"]),
                                    f"node {n['NodeID'][:12]} matches {selector.text!r} but has no "
                                    f"{SLOT} resource (start it with "
                                    f"--resources='{{\"{SLOT}\": 1}}')"))
                else:
                    nodes[n["NodeID"]] = as_node(n)
        gap_names = {g.name for g in gaps}
        kept = tuple(sorted((v for v in nodes.values() if v.name not in gap_names),
                            key=lambda v: v.name))
        return Selection(kept, tuple(gaps), tuple(notes))

    # -------------------------------------------------------------- cells
    def run(self, matrix: MatrixProtocol, specs: list[CellSpec],
            on_event: Event) -> Iterator[dict[str, Any]]:
        """Run every spec on its pinned node (one at a time per node); yield results as they end."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        ray = self.ray
        queues: dict[str, list[CellSpec]] = {}
        for spec in specs:
            queues.setdefault(str(spec.node_id), []).append(spec)
        task = ray.remote(run_cell)
        in_flight = self._in_flight

        def submit(node_id: str) -> dict[str, Any] | None:
            """Start the node's next cell; a failure result if its node is gone."""
            spec = queues[node_id].pop(0)
            alive = {n["NodeID"]: n for n in self.alive_nodes()}
            if node_id not in alive:
                return _lost(spec, "the node was not alive when the cell was due to start")
            if _device(spec) == "cuda" and (alive[node_id].get("Resources") or {}).get("GPU", 0) < 1:
                return _failed(spec, f"protocol {spec.protocol_name} runs on cuda but node "
                                     f"{spec.node} has no GPU in Ray's resources")
            options: dict[str, Any] = {
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                "resources": {SLOT: 1}, "num_cpus": 0, "max_retries": 0,
                "name": f"dflash-qualify cell {spec.cell_id}"}
            if _device(spec) == "cuda":  # Ray sets CUDA_VISIBLE_DEVICES to the task's GPUs
                options["num_gpus"] = 1
            if matrix.env:
                options["runtime_env"] = {"env_vars": dict(matrix.env)}
            ref = task.options(**options).remote(spec)
            in_flight[ref] = spec
            on_event("cell_start", {"cell": spec.cell_id, "node": spec.node, "node_id": node_id})
            return None

        def start_next(node_id: str) -> list[dict[str, Any]]:
            """Submit the node's next cell; failures for cells that could not start first."""
            failures = []
            while queues.get(node_id):
                failure = submit(node_id)
                if failure is None:
                    break
                failures.append(failure)
            return failures

        try:
            for node_id in list(queues):
                yield from start_next(node_id)
            while in_flight:
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
                finished: list[tuple[CellSpec, dict[str, Any]]] = []
                for ref in ready:
                    spec = in_flight.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        result = _lost(spec, f"{type(exc).__name__}: {_first_line(exc)}")
                    finished.append((spec, _checked(spec, result)))
                if not ready:  # a dead node may take Ray a while to report: look ourselves
                    alive = {n["NodeID"] for n in self.alive_nodes()}
                    for ref, spec in list(in_flight.items()):
                        if spec.node_id not in alive:
                            in_flight.pop(ref)
                            with contextlib.suppress(Exception):
                                ray.cancel(ref, force=True)
                            finished.append((spec, _lost(spec, "the node left the cluster "
                                                               "while the cell ran")))
                for spec, result in finished:
                    yield result
                    yield from start_next(str(spec.node_id))
        except (ray.exceptions.RayError, ConnectionError) as exc:  # the cluster, not one node
            raise RunFailed(f"lost the Ray cluster: {type(exc).__name__}: "
                            f"{_first_line(exc)}") from None


def _device(spec: CellSpec) -> str:
    target = spec.loaded.resolved.get("target") or {}
    return target.get("device") or "cpu"


def _matches(selector: HostSelector, n: dict[str, Any]) -> bool:
    labels = {str(k): str(v) for k, v in (n.get("Labels") or {}).items()}
    return selector.matches(labels, n.get("Resources") or {})


def _gap_name(selector: HostSelector) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in selector.text)
    return f"hosts-{cleaned}"[:64]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "(no message)"


def _lost(spec: CellSpec, why: str) -> dict[str, Any]:
    """A cell whose node failed: the named reason the verdict table shows."""
    return {"cell_id": spec.cell_id, "ok": False,
            "reason": f"node {spec.node} lost: {why}", "node": None, "arms_on_node": {},
            "manifest_sha256": None, "qualified": None, "evidence": None,
            "lost_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _failed(spec: CellSpec, reason: str) -> dict[str, Any]:
    """A cell that could not start on its node, with the reason."""
    return dict(_lost(spec, ""), reason=reason)


def _checked(spec: CellSpec, result: Any) -> dict[str, Any]:
    """A task's result, failed if it is malformed or ran anywhere but the pinned node."""
    if not isinstance(result, dict) or result.get("cell_id") != spec.cell_id:
        return _lost(spec, "the task returned something that is not this cell's result")
    ran = (result.get("node") or {}).get("ray_node_id")
    if result.get("ok") and ran != spec.node_id:
        result = dict(result, ok=False, evidence=None,
                      reason=f"cell ran on node {ran} but was pinned to {spec.node_id}")
    return result


EXECUTORS: dict[str, Callable[..., Any]] = {"local": LocalExecutor, "ray": RayExecutor}
