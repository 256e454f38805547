"""Markdown report of calibrate evidence: noise floor, false-qualification rate, power table,
recommended N (returns text; no IO)."""
from __future__ import annotations

from .base import ReportInput, fmt_pct, fmt_value
from .markdown import environment_lines, gpu_state_lines


def _pct_or_na(x) -> str:
    return "n/a" if x is None else f"{x:.2f}%"


def _sequential_lines(stats: dict) -> list[str]:
    """A sequential protocol's rule on resampled A/A blocks: the three answers per true gain."""
    seq = stats.get("sequential")
    if not seq:
        return []
    spb = seq["seconds_per_block"]
    lines = ["## The sequential rule on this machine", "",
             f"{seq['blocks']} A/A blocks (each repeat is one block of fresh workers"
             + (f", ~{spb:.1f} s of requests" if spb else "") + f"); budget {seq['max_blocks']} "
             f"blocks ({seq['budget']['max_rounds']} rounds, {seq['budget']['max_seconds']:g} s). "
             f"Method: {seq['method']}. The first table above is the fixed-N gate's; this is the "
             f"gate the protocol uses.", "",
             f"| true {stats['gain_name']} | QUALIFIED | NOT QUALIFIED | INCONCLUSIVE | error kind "
             f"| median blocks to a verdict | median s (requests only) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for x in seq["rates"]:
        blocks = "-" if x["median_blocks"] is None else f"{x['median_blocks']:g}"
        secs = "-" if x["median_seconds"] is None else f"{x['median_seconds']:.0f}"
        lines.append(f"| {x['gain_pct']:g}% | {x['qualified_pct']:.1f}% | {x['not_qualified_pct']:.1f}% "
                     f"| {x['inconclusive_pct']:.1f}% | {x['error']} | {blocks} | {secs} |")
    return lines + [""]


def render_calibration(protocol: dict, environment: dict, stats: dict, manifest_sha: str | None,
                       *, in_evidence: bool = True) -> str:
    """The calibration report: what the gate does with this machine's noise."""
    cal = protocol.get("calibration", {})
    s = stats["settings"]
    name = protocol.get("name") or "calibration"
    sound = "gate sound" if stats["verdict"]["qualified"] else "gate NOT sound"
    lines = [f"# {name}: {sound}", ""]
    if protocol.get("description"):
        lines += [protocol["description"], ""]
    gate = stats["gate"]
    n = stats["measured_per_arm"]
    lines += [f"Metric: `{stats['metric']}`; schedule {stats['schedule']}; {s['repeats']} A/A "
              f"repeats of {n} measured requests per arm; gate: min {stats['gain_name']} "
              f"{fmt_pct(gate['min_gain_pct'])}, max drift {fmt_pct(gate['max_drift_pct'])}, "
              f"{gate['confidence'] * 100:g}% CI above zero.", ""]
    lines += ["## Noise floor (A/A repeats)", "",
              f"| repeat | reference median | candidate-position median | spurious {stats['gain_name']} "
              "| drift | CI | gate |", "| --- | --- | --- | --- | --- | --- | --- |"]
    d = stats["decimals"]
    for r in stats["repeats"]:
        ci = "n/a" if r["ci_low"] is None else f"[{fmt_pct(r['ci_low'])}, {fmt_pct(r['ci_high'])}]"
        gate_text = "QUALIFIED (false alarm)" if r["qualified"] else "not qualified (" + \
            ", ".join(r["reasons"]) + ")"
        lines.append(f"| {r['repeat']} | {fmt_value(r['reference_median'], d)} "
                     f"| {fmt_value(r['candidate_median'], d)} | {_pct_or_na(r['gain_pct'])} "
                     f"| {_pct_or_na(r['drift_pct'])} | {ci} | {gate_text} |")
    g, dr = stats["noise_floor"]["gain_pct"], stats["noise_floor"]["drift_pct"]
    lines += ["", f"Spurious |{stats['gain_name']}|: median {_pct_or_na(g['median_abs'])}, "
                  f"95th percentile {_pct_or_na(g['p95_abs'])}, max {_pct_or_na(g['max_abs'])}. "
                  f"Drift: median {_pct_or_na(dr['median_abs'])}, 95th percentile "
                  f"{_pct_or_na(dr['p95_abs'])}, max {_pct_or_na(dr['max_abs'])}.", ""]
    fq = stats["false_qualification"]
    obs, sim = fq["observed"], fq["simulated"]
    lines += ["## False-qualification rate and power", "",
              f"Observed: the gate qualified {obs['qualified']} of {obs['repeats']} real A/A "
              f"repeats ({obs['rate_pct']:.1f}%).",
              "",
              f"**Simulated false-qualification rate: {sim['rate_pct']:.2f}%** "
              f"({sim['qualified']} of {sim['simulations']} resampled A/A brackets; target at most "
              f"{s['max_false_rate_pct']:g}%).", "",
              f"| true {stats['gain_name']} | power at N = {n} | qualified / simulated |",
              "| --- | --- | --- |"]
    for row in stats["power"]:
        lines.append(f"| {row['effect_pct']:g}% | {row['power'] * 100:.1f}% "
                     f"| {row['qualified']} / {row['simulations']} |")
    rec = stats["recommendation"]
    lines.append("")
    if rec["n"] is not None:
        lines.append(f"**Recommended N: {rec['n']}** measured requests per arm to detect a "
                     f"{rec['effect_pct']:g}% {stats['gain_name']} with power "
                     f"{rec['power']:g} (simulated power {rec['achieved_power'] * 100:.1f}%).")
    else:
        lines.append(f"Recommended N: none found ({rec['reason']}).")
    lines += ["", "Method: " + stats["methods"]["simulation"] + ".", ""]
    lines += _sequential_lines(stats)
    lines += _verdict_lines_calibration(stats) + [""]
    invocation = environment.get("invocation") if isinstance(environment, dict) else None
    if invocation:
        lines += [f"Reproduce: `{invocation}`", ""]
    lines += environment_lines(environment if isinstance(environment, dict) else {}) + [""]
    lines += gpu_state_lines(environment if isinstance(environment, dict) else {})
    if cal.get("source_protocol"):
        lines += [f"Calibrates protocol `{cal['source_protocol']}` (every arm ran reference arm "
                  f"`{cal.get('reference_arm')}`'s configuration).", ""]
    if in_evidence:
        lines.append(f"Evidence manifest SHA-256: {manifest_sha}" if manifest_sha else
                     "Evidence manifest SHA-256: see manifest.json (written when the evidence is sealed)")
    return "\n".join(lines).rstrip("\n") + "\n"


def _verdict_lines_calibration(stats: dict) -> list[str]:
    v = stats["verdict"]
    head = "**Calibration: the gate is sound on this machine**" if v["qualified"] else \
        "**Calibration: the gate is NOT sound on this machine** (" + \
        ", ".join(f"`{r}`" for r in v["reasons"]) + ")"
    lines = [head, "", "| condition | result | detail |", "| --- | --- | --- |"]
    for c in v["conditions"]:
        result = "pass" if c["passed"] else f"FAIL `{c['reason']}`"
        lines.append(f"| {c['name']} | {result} | {c['message']} |")
    return lines


def render(inp: ReportInput) -> str:
    """Registry entry (via the md dispatcher): markdown of calibrate evidence."""
    return render_calibration(inp.protocol, inp.environment, inp.stats, inp.manifest_sha,
                              in_evidence=inp.in_evidence)
