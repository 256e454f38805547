"""Peer benchmark on CUDA: ds4-gpu q1..q4 vs llama.cpp's CUDA backend (`llama-bench`), bytes as read.

Usage: python bench/peers/llamacpp_cuda.py [--llama-bin DIR] [--rounds 3] [--tokens 512]
                                           [--kernels-json kernels_bench.json] [--json FILE] [--markdown FILE]

llama.cpp: `scripts/build_llamacpp.sh --cuda` (the llama-cpp-python 0.3.36 sdist's vendored
source, `-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF`, target llama-bench,
cached outside the repo; DQ_LLAMA_SDIST names a local copy of the sdist on a machine without
the network). The peer model is a random-weight Q8_0 llama GGUF written here (d_model 4096,
4 layers, 32 heads; bench/peers/llamacpp_cpu.py build_gguf) whose decode step reads about the
counted weight bytes of one ds4-gpu q1 step (the feed-forward width is solved for it).

Cells, measured in interleaved rounds on one GPU (each round: our q1..q4 on one 512-token
prompt, then llama-bench decode `-p 0 -n 128`, prefill `-p 512 -ub 1` and `-p 512 -ub 4`, all
`-ngl 99`): tokens/s and TB/s of weight bytes actually read. Byte rule: ours counts every
issued matmul's whole matrix per step (each position computes its logits); llama.cpp's prompt
processing computes logits for the last token only, so each ubatch without it skips the last
layer's FFN and the output head; its decode step reads every matmul weight (token_embd is a
row lookup, not counted). Ratios: our q1 / decode, our q1 / `-ub 1`, our q4 / `-ub 4`, in
TB/s, per round, median over rounds with the range.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.peers.llama_build import llama_bin  # noqa: E402
from bench.peers.random_gguf import VOCAB  # noqa: E402
from bench.peers.llamacpp_cpu import GPU_SHAPE, build_gguf, ffn_width, peer_bytes, pp_bytes  # noqa: E402

DECODE = 128


def run_llama_bench(bin_dir: Path, model: Path, args: list[str]) -> float:
    """Seconds of one llama-bench test on the GPU (its warm-up run, then the median of 3)."""
    cmd = [str(bin_dir / "llama-bench"), "-m", str(model), "-ngl", "99", "-r", "3", "-o", "json", *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"llama-bench failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}")
    rows = json.loads(res.stdout)
    return statistics.median(float(x) for x in rows[0]["samples_ns"]) * 1e-9


def measure(bin_dir: Path, rounds: int, tokens: int, read_tbs: float | None) -> dict:
    """Every cell, interleaved round by round; raw samples and per-round ratios."""
    from bench.gpu.prefill import prompt_tokens
    from dflash_qualify.engine import Engine

    eng = Engine("ds4-gpu", seed=0, device="cuda")
    toks = prompt_tokens(tokens)
    n = len(toks)
    # warm-up (graph capture per step width, lazy module loading), also giving each mode's bytes
    ours_bytes = {c: eng.prefill(toks, chunk=c, bands=c > 1).weight_bytes for c in (1, 2, 3, 4)}
    q1_bpt = ours_bytes[1] / n
    shape = GPU_SHAPE
    ffn = ffn_width(q1_bpt, VOCAB, shape)
    pb = peer_bytes(ffn, shape)
    tmp = Path(tempfile.mkdtemp(prefix="dq-peer-cuda-"))
    model = tmp / "peer-q8_0.gguf"
    t0 = time.perf_counter()
    print(f"peer: writing a Q8_0 llama GGUF (d_model {shape.d_model}, {shape.n_layers} layers, "
          f"ffn {ffn}: {pb['decode_step'] / 1e6:.1f} MB per decode step; ours {q1_bpt / 1e6:.1f} MB "
          f"per q1 token)", flush=True)
    build_gguf(model, ffn, seed=0, shape=shape)
    print(f"peer: GGUF written in {time.perf_counter() - t0:.0f} s", flush=True)
    cells = {"q1": [], "q2": [], "q3": [], "q4": [], "decode": [], "ub1": [], "ub4": []}
    for k in range(rounds):
        for c in (1, 2, 3, 4):
            res = eng.prefill(toks, chunk=c, bands=c > 1)
            s = res.prefill_ns * 1e-9
            cells[f"q{c}"].append({"tok_s": n / s, "tbs": res.weight_bytes / s / 1e12})
        s = run_llama_bench(bin_dir, model, ["-p", "0", "-n", str(DECODE)])
        cells["decode"].append({"tok_s": DECODE / s, "tbs": DECODE * pb["decode_step"] / s / 1e12})
        for u in (1, 4):
            s = run_llama_bench(bin_dir, model, ["-p", str(n), "-n", "0", "-b", str(n), "-ub", str(u)])
            cells[f"ub{u}"].append({"tok_s": n / s, "tbs": pp_bytes(pb, n, u) / s / 1e12})
        print(f"round {k + 1}/{rounds}: ours q1 {cells['q1'][-1]['tbs']:.2f} TB/s, q4 "
              f"{cells['q4'][-1]['tbs']:.2f}; llama.cpp decode {cells['decode'][-1]['tbs']:.2f}, "
              f"-ub 1 {cells['ub1'][-1]['tbs']:.2f}, -ub 4 {cells['ub4'][-1]['tbs']:.2f}", flush=True)
    ratios = {name: [cells[a][i]["tbs"] / cells[b][i]["tbs"] for i in range(rounds)]
              for name, (a, b) in {"q1 / decode": ("q1", "decode"), "q1 / -ub 1": ("q1", "ub1"),
                                   "q4 / -ub 4": ("q4", "ub4")}.items()}
    info = eng.build_info()
    return {"gpu": info["cuda"].get("gpu"), "tokens": n, "rounds": rounds, "read_stream_tbs": read_tbs,
            "ours_bytes_per_step": {f"q{c}": ours_bytes[c] / math.ceil(n / c) for c in ours_bytes},
            "peer": {"shape": shape.__dict__, "ffn": ffn, "bytes": pb, "decode_tokens": DECODE,
                     "llama_bin": str(bin_dir)},
            "cells": cells, "ratios": ratios}


def _med(vals: list[float]) -> float:
    return statistics.median(vals)


def markdown(r: dict) -> str:
    rs = r["read_stream_tbs"]
    share = (lambda t: f"{100 * t / rs:.0f}%") if rs else (lambda t: "-")
    lines = [f"## ds4-gpu vs llama.cpp CUDA on {r['gpu']}, {r['tokens']}-token prompt, {r['rounds']} "
             "interleaved rounds", "",
             "Read stream of this instance: " + (f"{rs:.3f} TB/s (kernels_bench.json)." if rs else
                                                 "not measured (no --kernels-json)."),
             f"Peer: random Q8_0 llama, d_model {r['peer']['shape']['d_model']}, "
             f"{r['peer']['shape']['n_layers']} layers, ffn {r['peer']['ffn']}, "
             f"{r['peer']['bytes']['decode_step'] / 1e6:.1f} MB per decode step; ours "
             f"{r['ours_bytes_per_step']['q1'] / 1e6:.1f} MB per q1 step.", "",
             "| side | case | tok/s | TB/s read | of read stream |", "| --- | --- | ---: | ---: | ---: |"]
    names = {"q1": ("ours", "q1 prefill"), "q2": ("ours", "q2 bands"), "q3": ("ours", "q3 bands"),
             "q4": ("ours", "q4 bands"), "decode": ("llama.cpp", f"decode `-p 0 -n {DECODE}`"),
             "ub1": ("llama.cpp", f"prefill `-p {r['tokens']} -ub 1`"),
             "ub4": ("llama.cpp", f"prefill `-p {r['tokens']} -ub 4`")}
    for key, (side, case) in names.items():
        tok = _med([x["tok_s"] for x in r["cells"][key]])
        tbs = _med([x["tbs"] for x in r["cells"][key]])
        lines.append(f"| {side} | {case} | {tok:.1f} | {tbs:.3f} | {share(tbs)} |")
    lines += ["", "| ratio (TB/s, per round) | median | range |", "| --- | ---: | --- |"]
    for name, vals in r["ratios"].items():
        lines.append(f"| {name} | {_med(vals):.2f}x | {min(vals):.2f}-{max(vals):.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", help="folder with a CUDA llama-bench (default: build_llamacpp.sh --cuda's cache)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--kernels-json", help="kernels_bench.json of this machine (its read_stream TB/s)")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    from bench.gpu.prefill import read_stream_tbs
    from dflash_qualify.engine import cuda_unavailable_reason

    why = cuda_unavailable_reason()
    if why:
        print(f"llamacpp_cuda: no CUDA GPU: {why}", file=sys.stderr)
        return 2
    r = measure(llama_bin(args.llama_bin, cuda=True), args.rounds, args.tokens, read_stream_tbs(args.kernels_json))
    text = markdown(r)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
