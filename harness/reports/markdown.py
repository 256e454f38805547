"""Markdown report in the layout of DESIGN.md's PR-report example (returns text; no IO)."""
from __future__ import annotations

from ..analysis import describe_mismatch
from ..protocol_model import gates_drift
from .base import (GPU_STATE_HEAD, GPU_STATE_NOTE, ReportInput, fmt_p, fmt_pct, fmt_value,
                   engine_device, gpu_state_rows, gpu_summary, with_unit)
from .exactness_md import run_report_lines


def _short(label: str) -> str:
    """A label's name part: 'main' from 'main: bands chunk 4, MMQ for widths 2-4'."""
    return label.split(":", 1)[0].strip() or label


def _reference_word(labels: list[str]) -> str:
    """What the reference arms have in common, e.g. 'q1' from 'q1 reference A' / 'q1 reference B'."""
    if len(labels) == 1:
        words = _short(labels[0]).split()
    else:
        split = [label.split() for label in labels]
        words = []
        for column in zip(*split):
            if len(set(column)) != 1:
                break
            words.append(column[0])
    while words and words[-1].lower().rstrip(":") in ("reference", "ref", "arm"):
        words.pop()
    return " ".join(words) or "reference"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _arm_table(arms: list[dict], decimals: int) -> list[str]:
    lines = ["| arm | samples (every measured value) | median | MAD |", "| --- | --- | --- | --- |"]
    for arm in arms:
        values = ", ".join(fmt_value(v, decimals) for v in arm["values"]) or "(none)"
        lines.append(f"| {arm['label']} | {values} | {fmt_value(arm['median'], decimals)} "
                     f"| {fmt_value(arm['mad'], decimals)} |")
    return lines


def _gain_phrase(stats: dict, gain: float | None) -> str:
    if gain is None:
        return "no gain could be computed"
    if stats["direction"] == "higher":
        return f"a {fmt_pct(gain)} gain"
    metric = stats["metric"]
    what = metric[:-3].replace("_", " ") + " time" if metric.endswith("_ms") else "time"
    return f"{fmt_pct(gain)} lower {what}"


def _comparison_lines(stats: dict, comp: dict, arms: list[dict]) -> list[str]:
    d, unit = stats["decimals"], stats["unit"]
    refs = [a for a in arms if a["role"] == "reference"]
    cand = next(a for a in arms if a["role"] == "candidate")
    ref_word = _reference_word([a["label"] for a in refs])
    pooled = comp["pooled_reference"]
    pooled_word = "pooled " if len(refs) > 1 else ""
    verb = "reached" if stats["direction"] == "higher" else "took"
    text = (f"The {pooled_word}{pooled['n']}-sample {ref_word} median was "
            f"{with_unit(fmt_value(pooled['median'], d), unit)}. "
            f"{_cap(_short(cand['label']))} {verb} {with_unit(fmt_value(comp['candidate']['median'], d), unit)}, "
            f"{_gain_phrase(stats, comp['gain_pct'])}.")
    if comp["drift_pct"] is not None:
        which = "two" if len(refs) == 2 else "first and last"
        text += f" The {which} {ref_word} brackets differed by {fmt_pct(comp['drift_pct'])}."
    elif gates_drift(stats["kind"]):
        text += f" Bracket drift: n/a ({comp['drift_reason']})."
    ci = comp["ci"]
    name = stats["gain_name"]
    if ci["low"] is None:
        ci_text = f"{name.capitalize()} {ci['confidence'] * 100:g}% CI: n/a ({ci['reason']})."
    else:
        note = " (degenerate: every resample gave the same value)" if ci["degenerate"] else ""
        ci_text = (f"{name.capitalize()} {ci['confidence'] * 100:g}% CI: [{fmt_pct(ci['low'])}, "
                   f"{fmt_pct(ci['high'])}]{note} (percentile bootstrap, {ci['resamples']} resamples, "
                   f"seed {ci['seed']}).")
    rank = comp["rank_test"]
    p_text = (f"Mann-Whitney U two-sided p = {fmt_p(rank['p_value'])} (candidate vs pooled reference)."
              if rank["p_value"] is not None else f"Mann-Whitney U p-value: n/a ({rank['reason']}).")
    return [text, "", f"{ci_text} {p_text}"] + _schedule_lines(stats, comp)


def _schedule_lines(stats: dict, comp: dict) -> list[str]:
    """Stats version 2: the schedule, per-block drift and the paired (Wilcoxon) test."""
    lines: list[str] = []
    paired = comp.get("paired_test")
    if paired and paired.get("pairing"):
        p = (f"p = {fmt_p(paired['p_value'])}" if paired["p_value"] is not None
             else f"p-value: n/a ({paired['reason']})")
        lines += ["", f"Wilcoxon signed-rank two-sided {p} over {paired['n_pairs']} pairs "
                      f"({paired['pairing']})."]
    blocks = comp.get("blocks")
    if blocks and gates_drift(stats["kind"]):
        d = stats["decimals"]
        where = ""
        if comp.get("drift_blocks"):
            where = f" (drift compares blocks {comp['drift_blocks'][0]} and {comp['drift_blocks'][1]})"
        lines += ["", f"Schedule {comp.get('schedule', 'ABA')}: per-block medians and their "
                      f"deviation from the pooled reference median{where}.", "",
                  "| block | arm | n | median | vs pooled reference |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {b['block']} | {b['arm']} | {b['n']} | {fmt_value(b['median'], d)} "
                  f"| {fmt_pct(b['delta_pct'])} |" for b in blocks]
    return lines


def _responses_lines(stats: dict) -> list[str]:
    resp, req = stats["responses"], stats["requests"]
    n = req["total"]
    cold = req["cache_recorded"] == n and req["cache_hit_requests"] == 0 and n > 0
    gated = stats["gate"]["require_identical"]
    lines: list[str] = []
    if resp["identical"] is None:
        lines.append(f"No response SHA-256 was recorded for the {n} requests, so identical output is unproven.")
    elif resp["identical"]:
        subject = f"All {n} requests" if resp["hashed"] == n else f"All {resp['hashed']} hashed requests"
        state = " were cache-cold and" if cold else ""
        if len(resp["prompts"]) == 1:
            lines.append(f"{subject}{state} produced the same response SHA-256: {resp['prompts'][0]['sha256']}")
        else:
            lines.append(f"{subject}{state} produced the same response SHA-256 per prompt:")
            lines.append("")
            lines += [f"- {_prompt_name(p)}: {p['sha256']} ({p['requests']} requests)" for p in resp["prompts"]]
    else:
        lead = "Responses differ" + ("" if gated else " (reported, not gated: gate.require_identical is false)")
        lines.append(f"{lead}: {resp['mismatches']} of {resp['hashed']} hashed requests differ from "
                     f"their prompt's reference response. First: {describe_mismatch(resp['first_mismatch'])}.")
        lines.append("")
        lines += [f"- {_prompt_name(p)}: reference {p['sha256']}, {p['distinct']} distinct response(s) "
                  f"in {p['requests']} requests" for p in resp["prompts"]]
    notes = []
    if req["failed"]:
        notes.append(f"{req['failed']} of {n} requests failed")
    if req["cache_hit_requests"]:
        notes.append(f"{req['cache_hit_requests']} requests hit a cache")
    if not req["cache_recorded"]:
        notes.append("cache state was not recorded")
    lines.append("")
    lines.append(f"Hashed bytes: {resp['bytes_hashed']}; warm-ups included."
                 + (f" Note: {'; '.join(notes)}." if notes else ""))
    return lines


def _prompt_name(p: dict) -> str:
    parts = [f"group {p['group']}" if p["group"] else "", f"prompt {p['prompt_id']}" if p["prompt_id"] else ""]
    return ", ".join(x for x in parts if x) or "prompt"


def sequential_lines(stats: dict) -> list[str]:
    """Stats version 3, sequential brackets: the rule, every look, the answer, the projection."""
    seq = stats.get("sequential")
    if not seq:
        return []
    budget = seq["budget"]
    lines = ["## Sequential looks", "",
             f"Blocks of fresh workers (one per arm, order shuffled per block), a look after each: "
             f"{seq['method']}. {seq['confidence'] * 100:g}% confidence sequence for the median "
             f"per-block {stats['gain_name']}; budget {budget['max_rounds']} rounds or "
             f"{budget['max_seconds']:g} s. Per-block drift is log(A / B) of the block medians.", "",
             f"| block | {stats['gain_name']} (median) | lower bound | upper bound | above / below min | "
             f"needed | drift (median) | drift bounds | decision |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lk in seq["looks"]:
        drift_b = (f"[{fmt_pct(lk['drift_lo_pct'])}, {fmt_pct(lk['drift_hi_pct'])}]"
                   if lk["drift_lo_pct"] is not None else "-")
        lines.append(f"| {lk['n']} | {fmt_pct(lk['gain_pct'])} | {fmt_pct(lk['lo_pct'])} "
                     f"| {fmt_pct(lk['hi_pct'])} | {lk['above']} / {lk['below']} "
                     f"| {lk['needed'] if lk['needed'] is not None else '-'} "
                     f"| {fmt_pct(lk['drift_pct'])} | {drift_b} | {lk['decision']}"
                     + (f" `{lk['reason']}`" if lk["reason"] else "") + " |")
    proj = seq.get("projection")
    lines += ["", f"Answer: **{seq['decision']}** (`{seq['reason']}`)"
              + (f" at block {seq['decided_at']}." if seq["decided_at"] else ".")]
    if proj:
        lines.append("" if proj["blocks"] is None else
                     f"At the observed rate about {proj['blocks']} blocks would likely decide it "
                     f"({proj['decision']}).")
        if proj["blocks"] is None:
            lines[-1] = f"No block count is likely to decide it: {proj['reason']}."
    return lines


def _verdict_lines(stats: dict) -> list[str]:
    v = stats["verdict"]
    answer = v.get("decision") or ("QUALIFIED" if v["qualified"] else "NOT QUALIFIED")
    head = f"**Verdict: {answer}**" if v["qualified"] else \
        f"**Verdict: {answer}** (" + ", ".join(f"`{r}`" for r in v["reasons"]) + ")"
    lines = [head, "", "| condition | result | detail |", "| --- | --- | --- |"]
    for c in v["conditions"]:
        name = c["name"] + (f" [{c['group']}]" if c["group"] is not None else "")
        result = "pass" if c["passed"] else f"FAIL `{c['reason']}`"
        lines.append(f"| {name} | {result} | {c['message']} |")
    t = v["thresholds"]
    if stats.get("sequential"):
        seq = stats["sequential"]
        lines += ["", f"Thresholds: min {stats['gain_name']} {fmt_pct(t['min_gain_pct'])} (the "
                      f"confidence sequence's lower bound must clear it; its upper bound below it "
                      f"refuses), references refused when their drift's sequence lies outside "
                      f"+-{fmt_pct(t['max_drift_pct'])}, identical responses "
                      f"{'required' if t['require_identical'] else 'reported only'}; design "
                      f"sequential, {seq['confidence'] * 100:g}% confidence."]
        return lines
    if v.get("design") == "fixed-N":
        lines += ["", "Design: fixed-N (one look at the protocol's N; no sequential stopping)."]
    drift = (f"max drift {fmt_pct(t['max_drift_pct'])} and below half the {stats['gain_name']}, "
             if gates_drift(stats["kind"]) else "")
    lines += ["", f"Thresholds: min {stats['gain_name']} {fmt_pct(t['min_gain_pct'])} (point estimate; "
                  f"the CI must lie above zero), {drift}identical responses "
                  f"{'required' if t['require_identical'] else 'reported only'}."]
    return lines


def _get(env: dict, *path: str):
    cur = env
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


def _text(value) -> str | None:
    return None if value is None or value == "" or isinstance(value, (dict, list)) else str(value)


def _first(env: dict, *paths: tuple[str, ...]) -> str | None:
    for path in paths:
        text = _text(_get(env, *path))
        if text:
            return text
    return None


def environment_lines(env: dict) -> list[str]:
    """A one-line environment summary from environment.json (any missing key is skipped)."""
    items = []
    cpu = _first(env, ("cpu", "model"), ("cpu",))
    if cpu:
        cpus = _text(_get(env, "cpu", "logical_cpus"))
        items.append(f"CPU {cpu}" + (f" ({cpus} logical)" if cpus else ""))
    governor = _first(env, ("cpu", "governor"))
    if governor:
        items.append(f"governor {governor}")
    os_name = " ".join(x for x in (_first(env, ("os", "system")), _first(env, ("os", "release"))) if x) \
        or _first(env, ("os",))
    for label, text in (("host", _first(env, ("host",))), ("OS", os_name),
                        ("Python", _first(env, ("python", "version"), ("python",))),
                        ("dflash-qualify", _first(env, ("tool_version",))),
                        ("engine", " ".join(x for x in (_first(env, ("engine_build", "build_type")),
                                                        _first(env, ("engine_build", "simd_path"),
                                                               ("engine_build", "simd")),
                                                        engine_device(env)) if x))):
        if text:
            items.append(f"{label} {text}")
    gpu = gpu_summary(env)
    if gpu:
        items.append(f"GPU {gpu}")
    for git in (_get(env, "git", "tool"), _get(env, "git")):
        sha = _text(git.get("sha")) if isinstance(git, dict) else None
        if sha:
            items.append(f"git {sha[:12]}" + (" (dirty)" if git.get("dirty") else ""))
            break
    started, finished = _first(env, ("started_utc",)), _first(env, ("finished_utc",))
    if started:
        items.append(f"run {started}" + (f" to {finished}" if finished else ""))
    return [f"Environment: {'; '.join(items)}." if items else "Environment: not recorded."]


def gpu_state_lines(env: dict) -> list[str]:
    """The per-arm GPU readings of a cuda run as a table (nothing for other runs)."""
    rows = gpu_state_rows(env)
    if not rows:
        return []
    return ([f"GPU state per arm, {GPU_STATE_NOTE}:", "",
             "| " + " | ".join(GPU_STATE_HEAD) + " |",
             "|" + " --- |" * len(GPU_STATE_HEAD)]
            + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows] + [""])


def _caveat_lines(protocol: dict, environment: dict) -> list[str]:
    """What the timings mean for HTTP targets, and the run's warnings (protocol and environment)."""
    lines = []
    target = protocol.get("target") if isinstance(protocol.get("target"), dict) else {}
    if target.get("timing"):
        lines += [f"Timings: {target['timing']}.", ""]
    seen: list[str] = []
    for source in (protocol, environment if isinstance(environment, dict) else {}):
        for warning in source.get("warnings") or []:
            if isinstance(warning, str) and warning not in seen:
                seen.append(warning)
    return lines + [line for w in seen for line in (f"**Warning:** {w}.", "")]


def render_markdown(protocol: dict, environment: dict, stats: dict, samples: list,
                    manifest_sha: str | None, *, in_evidence: bool = True) -> str:
    """The PR-style markdown report.

    manifest_sha None (report.md written before sealing) points at manifest.json instead;
    in_evidence False (`analyze`) leaves the evidence line out.
    """
    name = protocol.get("name") or "qualification"
    v = stats["verdict"]
    status = (v.get("decision") or ("QUALIFIED" if v["qualified"] else "NOT QUALIFIED")).lower()
    lines = [f"# {name}: {status}", ""]
    if protocol.get("description"):
        lines += [protocol["description"], ""]
    better = "higher" if stats["direction"] == "higher" else "lower"
    unit = f", {stats['unit']}" if stats["unit"] else ""
    lines += [f"Metric: `{stats['metric']}` ({better} is better{unit}).", ""]
    lines += _caveat_lines(protocol, environment)
    for comp in stats["comparisons"]:
        arms = [a for a in stats["arms"] if a["group"] == comp["group"]]
        if comp["group"] is not None:
            lines += [f"## {comp['group']}", ""]
        lines += _arm_table(arms, stats["decimals"]) + [""]
        lines += _comparison_lines(stats, comp, arms) + [""]
    lines += _responses_lines(stats) + [""]
    seq = sequential_lines(stats)
    lines += seq + ([""] if seq else [])
    lines += run_report_lines(protocol, environment)  # [exactness] protocol: tensor-level proof
    lines += _verdict_lines(stats) + [""]
    invocation = environment.get("invocation") if isinstance(environment, dict) else None
    if invocation:
        lines += [f"Reproduce: `{invocation}`", ""]
    lines += environment_lines(environment if isinstance(environment, dict) else {}) + [""]
    lines += gpu_state_lines(environment if isinstance(environment, dict) else {})
    if in_evidence:
        lines.append(f"Evidence manifest SHA-256: {manifest_sha}" if manifest_sha else
                     "Evidence manifest SHA-256: see manifest.json (written when the evidence is sealed)")
    return "\n".join(lines).rstrip("\n") + "\n"


def render(inp: ReportInput) -> str:
    """Registry entry: markdown of one evidence directory."""
    return render_markdown(inp.protocol, inp.environment, inp.stats, inp.samples, inp.manifest_sha,
                           in_evidence=inp.in_evidence)
