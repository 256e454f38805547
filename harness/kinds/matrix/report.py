"""The matrix report: one markdown table of per-cell verdicts (text out, no IO).

One row per cell (per group for compare protocols): protocol, host, verdict, gain with its
confidence interval, bracket drift, the response SHA-256 and the cell's evidence id. Failed
cells show FAILED and their reason. A note follows wherever one protocol's responses differ
between hosts. Nothing is pooled across hosts: each row is its own cell's verdict.
"""
from __future__ import annotations

from typing import Any

from .summary import response_notes


def _pct(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{x:.2f}%"


def _gain(c: dict[str, Any]) -> str:
    text = _pct(c.get("gain_pct"))
    if c.get("ci_low") is not None and c.get("ci_high") is not None:
        conf = c.get("confidence")
        level = f"{conf * 100:g}% CI " if isinstance(conf, (int, float)) else "CI "
        text += f" ({level}[{_pct(c['ci_low'])}, {_pct(c['ci_high'])}])"
    return text


def _responses(summary: dict[str, Any], group: Any) -> str:
    rows = [r for r in summary.get("responses") or [] if r.get("group") == group] \
        or summary.get("responses") or []
    parts = []
    for r in rows:
        sha = r.get("sha256") if r.get("distinct") == 1 else f"{r.get('distinct')} distinct"
        parts.append(f"`{sha}`" if r.get("distinct") == 1 else str(sha))
    return " ".join(parts) or "n/a"


def _host(cell: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> str:
    node = nodes.get(cell["node"]) or {}
    identity = cell.get("identity") or node.get("identity") or {}
    host = identity.get("host") or node.get("hostname")
    gpus = ", ".join(g.get("name") or "?" for g in identity.get("gpus") or [])
    what = f"{host} ({cell['node']})" if host else cell["node"]
    return what + (f", {gpus}" if gpus else "")


def render_markdown(matrix: dict[str, Any], nodes_json: dict[str, Any],
                    cells_json: dict[str, Any], manifest_sha256: str | None = None) -> str:
    """The matrix report as markdown.

    Args:
        matrix: protocol.json (the resolved matrix); nodes_json: nodes.json; cells_json:
            cells.json (executor, notes, cells).
        manifest_sha256: the matrix evidence id, when rendering a sealed matrix.
    Returns:
        Markdown text ending in a newline.
    """
    nodes = {n["name"]: n for n in nodes_json.get("nodes") or []}
    cells = cells_json.get("cells") or []
    out = [f"# Matrix {matrix.get('name')}", ""]
    if matrix.get("description"):
        out += [matrix["description"], ""]
    sealed = sum(1 for c in cells if c.get("status") == "sealed")
    out += [f"{len(cells)} cells ({len(matrix.get('protocols') or [])} protocols x "
            f"{len(nodes) + len(nodes_json.get('gaps') or [])} hosts) on the "
            f"{cells_json.get('executor')} executor: {sealed} sealed, {len(cells) - sealed} failed. "
            f"Every verdict is its own cell's: samples from different hosts are never pooled.", ""]
    out += ["| cell | protocol | host | verdict | gain | drift | response SHA-256 | cell evidence |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    failures = []
    for cell in cells:
        summary = cell.get("summary")
        if cell.get("status") != "sealed" or not summary:
            out.append(f"| {cell['id']} | {cell['protocol']} | {_host(cell, nodes)} | FAILED | "
                       f"n/a | n/a | n/a | none |")
            failures.append(f"- {cell['id']}: {cell.get('reason')}")
            continue
        comparisons = summary.get("comparisons") or [{}]
        for c in comparisons:
            group = f" [{c['group']}]" if c.get("group") else ""
            out.append(f"| {cell['id']}{group} | {cell['protocol']} | {_host(cell, nodes)} | "
                       f"{summary['verdict']} | {_gain(c)} | {_pct(c.get('drift_pct'))} | "
                       f"{_responses(summary, c.get('group'))} | "
                       f"`{(cell.get('manifest_sha256') or '')[:16]}` |")
    out.append("")
    if failures:
        out += ["Failed cells:", "", *failures, ""]
    notes = response_notes(cells)
    if notes:
        out += ["Responses across hosts:", "", *(f"- {n}" for n in notes), ""]
    for note in cells_json.get("notes") or []:
        out.append(f"Note: {note}")
    if cells_json.get("notes"):
        out.append("")
    if manifest_sha256:
        out.append(f"Matrix evidence manifest SHA-256: {manifest_sha256}")
    return "\n".join(out).rstrip("\n") + "\n"
