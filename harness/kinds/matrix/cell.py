"""One matrix cell on the node that runs it: run a whole protocol, seal it there, return it as bytes.

A cell is one protocol on one host. `run_cell` is what a Ray task (or the local executor)
calls: it runs every arm of the protocol in this one process through `run_protocol` (so a
bracket's arms never span nodes), records the node's identity and which node each arm started
on, and returns the sealed evidence directory as an uncompressed tar (`pack_dir`). The driver
reads it back with `unpack` (regular files only, evidence-relative paths only) and verifies it.
Nothing here prints; a failed run becomes a result with a named reason, never an exception.
"""
from __future__ import annotations

import contextlib
import io
import os
import platform
import socket
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ...errors import QualifyError, RunFailed, UsageError
from ...evidence import check_rel_path
from ...protocol import LoadedProtocol

MAX_CELL_BYTES = 512 << 20    # a cell's evidence larger than this is not ours
MAX_CELL_FILES = 100_000
# variables a Ray worker sets for its tasks when the node's environment leaves them unset
# (ray._private.utils.set_omp_num_threads_if_unset: OMP_NUM_THREADS = the task's CPUs, at least
# 1); a cell removes them so its arms see what `dflash-qualify run` on that host would see
RAY_TASK_DEFAULTS = ("OMP_NUM_THREADS",)


@dataclass(frozen=True)
class CellSpec:
    """What travels to the node: the cell's name, the resolved protocol and where it is pinned."""

    cell_id: str
    protocol_name: str
    loaded: LoadedProtocol        # resolved protocol (prompts inlined, per-arm env) + source bytes
    node: str                     # the node's name in the matrix ("local" for the local executor)
    node_id: str | None           # the Ray node id the cell is pinned to; None locally
    invocation: str
    task_env: tuple[tuple[str, str], ...] = ()   # the matrix [env]: the task's env on the node
    registry: Mapping[str, Any] = field(default_factory=dict)  # kind name -> Kind (travels)


def run_protocol(spec: CellSpec, out_root: Path, *,
                 on_event: Callable[[Any], None] | None = None) -> Any:
    """The one seam to a cell's run flow: its kind from the registry that travelled with the
    cell, through the one sealing path (harness.evidence.seal), exactly as `dflash-qualify run`.

    Returns the Sealed evidence (path, manifest_sha256, qualified); raises RunFailed.
    """
    from ...evidence import seal
    kind = spec.registry[spec.loaded.resolved["kind"]]
    return seal(kind, spec.loaded, out_root, invocation=spec.invocation,
                options={"on_event": on_event}, registry=spec.registry)


def current_node_id() -> str | None:
    """The Ray node id of this process when it runs inside Ray; None otherwise.

    Never imports Ray: the local executor must work without it installed.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - identity is best effort, never a failure
        return None


def node_identity(protocol: dict[str, Any], *, in_ray: bool = True) -> dict[str, Any]:
    """Who ran the cell: Ray node id (None outside a Ray cell), host, CPU, GPU(s) with their
    driver, OS and Python."""
    from ... import environment
    cpu = environment.cpu_info()
    gpu = environment.gpu_info(protocol)
    gpus = (gpu or {}).get("gpus") or []
    return {"ray_node_id": current_node_id() if in_ray else None, "host": socket.gethostname(),
            "cpu_model": cpu.get("model"), "logical_cpus": cpu.get("logical_cpus"),
            "gpus": [{"index": g.get("index"), "name": g.get("name")} for g in gpus],
            "gpu_driver": gpus[0].get("driver_version") if gpus else None,
            "gpu_reason": (gpu or {}).get("reason") if gpu is not None and not gpus else None,
            "os": platform.platform(), "python": platform.python_version(), "pid": os.getpid()}


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Run one cell here; a JSON-ready result plus `evidence` (tar bytes) when it sealed.

    Result keys: cell_id, ok, reason (None when ok), node (node_identity), arms_on_node
    (arm id -> the node id each of its workers started on), manifest_sha256, qualified,
    evidence (bytes or None).
    """
    arms_on_node: dict[str, list[str | None]] = {}
    in_ray = spec.node_id is not None  # a local cell has no Ray identity, even in a Ray driver

    def on_event(event: Any) -> None:
        if getattr(event, "kind", None) == "arm_start":
            arms_on_node.setdefault(event.arm, []).append(current_node_id() if in_ray else None)

    result: dict[str, Any] = {"cell_id": spec.cell_id, "ok": False, "reason": None,
                              "node": None, "arms_on_node": arms_on_node,
                              "manifest_sha256": None, "qualified": None, "evidence": None}
    try:
        with _ray_defaults_removed(spec) as removed, \
                tempfile.TemporaryDirectory(prefix="dq-cell-") as tmp:
            result["ray_env_removed"] = removed
            result["node"] = node_identity(spec.loaded.resolved, in_ray=in_ray)
            outcome = run_protocol(spec, Path(tmp), on_event=on_event)
            result["evidence"] = pack_dir(outcome.path)
        result.update(ok=True, manifest_sha256=outcome.manifest_sha256,
                      qualified=bool(outcome.qualified))
    except RunFailed as exc:
        result["reason"] = f"run failed on {_where(result)}: {exc.reason}"
    except QualifyError as exc:
        result["reason"] = f"run failed on {_where(result)}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a bug on a node still names its cell
        result["reason"] = f"internal error on {_where(result)}: {type(exc).__name__}: {exc}"
    return result


@contextlib.contextmanager
def _ray_defaults_removed(spec: CellSpec) -> Iterator[list[str]]:
    """Inside a Ray task: unset RAY_TASK_DEFAULTS that Ray set (absent from the raylet's own
    environment and from the task env) for the cell's duration; yields the names removed."""
    removed: dict[str, str] = {}
    raylet = os.environ.get("RAY_RAYLET_PID")
    if spec.node_id is not None and current_node_id() is not None and raylet and raylet.isdigit():
        try:
            raw = Path(f"/proc/{raylet}/environ").read_bytes()
            node_env = {item.split(b"=", 1)[0].decode("utf-8", "replace")
                        for item in raw.split(b"\0") if b"=" in item}
        except OSError:
            node_env = None  # not Linux, or not ours to read: leave Ray's values (recorded)
        task_env = {k for k, _ in spec.task_env}
        for name in RAY_TASK_DEFAULTS if node_env is not None else ():
            if name in os.environ and name not in node_env and name not in task_env:
                removed[name] = os.environ.pop(name)
    try:
        yield sorted(removed)
    finally:
        os.environ.update(removed)


def _where(result: dict[str, Any]) -> str:
    node = result.get("node") or {}
    return f"host {node.get('host') or socket.gethostname()}"


# ---------------------------------------------------------------------- evidence as bytes

def pack_dir(directory: Path) -> bytes:
    """The sealed directory's regular files as an uncompressed tar (sorted, no metadata)."""
    directory = Path(directory)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = path.relative_to(directory).as_posix()
            data = path.read_bytes()
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack(data: bytes, *, what: str) -> dict[str, bytes]:
    """Evidence-relative path -> bytes from `pack_dir` output; UsageError naming `what` if the
    tar holds anything but regular files at normalized, non-escaping paths."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_CELL_BYTES:
        raise UsageError(f"{what}: evidence bytes missing or larger than {MAX_CELL_BYTES}")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
            for member in tar:
                if len(files) >= MAX_CELL_FILES:
                    raise UsageError(f"{what}: more than {MAX_CELL_FILES} files")
                problem = check_rel_path(member.name)
                if problem:
                    raise UsageError(f"{what}: path {member.name!r} {problem}")
                if not member.isfile():
                    raise UsageError(f"{what}: {member.name} is not a regular file")
                if member.name in files:
                    raise UsageError(f"{what}: {member.name} appears twice")
                stream = tar.extractfile(member)
                files[member.name] = stream.read() if stream is not None else b""
    except tarfile.TarError as exc:
        raise UsageError(f"{what}: not a readable tar ({exc})") from None
    return files
