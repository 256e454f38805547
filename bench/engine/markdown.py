"""Markdown rendering of a suite result (text in, text out; no IO)."""
from __future__ import annotations


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def render(r: dict) -> str:
    m = r["machine"]
    out = [f"Measured {r['stamp']} on {m['cpu'] or m['machine']} ({m['logical_cpus']} logical CPUs, SIMD path "
           f"{m['simd_path']}), load average at start {m['loadavg_start'][0]:.1f}"
           + (f", at end {r['loadavg_end'][0]:.1f}" if "loadavg_end" in r else "") + f"; model {r['model']}."
           + (" QUICK smoke run: not figures." if r.get("quick") else ""), ""]
    k = r.get("kernels")
    if k:
        out += [f"### Kernels ({k['threads']} threads, W = {k['rows']} x {k['k']}, "
                f"{k['matrix_bytes'] / 2**30:.2f} GiB Q8_0)", "",
                f"Read-bandwidth probe: {k['probe_gbs']:.2f} GB/s before, {k.get('probe_after_gbs', float('nan')):.2f} "
                "GB/s after (best of 3, 1 GiB buffer).", "",
                "| MMVQ ncols | GB/s of weights | % of probe | weight-columns GB/s | int8 GOP/s |",
                "| ---: | ---: | ---: | ---: | ---: |"]
        for x in k["mmvq"]:
            out.append(f"| {x['ncols']} | {x['weight_gbs']:.2f} | {x['pct_probe']:.0f}% | "
                       f"{x['weight_cols_per_s']:.2f} | {x['int8_gops']:.1f} |")
        out += ["", f"ncols 4 / ncols 1 weight-columns per second: {k['mmvq_ncols4_over_ncols1']:.2f}x", "",
                "| MMQ ncols | MMQ ms | GB/s of weights | int8 GOP/s | MMVQ ms (8-col calls) | MMQ / MMVQ time |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for x in k["mmq"]:
            out.append(f"| {x['ncols']} | {x['best_ns'] / 1e6:.1f} | {x['weight_gbs']:.2f} | {x['int8_gops']:.1f} | "
                       f"{x['mmvq_ns'] / 1e6:.1f} | {x['mmq_over_mmvq_time']:.2f} |")
        cross = k["crossover_ncols"]
        out += ["", (f"MMQ faster than MMVQ from ncols = {cross} on (at every wider measured width)." if cross else
                     "No crossover: MMQ was not faster than MMVQ at every width from some ncols on."), ""]
        if k.get("thread_scaling"):
            out += ["| kernel (quarter matrix) | 1 thread ms | 2 threads ms | speedup |", "| --- | ---: | ---: | ---: |"]
            for x in k["thread_scaling"]:
                out.append(f"| {x['kernel']} ncols {x['ncols']} | {x['t1_ns'] / 1e6:.1f} | {x['t2_ns'] / 1e6:.1f} | "
                           f"{x['speedup']:.2f}x |")
            out.append("")
    if r["prefill"]:
        out += ["### End-to-end prefill (exact; all modes bitwise identical, checked)", "",
                "| prompt | threads | mode | tok/s | speedup | MB/token | ceiling | of ceiling | GB/s | q1 / probe |",
                "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for p in r["prefill"].values():
            for name, x in p["modes"].items():
                probe = (f"{_pct(p['q1_frac_of_probe'])} of {p['probe_gbs']:.2f}" if name == "q1" else "")
                out.append(f"| {p['tokens']} | {p['threads']} | {name} | {x['tok_s']:.1f} | {x['speedup']:.2f}x | "
                           f"{x['bytes_per_token'] / 1e6:.1f} | {x['ceiling']:.2f}x | {_pct(x['frac_of_ceiling'])} | "
                           f"{x['weight_gbs']:.2f} | {probe} |")
        out.append("")
    if r["decode"]:
        out += ["### Decode", "", "| threads | tok/s | GB/s of weights | probe GB/s | of probe |",
                "| ---: | ---: | ---: | ---: | ---: |"]
        for key, d in r["decode"].items():
            out.append(f"| {key[1:]} | {d['tok_s']:.1f} | {d['weight_gbs']:.2f} | {d['probe_gbs']:.2f} | "
                       f"{_pct(d['frac_of_probe'])} |")
        out.append("")
    ts = r.get("thread_scaling")
    if ts:
        out += [f"### Thread scaling {ts['from']} -> {ts['to']} (end to end)", "", "| run | speedup |", "| --- | ---: |"]
        out += [f"| {key} | {v:.2f}x |" for key, v in ts.items() if key not in ("from", "to")]
        out.append("")
    peer = r.get("peer")
    if peer:
        out += ["### Peer: llama.cpp on equal weight bytes per token", ""]
        if peer.get("skipped"):
            out += [f"Skipped: {peer['skipped']}", ""]
        else:
            out += [peer["description"], "",
                    "| threads | engine | 1 column GB/s | 4 columns GB/s | 1 col tok/s | 4 col tok/s |",
                    "| ---: | --- | ---: | ---: | ---: | ---: |"]
            for row in peer["rows"]:
                out.append(f"| {row['threads']} | {row['engine']} | {row['gbs_1']:.2f} | {row['gbs_4']:.2f} | "
                           f"{row['tok_s_1']:.1f} | {row['tok_s_4']:.1f} |")
            out.append("")
    return "\n".join(out)
