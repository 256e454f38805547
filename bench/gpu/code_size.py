"""SASS size of every CUDA kernel and the source lines that make it, from nvdisasm (no GPU needed).

Usage: python bench/gpu/code_size.py [--filter TEXT] [--top N] [--json FILE]

Why: a kernel that runs once per launch with little work per thread is bound by fetching its
own code when that code is not cached on the SM (bench/gpu/launch_floor.cu's second table: on the
H200 115 KB of straight-line code ran at ~6 KB/us when two such kernels alternated; docs/gpu.md).
Compiles each csrc/cuda/*.cu for sm_90a as the package build does (`-O3 -std=c++17`,
`--fmad=false` on gpu_*.cu) with `-lineinfo` into a cubin, disassembles it with `nvdisasm -g`, and
prints per kernel its instruction count and bytes, then the --top source lines by instructions
(a runtime-count loop that the compiler unrolled by four shows up here).

Needs nvcc, and nvdisasm: on PATH, beside nvcc, in $DQ_NVDISASM, or the one in the triton
wheel (`pip download --no-deps --only-binary=:all: triton`, then unzip its
triton/backends/nvidia/bin/nvdisasm).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.gpu.registers import ROOT, build_flags, cuda_sources, demangle  # noqa: E402

INSTR_BYTES = 16  # every sm_90 instruction
SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTR = re.compile(r"/\*[0-9a-f]{4,6}\*/\s+\S")


def parse_sass(text: str) -> dict[str, Counter]:
    """Instruction counts per (file name, line) for each kernel section of `nvdisasm -g` output."""
    kernels: dict[str, Counter] = {}
    cur: Counter | None = None
    where = ("?", 0)
    for line in text.splitlines():
        if m := SECTION.match(line):
            cur = kernels.setdefault(m.group(1), Counter())
            where = ("?", 0)
        elif m := LINE.search(line):
            where = (Path(m.group(1)).name, int(m.group(2)))
        elif cur is not None and INSTR.search(line):
            cur[where] += 1
    return kernels


def find_nvdisasm(nvcc: str) -> str | None:
    for cand in (os.environ.get("DQ_NVDISASM"), shutil.which("nvdisasm"), str(Path(nvcc).parent / "nvdisasm")):
        if cand and Path(cand).is_file():
            return cand
    spec = importlib.util.find_spec("triton")
    if spec and spec.origin:
        cand = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        if cand.is_file():
            return str(cand)
    return None


def kernel_sizes(source: Path, nvcc: str, nvdisasm: str) -> dict[str, Counter]:
    flags = [*build_flags(source), "-arch=sm_90a", "-lineinfo", "-cubin"]
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "x.cubin"
        p = subprocess.run([nvcc, *flags, str(source), "-o", str(cubin)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"error: nvcc failed on {source.relative_to(ROOT)}:\n{p.stderr[-3000:]}")
        d = subprocess.run([nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True)
    if d.returncode != 0:
        raise SystemExit(f"error: nvdisasm failed on {source.relative_to(ROOT)}:\n{d.stderr[-2000:]}")
    return parse_sass(d.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    ap.add_argument("--top", type=int, default=12, help="source lines to list per kernel (default 12)")
    ap.add_argument("--json", help="also write every kernel's per-line counts to this file")
    args = ap.parse_args()
    if args.top < 0:
        print(f"error: --top must be 0 or more, got {args.top}", file=sys.stderr)
        return 2
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("error: nvcc is not on PATH (this report compiles csrc/cuda to cubins)", file=sys.stderr)
        return 1
    nvdisasm = find_nvdisasm(nvcc)
    if nvdisasm is None:
        print("error: no nvdisasm (PATH, beside nvcc, $DQ_NVDISASM or the triton wheel's; see --help)",
              file=sys.stderr)
        return 1
    report = {}
    for src in cuda_sources():
        per = kernel_sizes(src, nvcc, nvdisasm)
        for mangled, name in zip(per, demangle(list(per))):
            if args.filter in name:
                report[name] = (src.name, per[mangled])
    print("| kernel | file | instructions | KB |")
    print("|---|---|---:|---:|")
    for name, (f, c) in sorted(report.items(), key=lambda kv: -sum(kv[1][1].values())):
        n = sum(c.values())
        print(f"| {name} | {f} | {n} | {n * INSTR_BYTES / 1024:.1f} |")
    for name, (f, c) in report.items():
        if args.top == 0 or sum(c.values()) < 256:
            continue
        print(f"\n{name}: top source lines by instructions")
        for (file, line), n in c.most_common(args.top):
            print(f"  {n:5d}  {file}:{line}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {k: {"file": f, "lines": {f"{a}:{b}": n for (a, b), n in c.items()}} for k, (f, c) in report.items()},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
