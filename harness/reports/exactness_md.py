"""Markdown of an exactness run (exactness.json): verdict per candidate, first divergence,
coverage table. Text only; the CLI prints it and the runner stores it as report.md."""
from __future__ import annotations

from typing import Any


def _fmt_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v!r}"
    return str(v)


def first_divergence_line(fd: dict[str, Any] | None) -> str:
    """One line naming where a candidate first differed from the oracle."""
    if not fd:
        return "none"
    layer = "-" if fd.get("layer") is None else fd["layer"]
    where = (f"request {fd['request']}, step {fd['step']}"
             + (f" (pos {fd['step_pos']}..{fd['step_pos'] + fd['step_width'] - 1}, w={fd['step_width']}, "
                f"{fd['kernel']})" if fd.get("step_pos") is not None else "")
             + f", layer {layer}, tensor {fd['tensor']}, position {fd['pos']}")
    if fd.get("index") is None:
        return f"{where}: {fd.get('reason')}"
    ulp = "-" if fd.get("ulp") is None else fd["ulp"]
    return (f"{where}, flat index {fd['index']}: candidate {_fmt_value(fd['candidate'])} vs q1 "
            f"{_fmt_value(fd['oracle'])} ({ulp} ULP); {fd['differing']} of {fd['elements']} elements differ")


def render(protocol: dict[str, Any], res: dict[str, Any]) -> str:
    lines = [f"# Exactness: {protocol['name']}", ""]
    m = res["model"]
    lines.append(f"Model {m['name']} (ratios {m['ratios']}, n_swa {m['n_swa']}, {m['n_layers']} layers, "
                 f"{m['n_hash_layers']} hash-routed); oracle q1; traces {res['trace_schema']} ({res['level']}); "
                 f"requests: {', '.join(res['requests'])}.")
    lines += ["", "| candidate | expect | verdict | steps | tensors compared | MMQ steps | result |",
              "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    for c in res["candidates"]:
        lines.append(f"| {c['id']} ({c['label']}) | {c['expect']} | {c['verdict']} | {c['steps']} | "
                     f"{c['tensors']} | {c['mmq_steps']} | {'PASS' if c['passed'] else 'FAIL'} |")
    lines += ["", "First divergence:", ""]
    for c in res["candidates"]:
        lines.append(f"- {c['id']}: {first_divergence_line(c['first_divergence'])}")
    cov = [c for c in res["candidates"] if c["coverage_required"]]
    if cov:
        items: list[str] = []
        for c in sorted(cov, key=lambda c: -len(c["coverage"])):  # widest chunk lists every tail
            items += [r["item"] for r in c["coverage"] if r["item"] not in items]
        lines += ["", "Coverage (every item must be exercised by every bitwise candidate):", "",
                  "| item | " + " | ".join(c["id"] for c in cov) + " | where (" + cov[-1]["id"] + ") |",
                  "| --- | " + " | ".join("---" for _ in cov) + " | --- |"]
        for item in items:
            cells, seen = [], "n/a"
            for c in cov:
                row = next((r for r in c["coverage"] if r["item"] == item), None)
                cells.append("n/a" if row is None else ("ok" if row["ok"] else "MISSING"))
                if row is not None:
                    seen = row["seen"]
            lines.append(f"| {item} | " + " | ".join(cells) + f" | {seen} |")
    if res["missing_coverage"]:
        lines += ["", "Missing coverage (a failure): " + "; ".join(res["missing_coverage"]) + "."]
    lines += ["", f"Verdict: {'PASSED' if res['passed'] else 'FAILED'}: "
              + ("every bitwise candidate is bit-for-bit identical to q1 in every traced tensor, "
                 "with full coverage." if res["passed"] else "see the failing rows above."), ""]
    return "\n".join(lines)


def run_report_lines(protocol: dict[str, Any], environment: dict[str, Any]) -> list[str]:
    """The `run` report's tensor-level exactness line, when the protocol asks for it."""
    ask = protocol.get("exactness") if isinstance(protocol, dict) else None
    if not ask:
        return []
    link = environment.get("exactness") if isinstance(environment, dict) else None
    name = ask.get("protocol")
    if not isinstance(link, dict):
        return [f"Tensor-level exactness: requested (`{name}`) but not run.", ""]
    if link.get("error"):
        return [f"Tensor-level exactness: NOT proven: `{name}` failed: {link['error']}.", ""]
    verdicts = ", ".join(f"{k} {v}" for k, v in (link.get("verdicts") or {}).items())
    if link.get("passed"):
        head = (f"Tensor-level exactness: also proven by `{name}` (every traced tensor of every bitwise "
                f"candidate equals q1, full coverage: {verdicts})")
    else:
        missing = "; ".join(link.get("missing_coverage") or [])
        head = (f"Tensor-level exactness: NOT proven by `{name}` ({verdicts}"
                + (f"; missing coverage: {missing}" if missing else "") + ")")
    return [f"{head}. Exactness evidence {link.get('evidence')}, manifest SHA-256: {link.get('manifest_sha256')}", ""]
