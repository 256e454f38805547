"""Build real evidence directories from fake samples through EvidenceWriter (a test helper).

Follows the runner's order: protocol.json/.toml, environment.json, samples.jsonl with
stored responses, samples.csv, stats.json, report.md, then seal. Other tests import it as
`import evidence_factory` (tests/ is on sys.path; see conftest.py) or use the fixture.
"""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

from dflash_qualify.harness import analysis
from dflash_qualify.harness.evidence import EvidenceWriter
from dflash_qualify.harness.reports import render_markdown

RESPONSE = b"The quick brown fox jumps over the lazy dog."
NOW = datetime(2026, 11, 29, 11, 45, 0, tzinfo=timezone.utc)
GATE = {"min_gain_pct": 1.0, "max_drift_pct": 2.0, "require_identical": True,
        "confidence": 0.95, "bootstrap_resamples": 2000, "seed": 0}

# q1 ~10 tok/s, candidate ~12 tok/s, tight and drift-free: qualifies.
QUALIFYING = {"A": [10.0, 10.1, 10.05, 9.95, 10.0],
              "cand": [12.0, 12.1, 12.05, 11.95, 12.0],
              "B": [10.0, 10.05, 9.95, 10.1, 10.0]}


def bracket_protocol(name: str = "factory-aba", *, direction: str = "higher",
                     metric: str = "prefill_tok_s", gate: dict | None = None) -> dict:
    """A resolved bracket protocol with arms A (q1 reference A), cand, B (q1 reference B)."""
    return {"schema_version": 1, "kind": "bracket", "name": name,
            "description": "factory bracket for tests", "metric": metric, "direction": direction,
            "arms": [{"id": "A", "label": "q1 reference A", "role": "reference"},
                     {"id": "cand", "label": "exact bands chunk 4", "role": "candidate"},
                     {"id": "B", "label": "q1 reference B", "role": "reference"}],
            "schedule": ["A", "cand", "B"], "groups": [], "gate": {**GATE, **(gate or {})}}


def compare_protocol(name: str = "factory-compare", *, gate: dict | None = None) -> dict:
    """A resolved compare protocol: main (reference) vs pr (candidate), groups 64 and 128, prefill_ms."""
    return {"schema_version": 1, "kind": "compare", "name": name,
            "description": "factory compare for tests", "metric": "prefill_ms", "direction": "lower",
            "arms": [{"id": "main", "label": "main", "role": "reference"},
                     {"id": "pr", "label": "PR", "role": "candidate"}],
            "schedule": ["main", "pr"], "groups": ["64", "128"],
            "gate": {**GATE, "require_identical": False, **(gate or {})}}


def make_samples(protocol: dict, values: dict, *, warmups: int = 1,
                 responses: dict | None = None, cache_hits: dict | None = None) -> tuple[list[dict], dict]:
    """Sample records in schedule order and {sha: bytes} of their responses.

    values: {arm: [measured...]} for brackets, {arm: {group: [measured...]}} for compare.
    responses: {(arm, phase, index) or arm: bytes}; default RESPONSE for every request.
    cache_hits: {(arm, phase, index): hits}.
    """
    import hashlib
    responses, cache_hits = responses or {}, cache_hits or {}
    samples, blobs = [], {}
    groups = protocol.get("groups") or [None]
    for group in groups:
        for arm in protocol["schedule"]:
            role = next(a["role"] for a in protocol["arms"] if a["id"] == arm)
            measured = values[arm] if group is None else values[arm][group]
            for phase, series in (("warmup", [measured[0]] * warmups), ("measured", measured)):
                for i, v in enumerate(series):
                    key = (arm, phase, i) if group is None else (arm, phase, i, group)
                    data = responses.get(key, responses.get(arm, RESPONSE))
                    sha = hashlib.sha256(data).hexdigest()
                    blobs[sha] = data
                    samples.append({
                        "seq": len(samples), "arm": arm, "role": role, "phase": phase, "index": i,
                        "group": group, "prompt_id": "p0" if group is None else f"p{group}",
                        "metric": protocol["metric"], "value": v, "response_sha256": sha,
                        "response_len": len(data), "cache_hits": cache_hits.get(key, 0),
                        "ok": True, "error": None})
    return samples, blobs


def environment() -> dict:
    return {"invocation": "dflash-qualify run factory-aba --out evidence", "tool_version": "0.1.0",
            "host": "testhost", "cpu": {"model": "Test CPU", "governor": "performance"},
            "os": "Linux test", "python": "3.11.0", "git": {"sha": "abc1234", "dirty": False}}


def build(root: Path, values: dict | None = None, *, protocol: dict | None = None, warmups: int = 1,
          responses: dict | None = None, cache_hits: dict | None = None, seal: bool = True,
          name: str | None = None) -> Path:
    """Write an evidence directory the way the runner does; return the sealed (or .partial) path."""
    protocol = copy.deepcopy(protocol or bracket_protocol())
    values = values or QUALIFYING
    samples, blobs = make_samples(protocol, values, warmups=warmups, responses=responses,
                                  cache_hits=cache_hits)
    writer = EvidenceWriter.create(Path(root), name or protocol["name"], now=NOW)
    writer.write_json("protocol.json", protocol)
    writer.write_text("protocol.toml", f'name = "{protocol["name"]}"\n')
    env = environment()
    writer.write_json("environment.json", env)
    for s in samples:
        writer.store_response(blobs[s["response_sha256"]])
        writer.append_jsonl("samples.jsonl", s)
    writer.write_text("samples.csv", analysis.samples_csv(samples))
    stats = analysis.compute(protocol, samples, lambda sha: blobs[sha])
    writer.write_json("stats.json", stats)
    writer.write_text("report.md", render_markdown(protocol, env, stats, samples, None))
    if not seal:
        return writer.path
    final, _ = writer.seal()
    return final


SEQUENTIAL_KEYS = ("sequential", "max_rounds", "max_seconds")


def fixed_n_text(text: str, measured: int = 5) -> str:
    """A bundled protocol's TOML as the fixed-N bracket the runner, schedule and fault tests
    exercise (the bundled CPU protocols are sequential): the sequential budget lines removed
    and `measured` set to N (default 5, exact-bands-quick's fixed N before it was sequential)."""
    out = []
    for line in text.splitlines():
        key = line.split("=")[0].strip()
        if key in SEQUENTIAL_KEYS:
            continue
        out.append(f"measured = {measured}" if key == "measured" else line)
    return "\n".join(out) + "\n"
