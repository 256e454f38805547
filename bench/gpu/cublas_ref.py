"""cuBLAS bf16 mat-vec reference for the narrow-MMVQ acceptance (issue #9), through torch.

Usage: python3 bench/gpu/cublas_ref.py OUT.json [--reps N] [--rows N]

Times y = x @ W^T (torch.nn.functional.linear, which calls cuBLAS) for W 16384 x 16384 bf16
(512 MiB; --rows sets the row count, e.g. 32768 for the 1 GiB matrix that matches the kernel
bench's 32768 x 16384 Q8_0 shape) and x of 1..8 columns, rotating three weight matrices so no
call finds W in the 60 MB L2; CUDA events around each call, warm-ups first, median of N calls. Bytes counted: the weight
bytes streamed (2 per weight). Also times a 1 GiB device-to-device copy (read + write bytes), the
ceiling, in the same process. Runs on the device machine only (needs a CUDA GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

COLS = 16384
BUFFERS = 3
WARMUPS = 10


def median_us(fn, reps: int) -> float:
    """Median over `reps` calls of the CUDA-event time of one call, after WARMUPS calls."""
    for i in range(WARMUPS):
        fn(i)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(events):
        a.record()
        fn(WARMUPS + i)
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 for a, b in events)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=101)
    ap.add_argument("--rows", type=int, default=16384)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    rows = args.rows
    if rows < 1:
        print(f"--rows: expected a positive row count, got {rows}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    dev = torch.device("cuda")

    nbytes = 1 << 30
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_us = median_us(lambda i: dst.copy_(src), 31)
    copy_tbps = 2 * nbytes / (copy_us * 1e-6) / 1e12
    del src, dst

    weights = [torch.randn(rows, COLS, device=dev, dtype=torch.bfloat16) for _ in range(BUFFERS)]
    xs = torch.randn(8, COLS, device=dev, dtype=torch.bfloat16)
    wbytes = 2 * rows * COLS
    results = []
    for n in range(1, 9):
        x = xs[:n].contiguous()
        us = median_us(lambda i: torch.nn.functional.linear(x, weights[i % BUFFERS]), args.reps)
        results.append({"ncols": n, "us": us, "tbps": wbytes / (us * 1e-6) / 1e12,
                        "gcolweights_per_s": n * rows * COLS / (us * 1e-6) / 1e9})
    # The other layout: W @ X^T with X^T stored K-major ([K, n] contiguous), i.e. column vectors.
    results_col = []
    for n in range(1, 9):
        xt = xs[:n].T.contiguous()
        us = median_us(lambda i: torch.matmul(weights[i % BUFFERS], xt), args.reps)
        results_col.append({"ncols": n, "us": us, "tbps": wbytes / (us * 1e-6) / 1e12,
                            "gcolweights_per_s": n * rows * COLS / (us * 1e-6) / 1e9})
    # Sanity: the product is right (float64 reference on a few rows).
    y = torch.nn.functional.linear(xs[:4], weights[0])
    ref = xs[:4].double() @ weights[0][:64].double().T
    rel = float((y[:, :64].double() - ref).norm() / ref.norm())

    doc = {
        "schema": "dflash-qualify/gpu-cublas-ref/1",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "matrix": {"rows": rows, "cols": COLS, "dtype": "bfloat16", "buffers": BUFFERS, "bytes": wbytes},
        "reps": args.reps,
        "warmups": WARMUPS,
        "statistic": "median of per-call CUDA-event times",
        "copy": {"bytes": nbytes, "us": copy_us, "tbps_read_plus_write": copy_tbps},
        "check_rel_err_vs_f64": rel,
        "results": results,
        "results_w_at_xt": results_col,
        "layouts": {"results": "torch.nn.functional.linear(x[n, K], W[N, K])",
                    "results_w_at_xt": "torch.matmul(W[N, K], xt[K, n]) with xt contiguous"},
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"torch {torch.__version__} cuBLAS bf16 {rows}x{COLS}; copy 1 GiB D2D {copy_tbps:.3f} TB/s (r+w)")
    print(f"{'ncols':>5} {'linear us':>10} {'TB/s':>7} {'W@xT us':>9} {'TB/s':>7}")
    for r, q in zip(results, results_col):
        print(f"{r['ncols']:>5} {r['us']:>10.2f} {r['tbps']:>7.3f} {q['us']:>9.2f} {q['tbps']:>7.3f}")
    print(f"check rel err vs f64 (4 cols, 64 rows): {rel:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
