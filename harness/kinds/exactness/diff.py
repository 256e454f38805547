"""Trace files (format dflash-qualify.trace/v1): strict loading and the bitwise diff of a
candidate's trace against the q1 oracle's, with the first divergence located.

Records are matched by (tensor name, layer, position): a band step of w tokens is compared
token by token with the oracle's w q1 steps, and its state after the step (KV window,
compressor state, compressed rows) with the oracle's state after the same last position.
The first divergence is the first differing record in the candidate's own order, which is
the order the engine computed them (step, then layer, then tensor).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import QualifyError

TRACE_SCHEMA = "dflash-qualify.trace"
TRACE_VERSION = 1
SCHEMA_ID = "dflash-qualify.trace/v1"
MAX_TRACE_BYTES = 1 << 30  # decompressed; larger is not a trace this tool writes
_DTYPES = {"f32": np.dtype("<f4"), "i32": np.dtype("<i4")}
_HEADER_KEYS = ("schema", "version", "engine", "model", "config_hash", "prompt_sha256", "prompt_tokens",
                "request", "level")

VERDICT_IDENTICAL = "bitwise identical"
VERDICT_TENSORS = "responses identical but tensors differ"
VERDICT_RESPONSES = "responses differ"


class TraceError(QualifyError):
    """A trace file that cannot be compared (corrupt, truncated, wrong schema, mismatched)."""

    exit_code = 1


@dataclass
class Trace:
    """One loaded trace: header, steps, tensors keyed by (name, layer, pos), in file order."""

    path: str
    header: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)
    index: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    commit: dict[str, Any] | None = None


def load_trace(path: Path | str, data: bytes | None = None) -> Trace:
    """Read and check a trace file (gzip JSON lines). Raises TraceError with a clear message."""
    name = str(path)
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise TraceError(f"trace {name}: cannot read: {exc.strerror}") from None
    raw = _gunzip(data, name)
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    else:
        raise TraceError(f"trace {name}: truncated: the last line has no newline")
    records = []
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TraceError(f"trace {name}: corrupted: line {i} is not JSON") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
            raise TraceError(f"trace {name}: corrupted: line {i} is not a trace record")
        records.append(rec)
    if not records or records[0].get("type") != "header":
        raise TraceError(f"trace {name}: the first record is not a header")
    head = records[0]
    if head.get("schema") != TRACE_SCHEMA:
        raise TraceError(f"trace {name}: schema {head.get('schema')!r} is not {TRACE_SCHEMA!r}")
    if head.get("version") != TRACE_VERSION or isinstance(head.get("version"), bool):
        raise TraceError(f"trace {name}: trace format version {head.get('version')!r} is not supported "
                         f"(this tool reads {SCHEMA_ID} only)")
    missing = [k for k in _HEADER_KEYS if k not in head]
    if missing:
        raise TraceError(f"trace {name}: header lacks {', '.join(missing)}")
    if head["level"] not in ("raw", "digest"):
        raise TraceError(f"trace {name}: header level {head['level']!r} is not raw or digest")
    end = records[-1]
    if end.get("type") != "end":
        raise TraceError(f"trace {name}: truncated: no end record after line {len(records)}")
    if end.get("records") != len(records):
        raise TraceError(f"trace {name}: truncated or spliced: the end record counts {end.get('records')!r} "
                         f"records, the file holds {len(records)}")
    tr = Trace(name, head)
    for i, rec in enumerate(records[1:-1], 2):
        _add(tr, rec, f"trace {name}: line {i}")
    if tr.commit is None:
        raise TraceError(f"trace {name}: no commit record")
    return tr


def _gunzip(data: bytes, name: str) -> bytes:
    """One complete gzip member, at most MAX_TRACE_BYTES decompressed (no gzip bombs)."""
    d = zlib.decompressobj(wbits=31)
    try:
        raw = d.decompress(data, MAX_TRACE_BYTES + 1)
    except zlib.error as exc:
        raise TraceError(f"trace {name}: corrupted: not a gzip stream ({exc})") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(f"trace {name}: more than {MAX_TRACE_BYTES} bytes decompressed; not a trace this tool writes")
    if not d.eof:
        raise TraceError(f"trace {name}: truncated: the gzip stream ends early")
    if d.unused_data:
        raise TraceError(f"trace {name}: corrupted: bytes after the gzip stream")
    return raw


def _add(tr: Trace, rec: dict[str, Any], where: str) -> None:
    kind = rec["type"]
    if kind == "step":
        for k in ("step", "pos", "width"):
            if not isinstance(rec.get(k), int) or isinstance(rec.get(k), bool):
                raise TraceError(f"{where}: step record: {k} must be an integer")
        tr.steps.append(rec)
    elif kind == "tensor":
        for k, t in (("name", str), ("pos", int), ("step", int), ("sha256", str), ("dtype", str), ("shape", list)):
            if not isinstance(rec.get(k), t):
                raise TraceError(f"{where}: tensor record: {k} missing or of the wrong type")
        if rec["dtype"] not in _DTYPES:
            raise TraceError(f"{where}: tensor dtype {rec['dtype']!r} is not f32 or i32")
        if tr.header["level"] == "raw":
            try:
                payload = base64.b64decode(rec.get("data_b64", ""), validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise TraceError(f"{where}: tensor {rec['name']}: data_b64 is not base64") from None
            n = int(np.prod(rec["shape"], dtype=np.int64)) * 4
            if len(payload) != n:
                raise TraceError(f"{where}: tensor {rec['name']}: {len(payload)} bytes, shape {rec['shape']} needs {n}")
            if hashlib.sha256(payload).hexdigest() != rec["sha256"]:
                raise TraceError(f"{where}: tensor {rec['name']}: data does not match its sha256 (corrupted)")
            rec["_data"] = payload
        key = (rec["name"], rec.get("layer"), rec["pos"])
        if key in tr.index:
            raise TraceError(f"{where}: tensor {rec['name']} layer {rec.get('layer')} pos {rec['pos']} appears twice")
        tr.index[key] = rec
        tr.tensors.append(rec)
    elif kind == "snapshot":
        tr.snapshots.append(rec)
    elif kind == "commit":
        if not isinstance(rec.get("tokens"), list):
            raise TraceError(f"{where}: commit record without tokens")
        tr.commit = rec
    else:
        raise TraceError(f"{where}: unknown record type {kind!r}")


def ulp_distance(a: float, b: float) -> int:
    """Distance in units in the last place between two float32 values (ordered bit patterns)."""
    ia, ib = (int(np.array([v], dtype="<f4").view("<i4")[0]) for v in (a, b))
    oa = ia if ia >= 0 else -(ia & 0x7FFFFFFF)
    ob = ib if ib >= 0 else -(ib & 0x7FFFFFFF)
    return abs(oa - ob)


def compare_tensor(cand: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any] | None:
    """None when bitwise equal, else {index, candidate, oracle, ulp, differing, elements, reason}."""
    if cand["dtype"] != ref["dtype"] or cand["shape"] != ref["shape"]:
        return {"index": None, "candidate": None, "oracle": None, "ulp": None, "differing": None,
                "elements": None,
                "reason": f"shape/dtype {cand['dtype']}{cand['shape']} vs oracle {ref['dtype']}{ref['shape']}"}
    if cand["sha256"] == ref["sha256"]:
        return None
    if "_data" not in cand or "_data" not in ref:
        return {"index": None, "candidate": None, "oracle": None, "ulp": None, "differing": None,
                "elements": int(np.prod(cand["shape"], dtype=np.int64)),
                "reason": "digest-only trace: SHA-256 differs, values not stored"}
    dt = _DTYPES[cand["dtype"]]
    a = np.frombuffer(cand["_data"], dtype=dt)
    b = np.frombuffer(ref["_data"], dtype=dt)
    diff = np.flatnonzero(a.view("<u4") != b.view("<u4"))
    i = int(diff[0])
    if cand["dtype"] == "f32":
        va, vb = float(a[i]), float(b[i])
        ulp: int | None = ulp_distance(va, vb)
    else:
        va, vb, ulp = int(a[i]), int(b[i]), None
    return {"index": i, "candidate": va, "oracle": vb, "ulp": ulp, "differing": int(diff.size),
            "elements": int(a.size), "reason": None}


def check_same_request(cand: Trace, ref: Trace) -> None:
    """Traces of different prompts, models or trace formats cannot be compared."""
    ch, rh = cand.header, ref.header
    if ch["prompt_sha256"] != rh["prompt_sha256"]:
        raise TraceError(f"traces of different prompts: {cand.path} has prompt SHA-256 {ch['prompt_sha256']}, "
                         f"the oracle {ref.path} {rh['prompt_sha256']}")
    if ch["config_hash"] != rh["config_hash"]:
        raise TraceError(f"traces of different models: config hash {ch['config_hash']} vs oracle {rh['config_hash']}")
    if ch["request"].get("snapshot_at") != rh["request"].get("snapshot_at"):
        raise TraceError(f"traces of different requests: snapshot_at {ch['request'].get('snapshot_at')} "
                         f"vs oracle {rh['request'].get('snapshot_at')}")


def diff_traces(cand: Trace, ref: Trace, request: str) -> dict[str, Any]:
    """Compare every record of one request. Returns {request, tensors, differing_tensors,
    responses_identical, snapshots_identical, first_divergence, missing}."""
    check_same_request(cand, ref)
    steps = {s["step"]: s for s in cand.steps}
    first = None
    differing = 0
    for rec in cand.tensors:
        key = (rec["name"], rec.get("layer"), rec["pos"])
        other = ref.index.get(key)
        if other is None:
            found = {"index": None, "candidate": None, "oracle": None, "ulp": None, "differing": None,
                     "elements": None, "reason": "the oracle trace has no such tensor"}
        else:
            found = compare_tensor(rec, other)
        if found is None:
            continue
        differing += 1
        if first is None:
            st = steps.get(rec["step"], {})
            first = {"request": request, "step": rec["step"], "step_pos": st.get("pos"),
                     "step_width": st.get("width"), "kernel": st.get("kernel"), "pos": rec["pos"],
                     "layer": rec.get("layer"), "tensor": rec["name"], **found}
    cand_keys = {(r["name"], r.get("layer"), r["pos"]) for r in cand.tensors if r["kind"] == "token"}
    ref_keys = {(r["name"], r.get("layer"), r["pos"]) for r in ref.tensors if r["kind"] == "token"}
    missing = sorted(map(str, ref_keys - cand_keys))[:5]
    snaps_c = [(s.get("event"), s.get("pos"), s.get("sha256")) for s in cand.snapshots]
    snaps_r = [(s.get("event"), s.get("pos"), s.get("sha256")) for s in ref.snapshots]
    if first is None and (snaps_c != snaps_r):
        first = {"request": request, "step": None, "pos": None, "layer": None, "tensor": "snapshot",
                 "index": None, "candidate": None, "oracle": None, "ulp": None, "differing": None,
                 "elements": None, "reason": f"snapshot events {snaps_c} vs oracle {snaps_r}"}
    return {"request": request, "tensors": len(cand.tensors), "differing_tensors": differing,
            "missing_tensors": missing,
            "responses_identical": cand.commit["tokens"] == ref.commit["tokens"],
            "snapshots_identical": snaps_c == snaps_r, "first_divergence": first}


def verdict(diffs: list[dict[str, Any]]) -> str:
    """The candidate's verdict over all its requests."""
    if not all(d["responses_identical"] for d in diffs):
        return VERDICT_RESPONSES
    if any(d["differing_tensors"] or d["missing_tensors"] or not d["snapshots_identical"] for d in diffs):
        return VERDICT_TENSORS
    return VERDICT_IDENTICAL
