"""Registers, spills and resident CTAs per SM of every CUDA kernel, from ptxas (no GPU needed).

Usage: python bench/gpu/registers.py [--filter TEXT] [--threads 128,256,512] [--json FILE]

Compiles each csrc/cuda/*.cu for sm_90a as the package build does (`-O3 -std=c++17`,
`--fmad=false` on gpu_*.cu), with `-Xptxas -v`, and prints one row per kernel: registers, spill
stores/loads, static shared memory, and how many CTAs of each block size fit per SM by their
registers and the SM's limits (Hopper: 65536 registers, allocated per warp in units of 256; at
most 64 warps and 32 CTAs); shared memory can lower it further. A kernel a few registers above
a step (130 at 128 threads: three CTAs where 128 gives four) is the thing to look for; that one
cost q4 8% until e309593 bounded it. Needs nvcc on PATH.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGS_PER_SM = 65536
MAX_CTAS_PER_SM = 32
MAX_WARPS_PER_SM = 64
WARP_ALLOC_UNIT = 256  # registers, per warp

ENTRY = re.compile(r"Compiling entry function '([^']+)' for 'sm_90a'")
USED = re.compile(r"Used (\d+) registers")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
SMEM = re.compile(r"(\d+) bytes smem")


def ctas_per_sm(regs: int, threads: int) -> int:
    """CTAs of `threads` threads that fit one SM's register file at `regs` per thread."""
    warps = (threads + 31) // 32
    per_warp = -(-max(regs, 1) * 32 // WARP_ALLOC_UNIT) * WARP_ALLOC_UNIT
    return min(MAX_CTAS_PER_SM, MAX_WARPS_PER_SM // warps, REGS_PER_SM // (per_warp * warps))


def parse_ptxas(text: str) -> list[dict]:
    """Kernel rows from `ptxas -v` output (entry, then its spill and usage lines)."""
    rows: list[dict] = []
    cur: dict | None = None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            cur = {"mangled": m.group(1), "regs": None, "spill_stores": 0, "spill_loads": 0, "smem": 0}
            rows.append(cur)
        elif cur is not None and (m := SPILL.search(line)):
            cur["spill_stores"], cur["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif cur is not None and (m := USED.search(line)):
            cur["regs"] = int(m.group(1))
            if s := SMEM.search(line):
                cur["smem"] = int(s.group(1))
    return [r for r in rows if r["regs"] is not None]


def demangle(names: list[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if tool is None:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return [re.sub(r"\(.*", "", n.replace("(anonymous namespace)::", "")).removeprefix("void ")
            for n in out.splitlines()]


def build_flags(source: Path) -> list[str]:
    """nvcc flags of the package build for one csrc/cuda source, without the target options."""
    flags = ["-O3", "-std=c++17", f"-I{ROOT / 'csrc'}", f"-I{sysconfig.get_paths()['include']}"]
    try:
        import pybind11  # the build's own include path, when the package's build deps are here
        flags.append(f"-I{pybind11.get_include()}")
    except ImportError:
        pass
    if source.name.startswith("gpu_"):
        flags.append("--fmad=false")
    return flags


def cuda_sources():
    """csrc/cuda/*.cu in name order, each announced on stderr as it is compiled (both reports)."""
    for src in sorted((ROOT / "csrc" / "cuda").glob("*.cu")):
        print(f"compiling {src.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
        yield src


def compile_report(source: Path, nvcc: str) -> list[dict]:
    flags = [*build_flags(source), "--generate-code=arch=compute_90a,code=[sm_90a]", "-Xptxas", "-v"]
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([nvcc, *flags, "-c", str(source), "-o", str(Path(tmp) / "x.o")],
                           capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"error: nvcc failed on {source.relative_to(ROOT)}:\n{p.stderr[-3000:]}")
    rows = parse_ptxas(p.stderr + p.stdout)
    for row, name in zip(rows, demangle([r["mangled"] for r in rows])):
        row["kernel"], row["file"] = name, source.name
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    ap.add_argument("--threads", default="128,256,512", help="block sizes for the CTAs/SM columns")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        print(f"error: --threads expects a comma list of whole numbers, got '{args.threads}'", file=sys.stderr)
        return 2
    if any(t < 32 or t > 1024 for t in threads):
        print(f"error: --threads: block sizes must be 32..1024, got {args.threads}", file=sys.stderr)
        return 2
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("error: nvcc is not on PATH (this report compiles csrc/cuda with ptxas -v)", file=sys.stderr)
        return 1
    rows = []
    for src in cuda_sources():
        rows += [r for r in compile_report(src, nvcc) if args.filter in r["kernel"]]
    for r in rows:
        r["ctas_per_sm"] = {t: ctas_per_sm(r["regs"], t) for t in threads}
    heads = " | ".join(f"CTAs/SM @{t}" for t in threads)
    print(f"| kernel | file | registers | spill st/ld (bytes) | smem | {heads} |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(threads))
    for r in sorted(rows, key=lambda r: (r["file"], r["kernel"])):
        occ = " | ".join(str(r["ctas_per_sm"][t]) for t in threads)
        print(f"| {r['kernel']} | {r['file']} | {r['regs']} | {r['spill_stores']}/{r['spill_loads']} | "
              f"{r['smem']} | {occ} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
