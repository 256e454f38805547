"""Where a replayed GPU step goes, kernel by kernel, from the GPU's own timestamps (not a test).

Usage: python bench/gpu/timeline.py [--model ds4-gpu] [--tokens 128] [--modes 1,4] [--json FILE]

CUDA events around each op (bench/gpu/prefill.py's DQ_GPU_OP_TIMING) need launched steps, and
each event adds a few us; `%globaltimer` inside a kernel ticks coarsely. This reads the kernel
records that CUPTI writes for the replayed CUDA graphs themselves, through PyTorch's profiler
(kineto), which traces every kernel of the process, ours included. Needs torch with CUDA.

Under programmatic dependent launch a kernel starts (its CTAs become resident and wait at
`griddepcontrol.wait`) before its predecessor ends, so a kernel's own duration overlaps the
previous one's. What a kernel costs the step is what it adds to the chain: its end minus the
previous kernel's end ("adds"). Per kernel of the step (median over the steps of the prefill):
adds, the duration from its start, and how early it started (the previous end minus its start).
Kernels are named by site: the launch order within a layer is fixed (gpu_model.cu's enqueue).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from dflash_qualify.engine import Engine, cuda_unavailable_reason, tokenize

TEXT = ("Exact prefill bands let an engine read each weight block once for several prompt tokens "
        "while every token is still reduced in exactly the order a one-token step would use. ")


def short_name(name: str) -> str:
    """The kernel's function name without namespaces, template arguments or parameters."""
    base = re.sub(r"\(.*$", "", name.replace("(anonymous namespace)", ""))
    depth, out = 0, []
    for ch in base:  # drop template arguments (nested <...>)
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">"
    return "".join(out).split("::")[-1].strip() or name


def site_names(kernels: list[str]) -> list[str]:
    """A site label per kernel of one step, from the fixed launch order (gpu_model.cu enqueue):
    the first boundary is embed + HC pre; in a layer the dense matmul after a boundary is the
    q/kv projection and the one after attention / pool the output projection; the grouped
    product after a boundary is the MoE up, after SwiGLU the MoE down; the last matmul the head."""
    out, layer, prev = [], -1, ""
    boundaries = 0
    for k in kernels:
        if k == "k_hc_step":
            site = ("embed_pre" if boundaries == 0 else
                    "hc_post_pre_route" if boundaries % 2 == 1 else "combine_post_pre")
            boundaries += 1
            if boundaries % 2 == 1:
                layer += 1
        elif k.startswith("mmvq_group"):
            site = "moe_down" if prev.startswith("k_swiglu") or "swiglu" in prev else "moe_up"
        elif k.startswith("mmvq") or k.startswith("mmq"):
            site = ("proj" if prev == "k_hc_step" and boundaries % 2 == 1 else
                    "w_o" if prev in ("k_attend", "k_pool") else "lm_head")
        else:
            site = k.removeprefix("k_")
        out.append(f"L{layer} {site}" if 0 <= layer and site not in ("embed_pre", "lm_head", "step_end") else site)
        prev = k
    last = max((i for i, k in enumerate(kernels) if k == "k_hc_step"), default=-1)
    if last > 0:  # the final boundary (combine + HC post + final norm), then the head
        out[last] = "combine_post_final"
        out[last + 1:] = ["lm_head" if k.startswith(("mmvq", "mmq")) else k.removeprefix("k_")
                          for k in kernels[last + 1:]]
    return out


def trace_steps(eng: Engine, toks: list[int], chunk: int) -> list[dict]:
    """Kernel records of one replayed prefill (graphs captured by a warm-up first)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    eng.prefill(toks, chunk=chunk, bands=chunk > 1)  # capture the graphs, warm everything
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        res = eng.prefill(toks, chunk=chunk, bands=chunk > 1)
        torch.cuda.synchronize()
    kernels = []
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        start = ev.time_range.start
        end = ev.time_range.end
        if end <= start:
            continue
        kernels.append({"name": ev.name, "start_us": float(start), "end_us": float(end)})
    kernels = [k for k in kernels if not k["name"].startswith(("Memcpy", "Memset", "cudaMem"))]
    kernels.sort(key=lambda k: k["start_us"])
    if not res.exact:
        raise SystemExit(f"timeline: q{chunk} prefill was not exact")
    return kernels


def per_site(kernels: list[dict]) -> dict:
    """Split the records into steps (each ends with k_step_end), keep the steps of the most
    common kernel count (the replayed graph's) but the first, and per position the median adds,
    duration and early start over them."""
    steps, cur = [], []
    for k in kernels:
        cur.append(k)
        if short_name(k["name"]) == "k_step_end":
            steps.append(cur)
            cur = []
    counts = statistics.multimode(len(s) for s in steps) if steps else []
    if not counts:
        raise SystemExit("timeline: no k_step_end in the trace (graph kernels missing from it?)")
    per = max(counts)
    idx = [i for i, s in enumerate(steps) if len(s) == per and i > 0]
    if len(idx) < 2:
        raise SystemExit(f"timeline: fewer than two replayed steps of {per} kernels in the trace")
    names = [short_name(k["name"]) for k in steps[idx[0]]]
    sites = site_names(names)
    out = []
    for p in range(per):
        adds, durs, early = [], [], []
        for i in idx:
            step = steps[i]
            prev_end = step[p - 1]["end_us"] if p else steps[i - 1][-1]["end_us"]
            k = step[p]
            durs.append(k["end_us"] - k["start_us"])
            adds.append(k["end_us"] - prev_end)
            early.append(prev_end - k["start_us"])
        out.append({"site": sites[p], "kernel": names[p], "adds_us": statistics.median(adds),
                    "dur_us": statistics.median(durs), "early_us": statistics.median(early)})
    spans = [steps[i][-1]["end_us"] - steps[i - 1][-1]["end_us"] for i in idx]
    return {"kernels_per_step": per, "steps_used": len(idx), "steps_traced": len(steps),
            "step_us": statistics.median(spans), "kernels": out}


def by_site(rows: list[dict]) -> list[tuple[str, float, int]]:
    """Adds summed over layers per site kind, largest first."""
    acc: dict[str, list[float]] = {}
    for r in rows:
        key = re.sub(r"^L\d+ ", "", r["site"])
        acc.setdefault(key, []).append(r["adds_us"] or 0.0)
    return sorted(((k, sum(v), len(v)) for k, v in acc.items()), key=lambda t: -t[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ds4-gpu")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--modes", default="1,4", help="step widths, comma-separated (default 1,4)")
    ap.add_argument("--json", help="write every kernel's figures as JSON to this file")
    ap.add_argument("--all", action="store_true", help="print every kernel of the step, not only the sums")
    args = ap.parse_args(argv)
    why = cuda_unavailable_reason()
    if why:
        print(f"timeline: no CUDA GPU: {why}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        print("timeline: needs torch (its profiler reads CUPTI's kernel records)", file=sys.stderr)
        return 2
    try:
        modes = [int(m) for m in args.modes.split(",")]
    except ValueError:
        print(f"timeline: --modes: expected comma-separated step widths like 1,4, got {args.modes!r}", file=sys.stderr)
        return 2
    eng = Engine(args.model, seed=0, device="cuda")
    toks = tokenize(TEXT * (args.tokens // len(TEXT) + 2))[:args.tokens]
    result = {}
    for c in modes:
        r = per_site(trace_steps(eng, toks, c))
        result[f"q{c}"] = r
        total_adds = sum(k["adds_us"] or 0.0 for k in r["kernels"])
        print(f"## q{c}: {r['kernels_per_step']} kernels per step, step {r['step_us']:.1f} us "
              f"(median over {r['steps_used']} of {r['steps_traced']} steps; adds sum {total_adds:.1f} us)")
        print("| site | kernels | adds us/step | share |")
        print("| --- | ---: | ---: | ---: |")
        for site, us, cnt in by_site(r["kernels"]):
            print(f"| {site} | {cnt} | {us:.1f} | {us / max(total_adds, 1e-9) * 100:.1f}% |")
        if args.all:
            print("\n| # | site | kernel | adds us | dur us | early us |")
            print("| ---: | --- | --- | ---: | ---: | ---: |")
            for i, k in enumerate(r["kernels"]):
                print(f"| {i} | {k['site']} | {k['kernel']} | {k['adds_us'] or 0:.2f} | {k['dur_us']:.2f} | "
                      f"{k['early_us'] or 0:.2f} |")
        print()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
