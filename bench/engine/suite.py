"""The benchmark suite: every section measured in one process, one after another, into one dict.

Sections (all on this machine, in this order):
  kernels  read-bandwidth probe, narrow MMVQ ncols 1..8 and MMQ ncols 1..64 on a 1 GiB matrix
           (GB/s of weights, int8 GOP/s, MMVQ/MMQ crossover), kernel thread scaling
  prefill  ds4-mini q1 and exact bands q2..q4 on 128- and 512-token prompts per thread count:
           tok/s, speedup, counted-bytes ceiling, fraction of ceiling, q1 GB/s vs the probe
  decode   greedy decode tok/s and its effective weight bandwidth per thread count
  peer     llama.cpp (optional extra `peer`) on a random Q8_0 llama GGUF of equal bytes per token
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from dflash_qualify.engine import Engine, _core

from . import kernels, prefill
from ..peers import llamacpp_cpu as peer_llamacpp

SECTIONS = ("kernels", "prefill", "decode", "peer")
FORMAT_VERSION = 1  # 1: first version (probe, kernels, prefill, decode, thread scaling, peer)
GIB = 1 << 30


@dataclass
class SuiteConfig:
    threads: list[int] = field(default_factory=lambda: [1, 2])
    repeats: int = 3
    quick: bool = False
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    prompts: tuple[int, ...] = (128, 512)
    decode_tokens: int = 32


def machine() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "logical_cpus": os.cpu_count(), "machine": platform.machine(),
            "simd_path": _core.kernels.simd_path(), "cpu_features": _core.kernels.cpu_features(),
            "loadavg_start": os.getloadavg(), "python": platform.python_version()}


def _kernels(cfg: SuiteConfig, out: dict) -> None:
    kernels.check_paths()
    t = max(cfg.threads)
    k = 4096
    row_bytes = k // 32 * kernels.BLOCK_BYTES
    size = (256 << 20) if cfg.quick else GIB
    rows = (size + row_bytes - 1) // row_bytes
    reps = 3
    probe = _core.kernels.read_bandwidth_gbs(size, t, reps)
    kern: dict = {"threads": t, "k": k, "rows": rows, "matrix_bytes": rows * row_bytes, "probe_gbs": probe}
    print(f"read-bandwidth probe ({size / GIB:.2f} GiB, {t} threads): {probe:.2f} GB/s")
    kernels.bench_mmvq(kern, rows, k, t, reps, probe)
    kernels.bench_mmq(kern, rows, k, t, reps)
    kernels.bench_threads(kern, rows // 4, k, reps)
    kern["probe_after_gbs"] = _core.kernels.read_bandwidth_gbs(size, t, reps)
    out["kernels"] = kern


def _decode(eng: Engine, n_prompt: int, n_decode: int, repeats: int) -> dict:
    toks = prefill.prompt_tokens(n_prompt)
    samples = []
    eng.generate(toks, max_tokens=4)  # warm-up
    for _ in range(repeats):
        r = eng.generate(toks, max_tokens=n_decode)
        t = r.timings
        if t["generated_tokens"] == 0:
            continue
        samples.append({"tok_s": t["generated_tokens"] / (t["decode_ns"] * 1e-9),
                        "weight_gbs": t["weight_bytes_decode"] / t["decode_ns"],
                        "tokens": t["generated_tokens"]})
    return {"prompt_tokens": n_prompt, "max_tokens": n_decode,
            "tok_s": statistics.median(s["tok_s"] for s in samples),
            "weight_gbs": statistics.median(s["weight_gbs"] for s in samples), "samples": samples}


def run(cfg: SuiteConfig, on_section: Callable[[dict], None] | None = None) -> dict:
    prompts = (32, 64) if cfg.quick else cfg.prompts
    model = "ds4-tiny" if cfg.quick else "ds4-mini"
    out: dict = {"format_version": FORMAT_VERSION, "stamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "machine": machine(), "model": model, "threads": cfg.threads, "repeats": cfg.repeats,
                 "quick": cfg.quick, "prefill": {}, "decode": {}}

    def done() -> None:
        if on_section:
            on_section(out)

    if "kernels" in cfg.sections:
        _kernels(cfg, out)
        done()
    for t in cfg.threads:
        if not {"prefill", "decode"} & set(cfg.sections):
            break
        eng = Engine(model, seed=0, threads=t)
        if "prefill" in cfg.sections:
            for n in prompts:
                print(f"\nprefill {model} {n} tokens, {t} thread(s)")
                r = prefill.measure(model, n, t, cfg.repeats, engine=eng)
                prefill.print_table(r)
                out["prefill"][f"{n}/t{t}"] = r
                done()
        if "decode" in cfg.sections:
            d = _decode(eng, prompts[0], cfg.decode_tokens, cfg.repeats)
            d["probe_gbs"] = _core.kernels.read_bandwidth_gbs((256 << 20) if cfg.quick else GIB, t, 3)
            d["frac_of_probe"] = d["weight_gbs"] / d["probe_gbs"]
            print(f"decode {t} thread(s): {d['tok_s']:.1f} tok/s, {d['weight_gbs']:.2f} GB/s of weights "
                  f"({d['frac_of_probe'] * 100:.0f}% of probe {d['probe_gbs']:.2f})")
            out["decode"][f"t{t}"] = d
            done()
        del eng
    out["thread_scaling"] = _thread_scaling(out)
    if "peer" in cfg.sections:
        out["peer"] = peer_llamacpp.run(out, threads=cfg.threads, quick=cfg.quick)
        done()
    out["loadavg_end"] = os.getloadavg()
    return out


def _thread_scaling(out: dict) -> dict:
    """End-to-end 1 -> 2 (or first -> last) thread speedups from the prefill and decode runs."""
    ts = out["threads"]
    if len(ts) < 2:
        return {}
    a, b = ts[0], ts[-1]
    res: dict = {"from": a, "to": b}
    for key in out["prefill"]:
        n, t = key.split("/")
        if t != f"t{a}" or f"{n}/t{b}" not in out["prefill"]:
            continue
        for mode in ("q1", "q4"):
            res[f"prefill {n} {mode}"] = (out["prefill"][f"{n}/t{b}"]["modes"][mode]["tok_s"]
                                         / out["prefill"][key]["modes"][mode]["tok_s"])
    if f"t{a}" in out["decode"] and f"t{b}" in out["decode"]:
        res["decode"] = out["decode"][f"t{b}"]["tok_s"] / out["decode"][f"t{a}"]["tok_s"]
    return res
