"""Traced generation: one request with trace capture on, written as a trace file (format v1).

The format (protocols/trace.schema.json, id "dflash-qualify.trace/v1") is gzip-compressed JSON
lines: a header, then per prefill step a `step` record followed by its `tensor` records in
the order the forward pass finished them (per layer: attention state, HC streams after
attention, routes, HC streams after the FFN; then every position's logits), `snapshot`
events, one `commit` record (generated tokens) and an `end` record. Each tensor is kept raw
(base64, little-endian, C order) or as a SHA-256 digest of those bytes; both carry shape and
dtype. Any engine that writes this format can be compared by the harness.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import _core
from .errors import EngineError
from .tokenizer import as_token_array, detokenize, prompt_tokens

SCHEMA = "dflash-qualify.trace"
VERSION = 1  # v1: header/step/tensor/snapshot/commit/end records
LEVELS = ("raw", "digest")
STATE_TENSORS = ("kv_window", "comp_kv", "comp_score", "compressed")
TRACE_KEYS = {"level", "path", "snapshot_at", "perturb"}
PERTURB_KEYS = {"step", "layer", "token", "tensor", "index"}
_DTYPES = {"f": "f32", "i": "i32"}


def prompt_sha256(prompt: Any) -> str:
    """SHA-256 of the prompt as sent: UTF-8 text bytes, or token ids as int32 little-endian."""
    if isinstance(prompt, str):
        return hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    if isinstance(prompt, (bytes, bytearray)):
        return hashlib.sha256(bytes(prompt)).hexdigest()
    return hashlib.sha256(np.asarray(prompt, dtype="<i4").tobytes()).hexdigest()


def check_trace_options(opts: Any) -> dict[str, Any]:
    """Validate a request's `trace` object; returns it normalized (raises EngineError)."""
    if not isinstance(opts, dict):
        raise EngineError("trace must be an object")
    bad = set(opts) - TRACE_KEYS
    if bad:
        raise EngineError(f"unknown trace keys: {', '.join(sorted(bad))}")
    level = opts.get("level", "raw")
    if level not in LEVELS:
        raise EngineError(f"trace.level must be one of {list(LEVELS)}, got {level!r}")
    path = opts.get("path")
    if not isinstance(path, str) or not path:
        raise EngineError("trace.path must be a file path")
    snap = opts.get("snapshot_at")
    if snap is not None and (isinstance(snap, bool) or not isinstance(snap, int) or snap < 1):
        raise EngineError("trace.snapshot_at must be an integer >= 1")
    perturb = opts.get("perturb")
    if perturb is not None:
        if not isinstance(perturb, dict) or set(perturb) - PERTURB_KEYS or not {"step", "tensor", "index"} <= set(perturb):
            raise EngineError("trace.perturb must be {step, layer?, token?, tensor, index}")
    return {"level": level, "path": path, "snapshot_at": snap, "perturb": perturb}


def _tensor_record(rec: tuple, level: str) -> dict[str, Any]:
    name, step, layer, pos, dtype, shape, data = rec
    out: dict[str, Any] = {"type": "tensor", "step": int(step), "layer": None if layer < 0 else int(layer),
                           "pos": int(pos), "name": name,
                           "kind": "state" if name in STATE_TENSORS else "token",
                           "dtype": _DTYPES[dtype], "shape": [int(x) for x in shape],
                           "sha256": hashlib.sha256(data).hexdigest()}
    if level == "raw":
        out["data_b64"] = base64.b64encode(data).decode("ascii")
    return out


def _drain(cap: Any, level: str) -> Iterator[dict[str, Any]]:
    steps, recs = cap.take()
    by_step: dict[int, list[tuple]] = {}
    for r in recs:
        by_step.setdefault(int(r[1]), []).append(r)
    for step, pos0, width, mmq, tokens in steps:
        yield {"type": "step", "step": int(step), "pos": int(pos0), "width": int(width),
               "positions": list(range(int(pos0), int(pos0) + int(width))),
               "tokens": [int(t) for t in tokens], "kernel": "mmq" if mmq else "mmvq"}
        for r in by_step.get(int(step), []):
            yield _tensor_record(r, level)


def traced_generate(engine: Any, prompt: Any, *, max_tokens: int, trace: dict[str, Any],
                    request_id: Any = None, **options: Any) -> tuple[Any, dict[str, Any]]:
    """Greedy generation with trace capture; writes the trace file at trace["path"].

    Args:
        engine: an Engine. prompt: text or token ids (as Engine.generate). trace: the checked
            request `trace` object (level, path, snapshot_at, perturb). options: chunk, bands,
            mmvq_max_ncols, mode (as Engine.generate).
    Returns:
        (generated token ids, stop reason, text bytes) as a dict and the trace summary
        {"path", "sha256", "records", "bytes"}. The prefix cache is not used.
    """
    trace = check_trace_options(trace)
    plan = engine._plan(**options)
    level = trace["level"]
    toks = prompt_tokens(prompt, vocab=engine.config["vocab"])
    if len(toks) > engine.config["ctx"]:
        raise EngineError(f"prompt too long: {len(toks)} tokens exceeds the context")
    snap_at = trace["snapshot_at"]
    if snap_at is not None and snap_at >= len(toks):
        raise EngineError(f"trace.snapshot_at={snap_at} must be inside the prompt (< {len(toks)} tokens)")
    header = {"type": "header", "schema": SCHEMA, "version": VERSION,
              "engine": {"name": "ds4-mini", "build": engine.build_info()},
              "model": engine.config, "config_hash": engine.config_hash,
              "prompt_sha256": prompt_sha256(prompt), "prompt_tokens": len(toks),
              "request": {"id": request_id, "max_tokens": max_tokens, "options": dict(options),
                          "plan": {"bands": plan.bands, "chunk": plan.chunk,
                                   "mmvq_max_ncols": plan.mmvq_max_ncols, "mode": plan.mode},
                          "snapshot_at": snap_at, "perturb": trace["perturb"]},
              "level": level}
    records: list[dict[str, Any]] = [header]
    if getattr(engine, "device", "cpu") != "cpu":
        raise EngineError(f"trace capture runs on the CPU engine only, not on device={engine.device!r}")
    cap = _core.TraceCapture(engine._model)
    if trace["perturb"]:
        p = trace["perturb"]
        cap.set_perturb(int(p["step"]), int(p.get("layer", -1) if p.get("layer") is not None else -1),
                        int(p.get("token", 0)), str(p["tensor"]), int(p["index"]))
    sess = engine.session()
    sess._core.set_trace(cap)
    arr = as_token_array(toks)
    cut = [0, snap_at, len(toks)] if snap_at else [0, len(toks)]
    for i in range(len(cut) - 1):
        res = sess._prefill_array(arr[cut[i]:cut[i + 1]], plan)
        records.extend(_drain(cap, level))
        if i + 1 < len(cut) - 1:  # snapshot mid-prompt, restore into a fresh session, continue
            snap = sess.snapshot()
            records.append({"type": "snapshot", "event": "save", "pos": sess.pos,
                            "sha256": hashlib.sha256(snap).hexdigest(), "bytes": len(snap)})
            sess._core.set_trace(None)
            sess = engine.session()
            sess.restore(snap)
            again = sess.snapshot()
            records.append({"type": "snapshot", "event": "restore", "pos": sess.pos,
                            "sha256": hashlib.sha256(again).hexdigest(), "bytes": len(again)})
            sess._core.set_trace(cap)
    sess._core.set_trace(None)
    dec = sess.decode(max_tokens)
    gen = [int(t) for t in dec["tokens"]]
    text = detokenize(gen)
    records.append({"type": "commit", "tokens": gen, "stop": dec["stop"],
                    "response_sha256": hashlib.sha256(text).hexdigest(), "exact": bool(res.exact)})
    records.append({"type": "end", "records": len(records) + 1})
    summary = write_trace(Path(trace["path"]), records)
    return {"tokens": gen, "text": text, "stop": dec["stop"], "prompt_tokens": len(toks)}, summary


def write_trace(path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Write records as deterministic gzip JSON lines (mtime 0); returns path, sha256, size."""
    raw = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records).encode("utf-8")
    data = gzip.compress(raw, compresslevel=6, mtime=0)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "records": len(records),
            "bytes": len(data)}
