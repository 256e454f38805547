"""Benchmark (not a test): the harness's own overhead per request, as a fraction of request time.

For every measured request the runner's full loop time (from one request's completed record
to the next) is split into the engine's own timed work (prefill_ns + decode_ns as the engine
reports them) and everything else, which is the harness's overhead, itself split into the
writer (response hashing, the fsync'd samples.jsonl append, progress), the transport (JSON
lines over the worker's pipes) and engine work outside its own timers (tokenize, session
set-up, detokenize) as seen by the worker.

    python bench/harness/overhead.py [--protocol exact-bands-aba] [--measured 10]

Target: under 1% on ds4-mini. Evidence is written to a temporary directory and removed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness.evidence import EvidenceWriter
from dflash_qualify.harness.runner import Event, Runner


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", default="exact-bands-aba")
    ap.add_argument("--measured", type=int, default=10)
    ap.add_argument("--warmups", type=int, default=2)
    args = ap.parse_args(argv)

    loaded = protocol_mod.load(args.protocol, warmups=args.warmups, measured=args.measured)
    proto = loaded.resolved
    stamps: list[tuple[str, str, float]] = []   # (arm, phase, perf_counter at record written)

    def on_event(e: Event) -> None:
        if e.kind == "request":
            stamps.append((e.arm, e.phase, time.perf_counter()))

    with tempfile.TemporaryDirectory(prefix="dflash-overhead-") as tmp:
        writer = EvidenceWriter.create(Path(tmp), proto["name"])
        samples = Runner(proto, writer, on_event=on_event).run()

    print(f"protocol {proto['name']} on {proto['target']['model']}: "
          f"{args.warmups} warm-ups + {args.measured} measured per arm, "
          f"{proto['prompts'][0]['bytes']}-byte prompt, max_tokens {proto['max_tokens']}")
    print(f"{'arm':<6} {'loop ms':>9} {'engine ms':>10} {'in-runner ms':>13} "
          f"{'overhead ms':>12} {'overhead %':>11}   of which: writer / transport / "
          f"engine untimed (ms)")
    all_loop, all_engine, n_loops = 0.0, 0.0, 0
    for arm in proto["schedule"]:
        rows = [(s, t) for s, (a, ph, t) in zip(samples, stamps) if a == arm]
        loops, engines, walls, parts = [], [], [], []
        for (prev, t_prev), (cur, t_cur) in zip(rows, rows[1:]):
            if cur["phase"] != "measured":
                continue
            loops.append((t_cur - t_prev) * 1e3)
            engines.append(cur["prefill_ms"] + cur["decode_ms"])
            walls.append(cur["wall_ms"])
            worker = cur.get("worker_ms") or cur["wall_ms"]
            parts.append(((t_cur - t_prev) * 1e3 - cur["wall_ms"],   # record, hash, fsync, UI
                          cur["wall_ms"] - worker,                     # JSON lines over pipes
                          worker - engines[-1]))                       # engine, outside its timers
        loop, eng = sum(loops), sum(engines)
        all_loop += loop
        all_engine += eng
        n_loops += len(loops)
        over = [lp - e for lp, e in zip(loops, engines)]
        print(f"{arm:<6} {statistics.median(loops):>9.3f} {statistics.median(engines):>10.3f} "
              f"{statistics.median(walls):>13.3f} {statistics.median(over):>12.3f} "
              f"{100 * (loop - eng) / loop:>10.3f}%   "
              + " / ".join(f"{statistics.median(p[k] for p in parts):.3f}" for k in range(3)))
    frac = (all_loop - all_engine) / all_loop
    print(f"harness overhead: {100 * frac:.3f}% of request time "
          f"({(all_loop - all_engine) / max(1, n_loops):.3f} ms per request; "
          f"target < 1%): {'OK' if frac < 0.01 else 'ABOVE TARGET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
