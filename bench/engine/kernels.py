"""Kernel benchmark: bandwidth roofline, narrow MMVQ and MMQ throughput, crossover, threads.

Usage: python bench/engine/kernels.py [--json FILE] [--quick] [--threads N]

Timing happens inside C++ (`_core.kernels.bench_mul_mat`: one warm-up call, then the best of
`repeats` calls on a random matrix built in C++), so Python overhead is not measured. Every
SIMD path is checked against the scalar reference on a small case before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from dflash_qualify.engine._core import kernels as K

GIB = 1 << 30
BLOCK_BYTES = 34


def check_paths() -> None:
    """Refuse to time anything until every path's MMVQ equals the reference bitwise."""
    rng = np.random.default_rng(0)
    w = K.quantize_q8_0(rng.standard_normal((19, 256)).astype(np.float32))
    x = K.quantize_q8_0(rng.standard_normal((8, 256)).astype(np.float32))
    ref = np.array(
        [[K.vec_dot_ref(w[n], x[c]) for n in range(w.shape[0])] for c in range(8)],
        dtype=np.float32,
    )
    for path in K.cpu_features()["paths"]:
        assert K.set_simd_path(path)
        for ncols in range(1, 9):
            y = K.mul_mat(w, x[:ncols], "mmvq", 2)
            if not np.array_equal(y.view(np.uint32), ref[:ncols].view(np.uint32)):
                raise SystemExit(f"MMVQ on {path} ncols={ncols} differs from the reference")
    assert K.set_simd_path("auto")


def run_mul_mat(rows: int, k: int, ncols: int, kernel: str, threads: int, repeats: int) -> dict:
    r = K.bench_mul_mat(rows, k, ncols, kernel, threads, repeats)
    sec = r["best_ns"] * 1e-9
    gbs = r["weight_bytes"] / sec / 1e9
    gops = 2.0 * rows * k * ncols / sec / 1e9  # int8 multiply + add per weight per column
    return {
        "rows": rows,
        "k": k,
        "ncols": ncols,
        "kernel": kernel,
        "threads": threads,
        "best_ns": r["best_ns"],
        "median_ns": r["median_ns"],
        "weight_gbs": gbs,
        "weight_cols_per_s": gbs * ncols,
        "int8_gops": gops,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--quick", action="store_true", help="small matrices (smoke run)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--path", default="auto", help="SIMD path: auto, scalar, avx2, avx512vnni, amx")
    ap.add_argument("--sections", default="mmvq,mmq,threads", help="comma list of mmvq, mmq, threads")
    args = ap.parse_args(argv)

    check_paths()
    if not K.set_simd_path(args.path):
        raise SystemExit(f"SIMD path {args.path!r} not available here")
    t = args.threads
    # Large case: >= 1 GiB of Q8_0 weights (well above the LLC), K = 4096.
    k = 4096
    big_rows = (256 << 20) // (k // 32 * BLOCK_BYTES) if args.quick else (GIB + (k // 32 * BLOCK_BYTES) - 1) // (k // 32 * BLOCK_BYTES)
    probe_bytes = (256 << 20) if args.quick else GIB
    reps = 3 if args.quick else 5

    out: dict = {
        "host": platform.node(),
        "machine": platform.machine(),
        "simd_path": K.simd_path(),
        "cpu_features": K.cpu_features(),
        "threads": t,
        "stamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    probe = K.read_bandwidth_gbs(probe_bytes, t, reps)
    out["probe_gbs"] = probe
    print(f"simd path {K.simd_path()}, threads {t}")
    print(f"read-bandwidth probe: {probe:.2f} GB/s ({probe_bytes / GIB:.2f} GiB buffer)")

    sections = set(args.sections.split(","))
    if "mmvq" in sections:
        bench_mmvq(out, big_rows, k, t, reps, probe)
    mid_rows = big_rows // 4
    if "mmq" in sections:
        bench_mmq(out, mid_rows, k, t, reps)
    if "threads" in sections:
        bench_threads(out, mid_rows, k, reps)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


def bench_mmvq(out: dict, big_rows: int, k: int, t: int, reps: int, probe: float) -> None:
    print(f"\nMMVQ, W = {big_rows} x {k} ({big_rows * k // 32 * BLOCK_BYTES / GIB:.2f} GiB Q8_0)")
    print(f"{'ncols':>5} {'ms':>9} {'GB/s W':>8} {'% probe':>8} {'cols*GB/s':>10} {'GOP/s':>8}")
    mmvq = []
    for nc in range(1, 9):
        r = run_mul_mat(big_rows, k, nc, "mmvq", t, reps)
        r["pct_probe"] = 100.0 * r["weight_gbs"] / probe
        mmvq.append(r)
        print(f"{nc:>5} {r['best_ns'] / 1e6:>9.2f} {r['weight_gbs']:>8.2f} {r['pct_probe']:>7.1f}% "
              f"{r['weight_cols_per_s']:>10.2f} {r['int8_gops']:>8.1f}")
    out["mmvq"] = mmvq
    ratio4 = mmvq[3]["weight_cols_per_s"] / mmvq[0]["weight_cols_per_s"]
    out["mmvq_ncols4_over_ncols1"] = ratio4
    print(f"ncols4 / ncols1 weight-columns per second: {ratio4:.2f}x")



def bench_mmq(out: dict, mid_rows: int, k: int, t: int, reps: int) -> None:
    # MMQ vs MMVQ on a quarter-size matrix.
    print(f"\nMMQ vs MMVQ, W = {mid_rows} x {k} ({mid_rows * k // 32 * BLOCK_BYTES / GIB:.2f} GiB)")
    print(f"{'ncols':>5} {'MMQ ms':>9} {'MMVQ ms':>9} {'MMQ/MMVQ':>9}")
    mmq = []
    mmvq_ns: dict[int, int] = {}
    for nc in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64):
        rq = run_mul_mat(mid_rows, k, nc, "mmq", t, reps)
        # MMVQ handles at most 8 columns per call: wider batches take ceil(nc/8) calls.
        ns_v = 0
        for c0 in range(0, nc, 8):
            width = min(8, nc - c0)
            if width not in mmvq_ns:  # same matrix shape and width: time it once
                mmvq_ns[width] = run_mul_mat(mid_rows, k, width, "mmvq", t, reps)["best_ns"]
            ns_v += mmvq_ns[width]
        rq["mmvq_ns"] = ns_v
        rq["mmq_over_mmvq_time"] = rq["best_ns"] / ns_v
        mmq.append(rq)
        print(f"{nc:>5} {rq['best_ns'] / 1e6:>9.2f} {ns_v / 1e6:>9.2f} {rq['mmq_over_mmvq_time']:>9.2f}")
    out["mmq"] = mmq
    # Crossover: the smallest measured ncols from which MMQ is faster at every wider width.
    crossover = None
    for r in reversed(mmq):
        if r["best_ns"] >= r["mmvq_ns"]:
            break
        crossover = r["ncols"]
    out["crossover_ncols"] = crossover
    print(f"MMQ faster than MMVQ from ncols = {crossover} on (MMVQ > 8 columns = several calls)")



def bench_threads(out: dict, mid_rows: int, k: int, reps: int) -> None:
    print("\nthread scaling (MMVQ ncols 1 and 4, MMQ ncols 32, mid matrix)")
    scaling = []
    for kernel, nc in (("mmvq", 1), ("mmvq", 4), ("mmq", 32)):
        r1 = run_mul_mat(mid_rows, k, nc, kernel, 1, reps)
        r2 = run_mul_mat(mid_rows, k, nc, kernel, 2, reps)
        sp = r1["best_ns"] / r2["best_ns"]
        scaling.append({"kernel": kernel, "ncols": nc, "t1_ns": r1["best_ns"], "t2_ns": r2["best_ns"], "speedup": sp})
        print(f"{kernel:>5} ncols {nc:>2}: 1 thread {r1['best_ns'] / 1e6:8.2f} ms, 2 threads {r2['best_ns'] / 1e6:8.2f} ms, {sp:.2f}x")
    out["thread_scaling"] = scaling
    # Model-sized small mat-vec: dispatch overhead matters here.
    small = [run_mul_mat(512, 1024, 1, "mmvq", tt, 50) for tt in (1, 2)]
    out["small_512x1024"] = small
    print(f"small 512x1024 mat-vec: 1 thread {small[0]['best_ns'] / 1e3:.1f} us, 2 threads {small[1]['best_ns'] / 1e3:.1f} us")


if __name__ == "__main__":
    sys.exit(main())
