"""Peer benchmark: ours (ds4-mini) vs llama.cpp's `llama-bench`, interleaved in one run, bytes as read.

Usage: python bench/peers/llamacpp_bench.py [--threads 1,2] [--rounds 3] [--json FILE] [--llama-bin DIR]

llama.cpp is built natively from the source vendored in the llama-cpp-python sdist by
scripts/build_llamacpp.sh (cached outside the repo; the first call builds for ~10-20 min).
The peer model is a random-weight Q8_0 llama GGUF written here with the `gguf` package
(bench/peers/llamacpp_cpu.py build_gguf): d_model 1024 and 6 layers like ds4-mini, the
feed-forward width chosen so that one decode step's matmul weights match the counted bytes of
one ds4-mini q1 token.

Cells per thread count (the issue's table): our q1 prefill vs llama.cpp prompt processing with
`-ub 1`, our exact q4 bands vs `-ub 4`, our q1 vs llama.cpp decode (`-n`), as effective weight
GB/s = weight bytes each side actually reads / time. Byte rule: ours counts every issued matmul's
whole matrix (each position computes its logits, so the LM head is read per step) plus the F32
weight rows each step reads (HC dyn projections, router: PrefillResult.weights_read_bytes); llama.cpp in
prompt processing computes logits for the LAST token only, so every ubatch without it skips the
output head and the last layer's FFN (rows are dropped before that FFN): a P-token prompt at
ubatch u reads ceil(P/u) x (all attention + the first L-1 FFNs) + (last FFN + output head);
its decode step reads every matmul weight (token_embd is a row lookup, not counted).

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
from bench.peers.llamacpp_cpu import build_gguf, ffn_width, peer_bytes, pp_bytes  # noqa: E402
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


def measure(threads: list[int], rounds: int, bin_dir: Path) -> dict:
    """All cells, interleaved round by round; returns raw samples and per-round ratios."""
    from dflash_qualify.engine import Engine, _core
    from bench.engine.prefill import prompt_tokens

    toks = prompt_tokens(PROMPT)
    engines = {t: Engine("ds4-mini", seed=0, threads=t) for t in threads}
    q1_bpt = None
    for eng in engines.values():  # warm-up: page the weights in, spin up the pools
        res = eng.prefill(toks, chunk=1, bands=False)
        eng.prefill(toks, chunk=4, bands=True)
        q1_bpt = res.weights_read_bytes / len(toks)
    ffn = ffn_width(q1_bpt, VOCAB)
    pb = peer_bytes(ffn)
    policy = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR"}.get(
        os.sched_getscheduler(0), "other")
    out: dict = {"scheduling": f"{policy}, nice {os.nice(0)}", "ours_simd_path": _core.kernels.simd_path(), "llama_bin": str(bin_dir), "ffn": ffn, "peer_bytes": pb, "ds4_q1_bytes_per_token": q1_bpt,
                 "prompt": PROMPT, "decode_tokens": DECODE, "rounds": rounds, "per_threads": {}}
    with tempfile.TemporaryDirectory(prefix="dq-peer-") as tmp:
        model = Path(tmp) / "peer-q8_0.gguf"
        build_gguf(model, ffn)
        out["gguf_bytes"] = model.stat().st_size
        out["llama_simd"] = llama_simd(bin_dir, model)
        samples = {t: [] for t in threads}
        for rnd in range(rounds):
            for t in threads:
                print(f"peer: round {rnd + 1}/{rounds}, {t} thread(s)", flush=True)
                eng = engines[t]
                s = {"probe_gbs": float(_core.kernels.read_bandwidth_gbs(1 << 30, t, 3))}
                ref = None
                for c in (1, 4):
                    res = eng.prefill(toks, chunk=c, bands=c > 1)
                    if ref is None:
                        ref = res.logits.tobytes()
                    elif res.logits.tobytes() != ref or not res.exact:
                        raise SystemExit("q4 logits differ from q1: bands are not exact")
                    s[f"ours_q{c}_gbs"] = res.weights_read_bytes / res.prefill_ns
                    s[f"ours_q{c}_tok_s"] = len(toks) / (res.prefill_ns * 1e-9)
                for ub in (1, 4):
                    sec = run_llama_bench(bin_dir, model, t, ["-p", str(PROMPT), "-n", "0", "-ub", str(ub),
                                                              "-b", str(PROMPT)])
                    s[f"llama_ub{ub}_gbs"] = pp_bytes(pb, PROMPT, ub) / sec / 1e9
                    s[f"llama_ub{ub}_tok_s"] = PROMPT / sec
                sec = run_llama_bench(bin_dir, model, t, ["-p", "0", "-n", str(DECODE)])
                s["llama_decode_gbs"] = DECODE * pb["decode_step"] / sec / 1e9
                s["llama_decode_tok_s"] = DECODE / sec
                s["ratio_q1_ub1"] = s["ours_q1_gbs"] / s["llama_ub1_gbs"]
                s["ratio_q4_ub4"] = s["ours_q4_gbs"] / s["llama_ub4_gbs"]
                s["ratio_q1_decode"] = s["ours_q1_gbs"] / s["llama_decode_gbs"]
                samples[t].append(s)
        for t in threads:
            out["per_threads"][str(t)] = samples[t]
    return out


CELLS = (("q1 / -ub 1 prefill", "ours_q1_gbs", "llama_ub1_gbs", "ratio_q1_ub1"),
         ("q4 bands / -ub 4", "ours_q4_gbs", "llama_ub4_gbs", "ratio_q4_ub4"),
         ("q1 / decode", "ours_q1_gbs", "llama_decode_gbs", "ratio_q1_decode"))


def _span(vals: list[float], fmt: str) -> str:
    return f"{min(vals):{fmt}}-{max(vals):{fmt}}" if len(vals) > 1 else f"{vals[0]:{fmt}}"


def print_table(r: dict) -> None:
    pb = r["peer_bytes"]
    print(f"ours: ds4-mini, SIMD path {r['ours_simd_path']}, q1 {r['ds4_q1_bytes_per_token'] / 1e6:.2f} MB/token "
          f"counted; llama.cpp: llama-bench (CPU backend: {r['llama_simd']}), random Q8_0 llama GGUF "
          f"{r['gguf_bytes'] / 2**20:.1f} MiB, ffn {r['ffn']}; decode step {pb['decode_step'] / 1e6:.2f} MB, "
          f"prompt ubatch without logits {pb['ubatch_no_logits'] / 1e6:.2f} MB (+{pb['last_ubatch_extra'] / 1e6:.2f} "
          f"MB for the last); prompt {r['prompt']} tokens, decode {r['decode_tokens']}; {r['rounds']} interleaved rounds; "
          f"both sides {r['scheduling']}")
    print("| threads | cell | ours GB/s | llama.cpp GB/s | ratio (median of rounds) | ratios per round | read probe GB/s |")
    print("| ---: | --- | ---: | ---: | ---: | --- | ---: |")
    for t, rows in r["per_threads"].items():
        probe = [s["probe_gbs"] for s in rows]
        for name, ours, peer, ratio in CELLS:
            ratios = [s[ratio] for s in rows]
            print(f"| {t} | {name} | {_span([s[ours] for s in rows], '.2f')} | {_span([s[peer] for s in rows], '.2f')} "
                  f"| {statistics.median(ratios):.2f}x | {', '.join(f'{v:.2f}' for v in ratios)} | "
                  f"{_span(probe, '.1f')} |")
    print("tok/s (median of rounds):")
    for t, rows in r["per_threads"].items():
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
    args = ap.parse_args(argv)
    try:
        threads = [int(v) for v in args.threads.split(",")]
    except ValueError:
        raise SystemExit(f"--threads: expected a comma list of integers, got {args.threads!r}") from None
    if args.rounds < 1 or any(t < 1 for t in threads):
        raise SystemExit("--rounds and every --threads value must be >= 1")
    t0 = time.perf_counter()
    r = measure(threads, args.rounds, llama_bin(args.llama_bin))
    r["wall_s"] = time.perf_counter() - t0
    print_table(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
