"""Coverage of an exactness run: proof, from the traces alone, that the comparison exercised
what exact bands can get wrong. Every item names where it was seen; a missing item fails the
run by name (it is never a footnote).

Items (DESIGN.md, exact bands): band tail widths 1..chunk-1 (at most 3); for every compressor
ratio, a step before, on and after one of its boundaries ((p + 1) % ratio == 0), and the same
around the sliding-window boundary (position n_swa, the first token whose window no longer
holds position 0); hash-routed and learned-routed layers with compared routes; a repeated
request; a snapshot saved mid-prompt, restored and continued.
"""
from __future__ import annotations

from typing import Any, Sequence

from .model import TraceRequest


def _step_at(steps: list[dict[str, Any]], pos: int) -> dict[str, Any] | None:
    for s in steps:
        if s["pos"] <= pos < s["pos"] + s["width"]:
            return s
    return None


def _where(req: str, s: dict[str, Any]) -> str:
    return f"{req} step {s['step']} (pos {s['pos']}..{s['pos'] + s['width'] - 1}, w={s['width']})"


def _around(label: str, boundary: int, runs: list[tuple[str, Any]]) -> dict[str, Any]:
    """before/on/after steps of `boundary` in one candidate's traces (first request that has all)."""
    for req, tr in runs:
        on = _step_at(tr.steps, boundary)
        if on is None:
            continue
        before = _step_at(tr.steps, on["pos"] - 1) if on["pos"] > 0 else None
        after = _step_at(tr.steps, on["pos"] + on["width"])
        if before and after:
            return {"item": label, "ok": True,
                    "seen": f"before {_where(req, before)}; on {_where(req, on)}; after {_where(req, after)}"}
    return {"item": label, "ok": False, "seen": f"no request reaches position {boundary + 1} with steps around it"}


def coverage(model: dict[str, Any], chunk: int, runs: list[tuple[str, Any]],
             requests: Sequence[TraceRequest]) -> list[dict[str, Any]]:
    """Coverage rows for one candidate: [{item, ok, seen}].

    Args:
        model: the model config from the trace header (ratios, n_swa, n_layers, n_hash_layers).
        chunk: the candidate's prefill chunk (1: no band tails to cover).
        runs: (request id, Trace) pairs of the candidate, in request order.
        requests: the protocol's typed requests (id, repeat_of, snapshot_at).
    """
    rows: list[dict[str, Any]] = []
    chunk = int(chunk)
    for w in range(1, min(chunk - 1, 3) + 1):
        seen = None
        for req, tr in runs:
            ends = {tr.header["prompt_tokens"] - 1}
            if tr.header["request"].get("snapshot_at"):
                ends.add(tr.header["request"]["snapshot_at"] - 1)
            for s in tr.steps:
                if s["width"] == w and s["pos"] + w - 1 in ends:
                    seen = f"tail {_where(req, s)}"
                    break
            if seen:
                break
        rows.append({"item": f"tail width {w}", "ok": bool(seen), "seen": seen or "no prefill ends in a step of this width"})
    for r in sorted({r for r in model["ratios"] if r > 0}):
        # the second boundary: ratio-4 layers pool an overlapping window (previous + current block)
        rows.append(_around(f"compressor ratio {r} boundary (pos {2 * r - 1})", 2 * r - 1, runs))
    rows.append(_around(f"sliding-window boundary (pos {model['n_swa']})", model["n_swa"], runs))
    n_hash, n_layers = model["n_hash_layers"], model["n_layers"]
    for label, layers in (("hash-routed layers", range(0, n_hash)), ("learned-routed layers", range(n_hash, n_layers))):
        compared = sorted({t["layer"] for _, tr in runs for t in tr.tensors
                           if t["name"] == "route_ids" and t["layer"] in layers})
        rows.append({"item": label, "ok": bool(layers) and compared == list(layers),
                     "seen": f"route ids/weights compared in layers {compared}" if compared
                     else "no routes compared"})
    by_id = {q.id: q for q in requests}
    rep = [q for q in requests if q.repeat_of and q.repeat_of in by_id]
    traced = {req for req, _ in runs}
    rep = [q for q in rep if q.id in traced and q.repeat_of in traced]
    rows.append({"item": "repeated request", "ok": bool(rep),
                 "seen": f"{rep[0].id} repeats {rep[0].repeat_of} in the same worker" if rep
                 else "no request is repeated"})
    snap = None
    for req, tr in runs:
        at = tr.header["request"].get("snapshot_at")
        events = [s["event"] for s in tr.snapshots]
        later = [s for s in tr.steps if at is not None and s["pos"] >= at]
        if at and 0 < at < tr.header["prompt_tokens"] and events == ["save", "restore"] and later:
            snap = f"{req}: saved at pos {at}, restored, continued for {len(later)} steps"
            break
    rows.append({"item": "snapshot mid-prompt, restore, continue", "ok": bool(snap),
                 "seen": snap or "no request snapshots mid-prompt"})
    return rows
