"""HTML report: one self-contained file with inline SVG plots drawn by matplotlib (returns text).

Nothing is fetched when the file is viewed: no scripts, no stylesheets, no fonts, no images
from elsewhere; every plot is an inline <svg> inside a <figure class="plot" data-plot=...>.
A run shows, per comparison: a strip plot of every measured sample per arm with its median
and median +- MAD band, the samples in time order (warm-ups hollow, block boundaries dashed,
so drift is visible), and the gain with its CI against the gate's minimum; then exactness,
the verdict, the environment and the manifest SHA-256. Calibrate evidence shows the
spurious gain of every A/A repeat and the power curve.
"""
from __future__ import annotations

import html
import io
from typing import Any

from ..protocol_model import gates_drift
from .base import (GPU_STATE_HEAD, GPU_STATE_NOTE, ReportInput, fmt_p, fmt_pct, fmt_value,
                   engine_device, gpu_state_rows, gpu_summary)

PALETTE = {"reference": "#1f77b4", "candidate": "#d62728"}
ARM_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;
color:#222;background:#fff;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.verdict{display:inline-block;padding:.3em .8em;border-radius:4px;font-weight:bold;color:#fff}
.pass{background:#2e7d32}.fail{background:#8e0000}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.25em .6em;
text-align:left;vertical-align:top;font-size:.92em}th{background:#f4f4f4}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em;word-break:break-all}
figure.plot{margin:1em 0;border:1px solid #eee;padding:.5em}figure.plot svg{max-width:100%;height:auto}
figcaption{font-size:.9em;color:#555}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


# --------------------------------------------------------------------------- plotting

def _pyplot():
    """matplotlib's pyplot on the Agg backend with deterministic SVG output (lazy import)."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "dflash-qualify",
                                "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False})
    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _figure(kind: str, svg: str, caption: str) -> str:
    return (f'<figure class="plot" data-plot="{_e(kind)}">{svg}'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _jitter(n: int, width: float = 0.18) -> list[float]:
    """Deterministic horizontal offsets for a strip plot (no randomness in reports)."""
    if n <= 1:
        return [0.0] * n
    return [-width + 2 * width * i / (n - 1) for i in range(n)]


def strip_plot(arms: list[dict], unit: str, metric: str, decimals: int) -> str:
    """Every measured sample per arm, its median (line) and median +- MAD (band)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for i, arm in enumerate(arms):
        color = PALETTE.get(arm["role"], "#555")
        vals = arm["values"]
        if arm["median"] is not None:
            mad = arm["mad"] or 0.0
            ax.add_patch(plt.Rectangle((i - 0.3, arm["median"] - mad), 0.6, 2 * mad,
                                       color=color, alpha=0.15, lw=0))
            ax.hlines(arm["median"], i - 0.32, i + 0.32, colors=color, lw=2)
        ax.scatter([i + j for j in _jitter(len(vals))], vals, s=18, color=color, zorder=3,
                   edgecolors="white", linewidths=0.5)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels([a["label"] for a in arms])
    ax.set_xlim(-0.6, len(arms) - 0.4)
    ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def time_plot(samples: list[dict], arms: list[dict], group, unit: str, metric: str) -> str:
    """Samples in request order (seq): drift is visible; warm-ups hollow; blocks dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ids = [a["id"] for a in arms]
    recs = sorted((s for s in samples if s.get("group") == group and s.get("arm") in ids
                   and isinstance(s.get("value"), (int, float)) and s.get("ok", True)),
                  key=lambda s: s.get("seq", 0))
    for k, arm in enumerate(arms):
        color = ARM_COLORS[k % len(ARM_COLORS)]
        for phase, filled in (("measured", True), ("warmup", False)):
            pts = [(s["seq"], s["value"]) for s in recs if s["arm"] == arm["id"] and s["phase"] == phase]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=16, zorder=3,
                           facecolors=color if filled else "none", edgecolors=color,
                           label=arm["label"] if filled else None)
    last = None
    few = len({s.get("block") for s in recs}) <= 20   # interleaved rounds would only clutter
    for s in recs:
        b = s.get("block")
        if few and last is not None and b is not None and b != last:
            ax.axvline(s["seq"] - 0.5, color="#999", ls="--", lw=0.6)
        last = b
    ax.set_xlabel("request (seq, time order)")
    ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", frameon=False)
    return _svg(fig)


def gain_plot(comp: dict, min_gain: float, gain_name: str) -> str:
    """The gain point estimate and its CI against zero and the gate's minimum."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 1.6))
    ci, gain = comp["ci"], comp["gain_pct"]
    ax.axvline(0, color="#555", lw=1)
    ax.axvline(min_gain, color="#2e7d32", ls="--", lw=1.2, label=f"gate minimum {min_gain:g}%")
    if gain is not None:
        if ci["low"] is not None:
            ax.hlines(0, ci["low"], ci["high"], color="#d62728", lw=3,
                      label=f"{ci['confidence'] * 100:g}% CI")
        ax.plot([gain], [0], "o", color="#d62728", ms=8, label=f"{gain_name} {gain:.2f}%")
    lo = min(x for x in (0, min_gain, gain, ci["low"]) if x is not None)
    hi = max(x for x in (0, min_gain, gain, ci["high"]) if x is not None)
    pad = max(1.0, (hi - lo) * 0.15)
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_yticks([])
    ax.set_xlabel(f"{gain_name} (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(fig)


def look_plot(stats: dict) -> str:
    """A sequential bracket's looks: the median block gain and its confidence sequence per
    block against the gate's minimum, the deciding look marked."""
    plt = _pyplot()
    seq = stats["sequential"]
    looks = seq["looks"]
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    n = [lk["n"] for lk in looks]
    ax.plot(n, [lk["gain_pct"] for lk in looks], "o-", color="#d62728", ms=3,
            label=f"median block {stats['gain_name']}")
    bounded = [lk for lk in looks if lk["lo_pct"] is not None]
    if bounded:
        ax.fill_between([lk["n"] for lk in bounded], [lk["lo_pct"] for lk in bounded],
                        [lk["hi_pct"] for lk in bounded], color="#d62728", alpha=0.18, step="post",
                        label=f"{seq['confidence'] * 100:g}% confidence sequence")
    ax.axhline(seq["min_gain_pct"], color="#2e7d32", ls="--", lw=1.2,
               label=f"gate minimum {seq['min_gain_pct']:g}%")
    ax.axhline(0, color="#555", lw=0.8)
    if seq["decided_at"]:
        ax.axvline(seq["decided_at"], color="#555", ls=":", lw=1, label=seq["decision"])
    ax.set_xlabel("blocks (fresh workers per arm)")
    ax.set_ylabel(f"{stats['gain_name']} (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(fig)


def calibration_plots(stats: dict) -> list[str]:
    """Spurious gain and drift of every A/A repeat; the simulated power curve."""
    plt = _pyplot()
    gate = stats["gate"]
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    rows = stats["repeats"]
    xs = [r["repeat"] for r in rows]
    ax.scatter(xs, [r["gain_pct"] for r in rows], color="#d62728", s=20, label="spurious gain", zorder=3)
    ax.scatter(xs, [r["drift_pct"] for r in rows], color="#1f77b4", s=20, marker="s", label="drift",
               zorder=3)
    ax.axhline(gate["min_gain_pct"], color="#2e7d32", ls="--", lw=1, label="gate minimum gain")
    ax.axhline(0, color="#555", lw=0.8)
    ax.set_xlabel("A/A repeat")
    ax.set_ylabel("%")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    first = _figure("noise", _svg(fig), "Spurious gain and drift of every A/A repeat (noise floor).")
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    eff = [0.0] + [p["effect_pct"] for p in stats["power"]]
    pw = [stats["false_qualification"]["simulated"]["rate_pct"] / 100] + [p["power"] for p in stats["power"]]
    ax.plot(eff, pw, "o-", color="#d62728")
    ax.axhline(stats["settings"]["target_power"], color="#2e7d32", ls="--", lw=1, label="target power")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"true {stats['gain_name']} (%)")
    ax.set_ylabel("P(qualified)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    second = _figure("power", _svg(fig), f"Simulated probability that the gate qualifies, at "
                     f"N = {stats['measured_per_arm']} (effect 0 = false-qualification rate).")
    return [first, second]


# --------------------------------------------------------------------------- sections

def _table(rows: list[list[str]], head: list[str] | None = None) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _environment(env: dict) -> str:
    def get(*path):
        cur: Any = env
        for p in path:
            if not isinstance(cur, dict):
                return None
            cur = cur.get(p)
        return cur

    rows = [("invocation", get("invocation")), ("host", get("host")),
            ("CPU", get("cpu", "model")), ("logical CPUs", get("cpu", "logical_cpus")),
            ("CPU MHz", get("cpu", "mhz")), ("governor", get("cpu", "governor")),
            ("load (1/5/15 min)", get("cpu", "load")),
            ("OS", " ".join(str(x) for x in (get("os", "system"), get("os", "release")) if x)),
            ("Python", get("python", "version")), ("dflash-qualify", get("tool_version")),
            ("engine build", " ".join(str(x) for x in (get("engine_build", "build_type"),
                                                       get("engine_build", "simd_path"),
                                                       engine_device(env)) if x)),
            ("git (tool)", get("git", "tool", "sha")), ("started", get("started_utc")),
            ("finished", get("finished_utc"))]
    rows.append(("GPU", gpu_summary(env)))
    test_only = get("engine_build", "test_only")
    if test_only:
        rows.append(("TEST ONLY", test_only))
    out = _table([[_e(k), f'<span class="mono">{_e(v)}</span>'] for k, v in rows
                  if v not in (None, "", [])])
    gpu_rows = gpu_state_rows(env)
    if gpu_rows:
        out += (f"<h3>GPU state per arm</h3><p>{_e(GPU_STATE_NOTE.capitalize())}.</p>"
                + _table([[_e(c) for c in row] for row in gpu_rows], GPU_STATE_HEAD))
    return out


def _verdict_table(v: dict) -> str:
    rows = []
    for c in v["conditions"]:
        name = c["name"] + (f" [{c['group']}]" if c.get("group") is not None else "")
        res = "pass" if c["passed"] else f"FAIL {c['reason']}"
        rows.append([_e(name), _e(res), _e(c["message"])])
    return _table(rows, ["condition", "result", "detail"])


def _exactness(stats: dict) -> str:
    resp = stats["responses"]
    if resp["identical"] is True:
        shas = ", ".join(f"<code>{_e(p['sha256'])}</code>" for p in resp["prompts"])
        return (f'<p><span class="verdict pass">identical</span> all {resp["hashed"]} hashed '
                f"responses are byte-identical per prompt (warm-ups included): {shas}</p>")
    if resp["identical"] is None:
        return '<p><span class="verdict fail">unproven</span> no response was hashed.</p>'
    return (f'<p><span class="verdict fail">responses differ</span> {resp["mismatches"]} of '
            f'{resp["hashed"]} hashed requests differ from their prompt\'s reference.</p>')


def _run_body(inp: ReportInput) -> list[str]:
    stats = inp.stats
    d, unit, metric = stats["decimals"], stats["unit"], stats["metric"]
    out: list[str] = []
    for comp in stats["comparisons"]:
        arms = [a for a in stats["arms"] if a["group"] == comp["group"]]
        title = f"Group {comp['group']}" if comp["group"] is not None else "Samples"
        out.append(f"<h2>{_e(title)}</h2>")
        out.append(_figure("strip", strip_plot(arms, unit, metric, d),
                           "Every measured sample per arm; line = median, band = median ± MAD."))
        out.append(_figure("time", time_plot(inp.samples, arms, comp["group"], unit, metric),
                           "Samples in time order (hollow = warm-up; dashed = block boundary): "
                           "drift shows as a slope or a step."))
        out.append(_figure("gain", gain_plot(comp, stats["gate"]["min_gain_pct"], stats["gain_name"]),
                           f"{stats['gain_name'].capitalize()} with its confidence interval against "
                           f"zero and the gate's minimum."))
        rows = [[_e(a["label"]), _e(a["n"]), _e(fmt_value(a["median"], d)), _e(fmt_value(a["mad"], d)),
                 '<span class="mono">' + _e(", ".join(fmt_value(v, d) for v in a["values"])) + "</span>"]
                for a in arms]
        out.append(_table(rows, ["arm", "n", "median", "MAD", "samples"]))
        ci = comp["ci"]
        ci_text = "n/a" if ci["low"] is None else f"[{fmt_pct(ci['low'])}, {fmt_pct(ci['high'])}]"
        facts = [f"{stats['gain_name']} {fmt_pct(comp['gain_pct'])}",
                 f"{ci['confidence'] * 100:g}% CI {ci_text}",
                 f"Mann-Whitney p = {fmt_p(comp['rank_test']['p_value'])}"]
        if comp.get("drift_pct") is not None:
            facts.append(f"drift {fmt_pct(comp['drift_pct'])}")
        paired = comp.get("paired_test")
        if paired and paired.get("pairing"):
            facts.append(f"Wilcoxon signed-rank p = {fmt_p(paired['p_value'])} "
                         f"({paired['n_pairs']} pairs)")
        out.append("<p>" + _e("; ".join(facts)) + ".</p>")
        blocks = comp.get("blocks")
        if blocks and gates_drift(stats["kind"]):
            out.append(f"<p>Per-block drift (schedule {_e(comp.get('schedule'))}):</p>")
            out.append(_table([[_e(b["block"]), _e(b["arm"]), _e(b["n"]), _e(fmt_value(b["median"], d)),
                                _e(fmt_pct(b["delta_pct"]))] for b in blocks],
                              ["block", "arm", "n", "median", "vs pooled reference"]))
    if stats.get("sequential"):
        seq = stats["sequential"]
        out.append("<h2>Sequential looks</h2>")
        out.append(_figure("looks", look_plot(stats),
                           "The median per-block gain and its confidence sequence after every "
                           "block; the run stops when the band leaves the gate's minimum."))
        out.append(_table([[_e(lk["n"]), _e(fmt_pct(lk["gain_pct"])), _e(fmt_pct(lk["lo_pct"])),
                            _e(fmt_pct(lk["hi_pct"])), _e(fmt_pct(lk["drift_pct"])),
                            _e(lk["decision"])] for lk in seq["looks"]],
                          ["block", stats["gain_name"], "lower", "upper", "drift", "decision"]))
    out.append("<h2>Exactness</h2>")
    out.append(_exactness(stats))
    return out


def _calibration_body(inp: ReportInput) -> list[str]:
    stats = inp.stats
    sim = stats["false_qualification"]["simulated"]
    obs = stats["false_qualification"]["observed"]
    rec = stats["recommendation"]
    out = ["<h2>Noise floor and power</h2>", *calibration_plots(stats)]
    out.append(f"<p>Simulated false-qualification rate <b>{sim['rate_pct']:.2f}%</b> "
               f"({sim['qualified']}/{sim['simulations']}); observed {obs['qualified']} of "
               f"{obs['repeats']} real A/A repeats qualified.</p>")
    out.append(_table([[_e(f"{p['effect_pct']:g}%"), _e(f"{p['power'] * 100:.1f}%")]
                       for p in stats["power"]], [f"true {stats['gain_name']}", "power"]))
    out.append("<p>" + (_e(f"Recommended N: {rec['n']} for a {rec['effect_pct']:g}% effect at "
                           f"power {rec['power']:g}.") if rec["n"] is not None
                        else _e(f"Recommended N: none ({rec['reason']}).")) + "</p>")
    out.append("<h2>Exactness</h2>")
    out.append(_exactness(stats))
    return out


def render(inp: ReportInput) -> str:
    """Registry entry: the self-contained HTML report of a run's evidence."""
    v = inp.stats["verdict"]
    answer = v.get("decision") or ("QUALIFIED" if v["qualified"] else "NOT QUALIFIED")
    return _page(inp, answer, _run_body(inp))


def render_calibration(inp: ReportInput) -> str:
    """Registry entry: the self-contained HTML report of calibrate evidence."""
    ok = inp.stats["verdict"]["qualified"]
    return _page(inp, "gate sound" if ok else "gate NOT sound", _calibration_body(inp))


def _page(inp: ReportInput, word: str, kind_body: list[str]) -> str:
    stats = inp.stats
    name = inp.protocol.get("name") or "qualification"
    ok = stats["verdict"]["qualified"]
    body = [f"<h1>{_e(name)}</h1>",
            f'<p><span class="verdict {"pass" if ok else "fail"}">{_e(word)}</span>'
            + ("" if ok else " " + _e(", ".join(stats["verdict"]["reasons"]))) + "</p>"]
    if inp.protocol.get("description"):
        body.append(f"<p>{_e(inp.protocol['description'])}</p>")
    body.append(f"<p>Metric <code>{_e(stats['metric'])}</code> ({_e(stats['direction'])} is better"
                + (f", {_e(stats['unit'])}" if stats["unit"] else "") + ").</p>")
    body += kind_body
    body += ["<h2>Verdict</h2>", _verdict_table(stats["verdict"]),
             "<h2>Environment</h2>", _environment(inp.environment if isinstance(inp.environment, dict) else {})]
    if inp.in_evidence:
        body.append(f'<p>Evidence manifest SHA-256: <code id="manifest-sha256">{_e(inp.manifest_sha)}</code></p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(name)}: {_e(word)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
