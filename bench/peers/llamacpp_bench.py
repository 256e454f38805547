"""Peer benchmark: ours (ds4-mini) vs llama.cpp's `llama-bench`, interleaved in one run, bytes as read.

Usage: python bench/peers/llamacpp_bench.py [--threads 1,2] [--rounds 3] [--peers dense,moe]
       [--json FILE] [--llama-bin DIR]

llama.cpp is built natively from the source vendored in the llama-cpp-python sdist by
scripts/build_llamacpp.sh (cached outside the repo; the first call builds for ~10-20 min).
The peer models are random-weight Q8_0 GGUFs written here with the `gguf` package
(bench/peers/llamacpp_cpu.py), each sized so that one decode step reads the counted bytes of
one ds4-mini q1 token: `dense`, a llama (d_model 1024, 6 layers, the feed-forward width chosen),
whose whole ~60 MiB file is one step; `moe`, a Qwen2-MoE of ds4-mini's layout (16 routed experts,
top 2, a shared expert, one K/V head; the expert width chosen), whose ~270 MiB file is about
ds4-mini's 259 MiB. On a host whose last-level cache holds 60 MiB but not 260, only the dense
peer runs from cache; the MoE peer has ds4-mini's footprint as well as its bytes per token.

Cells per thread count (the issue's table): our q1 prefill vs llama.cpp prompt processing with
`-ub 1`, our exact q4 bands vs `-ub 4`, our q1 vs llama.cpp decode (`-n`), as effective weight
GB/s = weight bytes each side actually reads / time. Byte rule: ours counts every issued matmul's
whole matrix (each position computes its logits, so the LM head is read per step) plus the F32
weight rows each step reads (HC dyn projections, router: PrefillResult.weights_read_bytes); llama.cpp in
prompt processing computes logits for the LAST token only, so every ubatch without it skips the
output head and the last layer's FFN (rows are dropped before that FFN): a P-token prompt at
ubatch u reads ceil(P/u) x (all attention + the first L-1 FFNs) + (last FFN + output head);
its decode step reads every matmul weight (token_embd is a row lookup, not counted). On the MoE
peer "every matmul weight" is the attention, the F32 router rows, the shared expert and the
top-2 routed experts per layer (llama.cpp's per-expert matmul skips experts no row uses); a
ubatch of u > 1 tokens is credited the expected number of distinct routed experts under uniform
independent routing (llamacpp_cpu.moe_union: 6.62 of 16 at u = 4), since llama-bench does not
report which experts its random router chose.

Each round takes, per thread count: the read probe (1 GiB, far above L3), our q1 and q4, then
llama-bench pp -ub 1, pp -ub 4 and tg, so a shared host's drift hits both sides alike; ratios
are formed per round, and the table shows their median over rounds with the range. Both sides
run with the scheduling this process has (llama-bench's default --prio 0 keeps it); on a shared
host run the whole bench under one policy, e.g. `chrt -f 10 python bench/peers/llamacpp_bench.py`,
so neither side is preempted (llama.cpp's OpenMP barriers collapse at 2 threads when a core is
taken away: ~17 vs ~110 decode tok/s at 1 thread on the shared dev VM).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
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
from bench.peers.llamacpp_cpu import (  # noqa: E402
    MOE_SHAPE, PEER_KINDS, build_gguf, build_moe_gguf, ffn_width, moe_ffn_width, moe_peer_bytes, moe_pp_bytes,
    moe_union, peer_bytes, pp_bytes)
from bench.peers.random_gguf import VOCAB  # noqa: E402

PROMPT = 128
DECODE = 32


def llama_simd(bin_dir: Path, model: Path) -> str:
    """The CPU features llama.cpp's CPU backend reports using (its system_info line, printed by
    llama-server at start-up; llama-bench prints none). The server binds 127.0.0.1 only and is
    stopped as soon as the line appears. Without llama-server: the build is native
    (GGML_NATIVE=ON), so the CPU's own SIMD flags are what it was compiled for."""
    if not (bin_dir / "llama-server").is_file():
        flags = open("/proc/cpuinfo").read().split("\nflags", 1)[-1].split("\n", 1)[0].split()
        keep = [f for f in ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_int8")
                if f in flags]
        return "no llama-server to ask; native build on a CPU with " + " ".join(keep)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
           "-t", "1", "-lv", "4"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = "system_info not seen"
    try:
        deadline = time.monotonic() + 30
        for line in proc.stdout:
            if "system_info" in line and "CPU :" in line:
                found = " | ".join(f.strip() for f in line.split("CPU :", 1)[1].split("|")
                                   if f.strip().endswith("= 1"))
                break
            if time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return found


def run_llama_bench(bin_dir: Path, model: Path, threads: int, args: list[str]) -> float:
    """Seconds of one llama-bench test (its own warm-up run first, then one timed repetition)."""
    cmd = [str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(threads), "-r", "1", "-o", "json", *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"llama-bench failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}")
    rows = json.loads(res.stdout)
    return float(rows[0]["samples_ns"][0]) * 1e-9


def _peer_models(kinds: list[str], q1_bpt: float, tmp: Path) -> dict:
    """Writes each peer kind's GGUF sized to q1_bpt bytes per decode step; returns per kind its
    file, width, byte rule (decode step, prompt at -ub 1 and -ub 4) and description."""
    peers = {}
    for kind in kinds:
        model = tmp / f"peer-{kind}-q8_0.gguf"
        if kind == "dense":
            ffn = ffn_width(q1_bpt, VOCAB)
            pb = peer_bytes(ffn)
            build_gguf(model, ffn)
            pp = {ub: pp_bytes(pb, PROMPT, ub) for ub in (1, 4)}
            desc = f"random Q8_0 llama, ffn {ffn}"
        else:
            ffn = moe_ffn_width(q1_bpt)
            pb = moe_peer_bytes(ffn)
            build_moe_gguf(model, ffn)
            pp = {ub: moe_pp_bytes(ffn, PROMPT, ub) for ub in (1, 4)}
            desc = (f"random Q8_0 Qwen2-MoE, {MOE_SHAPE.n_expert} experts top {MOE_SHAPE.n_used} + shared, "
                    f"expert ffn {ffn}, {MOE_SHAPE.n_head_kv} K/V head; -ub 4 credited "
                    f"{moe_union(4):.2f} routed experts per layer and ubatch (moe_union)")
        peers[kind] = {"kind": kind, "model": model, "ffn": ffn, "peer_bytes": {k: v for k, v in pb.items() if k != "parts"},
                       "pp_bytes": pp, "gguf_bytes": model.stat().st_size, "description": desc}
    return peers


def measure(threads: list[int], rounds: int, bin_dir: Path, kinds: list[str] | None = None) -> dict:
    """All cells, interleaved round by round (per thread count: the probe, our q1 and q4, then each
    peer's -ub 1, -ub 4 and decode); returns raw samples and per-round ratios per peer kind."""
    from dflash_qualify.engine import Engine, _core
    from bench.engine.prefill import prompt_tokens

    kinds = list(kinds or PEER_KINDS)
    toks = prompt_tokens(PROMPT)
    engines = {t: Engine("ds4-mini", seed=0, threads=t) for t in threads}
    q1_bpt = None
    for eng in engines.values():  # warm-up: page the weights in, spin up the pools
        res = eng.prefill(toks, chunk=1, bands=False)
        eng.prefill(toks, chunk=4, bands=True)
        q1_bpt = res.weights_read_bytes / len(toks)
    policy = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR"}.get(
        os.sched_getscheduler(0), "other")
    out: dict = {"scheduling": f"{policy}, nice {os.nice(0)}", "ours_simd_path": _core.kernels.simd_path(),
                 "llama_bin": str(bin_dir), "ds4_q1_bytes_per_token": q1_bpt, "prompt": PROMPT,
                 "decode_tokens": DECODE, "rounds": rounds, "peers": {}}
    with tempfile.TemporaryDirectory(prefix="dq-peer-") as tmp:
        peers = _peer_models(kinds, q1_bpt, Path(tmp))
        out["llama_simd"] = llama_simd(bin_dir, peers[kinds[0]]["model"])
        samples = {(k, t): [] for k in kinds for t in threads}
        for rnd in range(rounds):
            for t in threads:
                print(f"peer: round {rnd + 1}/{rounds}, {t} thread(s)", flush=True)
                eng = engines[t]
                ours = {"probe_gbs": float(_core.kernels.read_bandwidth_gbs(1 << 30, t, 3))}
                ref = None
                for c in (1, 4):
                    res = eng.prefill(toks, chunk=c, bands=c > 1)
                    if ref is None:
                        ref = res.logits.tobytes()
                    elif res.logits.tobytes() != ref or not res.exact:
                        raise SystemExit("q4 logits differ from q1: bands are not exact")
                    ours[f"ours_q{c}_gbs"] = res.weights_read_bytes / res.prefill_ns
                    ours[f"ours_q{c}_tok_s"] = len(toks) / (res.prefill_ns * 1e-9)
                for kind in kinds:
                    pr, s = peers[kind], dict(ours)
                    for ub in (1, 4):
                        sec = run_llama_bench(bin_dir, pr["model"], t, ["-p", str(PROMPT), "-n", "0", "-ub", str(ub),
                                                                        "-b", str(PROMPT)])
                        s[f"llama_ub{ub}_gbs"] = pr["pp_bytes"][ub] / sec / 1e9
                        s[f"llama_ub{ub}_tok_s"] = PROMPT / sec
                    sec = run_llama_bench(bin_dir, pr["model"], t, ["-p", "0", "-n", str(DECODE)])
                    s["llama_decode_gbs"] = DECODE * pr["peer_bytes"]["decode_step"] / sec / 1e9
                    s["llama_decode_tok_s"] = DECODE / sec
                    s["ratio_q1_ub1"] = s["ours_q1_gbs"] / s["llama_ub1_gbs"]
                    s["ratio_q4_ub4"] = s["ours_q4_gbs"] / s["llama_ub4_gbs"]
                    s["ratio_q1_decode"] = s["ours_q1_gbs"] / s["llama_decode_gbs"]
                    samples[(kind, t)].append(s)
        for kind in kinds:
            pr = peers[kind]
            out["peers"][kind] = {k: v for k, v in pr.items() if k != "model"}
            out["peers"][kind]["per_threads"] = {str(t): samples[(kind, t)] for t in threads}
    return out


CELLS = (("q1 / -ub 1 prefill", "ours_q1_gbs", "llama_ub1_gbs", "ratio_q1_ub1"),
         ("q4 bands / -ub 4", "ours_q4_gbs", "llama_ub4_gbs", "ratio_q4_ub4"),
         ("q1 / decode", "ours_q1_gbs", "llama_decode_gbs", "ratio_q1_decode"))


def _span(vals: list[float], fmt: str) -> str:
    return f"{min(vals):{fmt}}-{max(vals):{fmt}}" if len(vals) > 1 else f"{vals[0]:{fmt}}"


def print_table(r: dict) -> None:
    print(f"ours: ds4-mini, SIMD path {r['ours_simd_path']}, q1 {r['ds4_q1_bytes_per_token'] / 1e6:.2f} MB/token "
          f"counted; llama.cpp: llama-bench (CPU backend: {r['llama_simd']}); prompt {r['prompt']} tokens, decode "
          f"{r['decode_tokens']}; {r['rounds']} interleaved rounds; both sides {r['scheduling']}")
    for kind, pr in r["peers"].items():
        pb = pr["peer_bytes"]
        print(f"\npeer `{kind}`: {pr['description']}; GGUF {pr['gguf_bytes'] / 2**20:.1f} MiB; decode step "
              f"{pb['decode_step'] / 1e6:.2f} MB, prompt at -ub 1 {pr['pp_bytes'][1] / PROMPT / 1e6:.2f} MB/token, "
              f"at -ub 4 {pr['pp_bytes'][4] / PROMPT / 1e6:.2f} MB/token")
        print("| threads | cell | ours GB/s | llama.cpp GB/s | ratio (median of rounds) | ratios per round | read probe GB/s |")
        print("| ---: | --- | ---: | ---: | ---: | --- | ---: |")
        for t, rows in pr["per_threads"].items():
            probe = [s["probe_gbs"] for s in rows]
            for name, ours, peer, ratio in CELLS:
                ratios = [s[ratio] for s in rows]
                print(f"| {t} | {name} | {_span([s[ours] for s in rows], '.2f')} | {_span([s[peer] for s in rows], '.2f')} "
                      f"| {statistics.median(ratios):.2f}x | {', '.join(f'{v:.2f}' for v in ratios)} | "
                      f"{_span(probe, '.1f')} |")
        print("tok/s (median of rounds):")
        for t, rows in pr["per_threads"].items():
            med = {k: statistics.median(s[k] for s in rows) for k in rows[0] if k.endswith("tok_s")}
            print(f"  {t} thread(s): ours q1 {med['ours_q1_tok_s']:.1f}, q4 {med['ours_q4_tok_s']:.1f}; llama.cpp "
                  f"-ub 1 {med['llama_ub1_tok_s']:.1f}, -ub 4 {med['llama_ub4_tok_s']:.1f}, decode "
                  f"{med['llama_decode_tok_s']:.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts (both sides use the same)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--json", help="also write the raw samples as JSON to this file")
    ap.add_argument("--llama-bin", help="folder with llama-bench (default: scripts/build_llamacpp.sh's cache)")
    ap.add_argument("--peers", default=",".join(PEER_KINDS),
                    help="comma list of peer models: dense (a llama), moe (a Qwen2-MoE of ds4-mini's layout)")
    args = ap.parse_args(argv)
    kinds = [k for k in args.peers.split(",") if k]
    bad = [k for k in kinds if k not in PEER_KINDS]
    if bad or not kinds:
        raise SystemExit(f"--peers: expected a comma list of {', '.join(PEER_KINDS)}, got {args.peers!r}")
    try:
        threads = [int(v) for v in args.threads.split(",")]
    except ValueError:
        raise SystemExit(f"--threads: expected a comma list of integers, got {args.threads!r}") from None
    if args.rounds < 1 or any(t < 1 for t in threads):
        raise SystemExit("--rounds and every --threads value must be >= 1")
    t0 = time.perf_counter()
    r = measure(threads, args.rounds, llama_bin(args.llama_bin), kinds)
    r["wall_s"] = time.perf_counter() - t0
    print_table(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
