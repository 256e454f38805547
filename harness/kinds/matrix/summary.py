"""The matrix table, computed from each cell's own stats.json (pure: dicts in, dicts out).

Every row is one cell's verdict exactly as that cell's evidence states it: samples from
different hosts are never pooled (different machines are different experiments, DESIGN.md).
The only cross-host statement is a note where one protocol's responses differ between hosts.
`verify` recomputes these rows from the stored cells and compares them with cells.json.
"""
from __future__ import annotations

from typing import Any


def verdict_label(verdict: dict[str, Any]) -> str:
    """QUALIFIED / NOT QUALIFIED / INCONCLUSIVE from a stats.json verdict (its `decision` where
    the stats version records one, else from `qualified`)."""
    answer = verdict.get("decision") if isinstance(verdict, dict) else None
    if isinstance(answer, str) and answer:
        return answer.upper().replace("_", " ")
    return "QUALIFIED" if isinstance(verdict, dict) and verdict.get("qualified") else "NOT QUALIFIED"


def cell_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """One cell's row: verdict, per-group gain with its interval and drift, response SHA-256s.

    Args:
        stats: the cell's stats.json (a bracket or compare run).
    Returns:
        JSON-ready dict: verdict, qualified, reasons, metric, unit, gain_name, comparisons
        [{group, gain_pct, ci_low, ci_high, confidence, drift_pct}], responses_identical,
        responses [{prompt_id, group, sha256, distinct}].
    """
    verdict = stats.get("verdict") or {}
    comparisons = []
    for c in stats.get("comparisons") or []:
        ci = c.get("ci") or {}
        comparisons.append({"group": c.get("group"), "gain_pct": c.get("gain_pct"),
                            "ci_low": ci.get("low"), "ci_high": ci.get("high"),
                            "confidence": ci.get("confidence"), "drift_pct": c.get("drift_pct")})
    responses = stats.get("responses") or {}
    return {"verdict": verdict_label(verdict), "qualified": bool(verdict.get("qualified")),
            "reasons": list(verdict.get("reasons") or []), "metric": stats.get("metric"),
            "unit": stats.get("unit"), "gain_name": stats.get("gain_name"),
            "comparisons": comparisons, "responses_identical": responses.get("identical"),
            "responses": [{"prompt_id": p.get("prompt_id"), "group": p.get("group"),
                           "sha256": p.get("sha256"), "distinct": p.get("distinct")}
                          for p in responses.get("prompts") or []]}


def response_notes(cells: list[dict[str, Any]]) -> list[str]:
    """One note per protocol whose sealed cells gave different responses on different hosts.

    Args:
        cells: cells.json records (id, protocol, node, status, summary).
    Returns:
        Sentences naming the protocol, the prompt and each host's SHA-256 (sorted by protocol).
    """
    by_protocol: dict[str, dict[tuple, dict[str, str | None]]] = {}
    for cell in cells:
        summary = cell.get("summary")
        if cell.get("status") != "sealed" or not summary:
            continue
        for r in summary.get("responses") or []:
            key = (r.get("prompt_id"), r.get("group"))
            sha = r.get("sha256") if r.get("distinct") == 1 else f"{r.get('distinct')} distinct"
            by_protocol.setdefault(cell["protocol"], {}).setdefault(key, {})[cell["node"]] = sha
    notes = []
    for name in sorted(by_protocol):
        for (prompt, group), per_node in sorted(by_protocol[name].items(), key=lambda kv: str(kv[0])):
            if len(set(per_node.values())) > 1:
                where = "; ".join(f"{node}: {_short(sha)}" for node, sha in sorted(per_node.items()))
                label = f"prompt {prompt}" + (f" [{group}]" if group else "")
                notes.append(f"protocol {name} gave different responses on different hosts for "
                             f"{label} ({where}); each host's verdict stands on its own samples")
    return notes


def _short(sha: str | None) -> str:
    return sha[:16] if isinstance(sha, str) and len(sha) == 64 else str(sha)
