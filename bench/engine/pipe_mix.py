"""Which vector ops share execution pipes on this CPU: throughput of op pairs, 12 chains each.

Usage: python bench/engine/pipe_mix.py [--pairs dp+fma,cvt+fma,...]

Each case is a loop of 12 independent ymm chains (enough to hide every latency here), half of
them one op and half the other, written as inline asm, compiled with `g++ -O2 -march=native` and
timed by rdtsc (best of 5). Figures are TSC ticks per 12 ops: compare them with each other, not
with a clock. Two ops that share pipes take as long together as either alone; two that do not
take less. Needs g++; `dp` and `fma_bcast` need AVX-512 VL + VNNI (the `avx512vnni` path's ops),
the others AVX2 + FMA. Without AVX-512 the default pairs are the AVX2 body's ops.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from dflash_qualify.engine._core import kernels as K

OPS = {  # AT&T operands: {r} the chain's register; ymm14/15 constant inputs; %1 a float buffer
    "dp": "vpdpbusd %%ymm14, %%ymm15, {r}",
    "fma": "vfmadd231ps %%ymm14, %%ymm15, {r}",
    "fma_bcast": "vfmadd231ps 4(%1)%{{1to8%}}, %%ymm15, {r}",
    "mul": "vmulps %%ymm14, {r}, {r}",
    "add": "vaddps %%ymm14, {r}, {r}",
    "cvt": "vcvtdq2ps {r}, {r}",
    "perm": "vpermilps $0x39, {r}, {r}",
    "bcast_load": "vbroadcastss 8(%1), {r}",
    "maddwd": "vpmaddwd %%ymm15, {r}, {r}",
    "maddubs": "vpmaddubsw %%ymm15, {r}, {r}",
    "pxor": "vpxor %%ymm14, {r}, {r}",
    "sign": "vpsignb %%ymm14, {r}, {r}",
    "abs": "vpabsb {r}, {r}",
    "add32": "vpaddd %%ymm14, {r}, {r}",
}
AVX512_OPS = {"dp": "AVX-512 VL + VNNI (vpdpbusd on ymm)", "fma_bcast": "AVX-512 VL (an embedded {1to8} broadcast)"}
DEFAULT_AVX2 = ("maddubs+maddubs,maddwd+maddwd,sign+sign,abs+abs,add32+add32,maddubs+maddwd,maddubs+sign,"
                "maddwd+sign,maddubs+add32,sign+add32,fma+fma,cvt+fma,mul+fma,bcast_load+bcast_load,"
                "maddubs+bcast_load,pxor+pxor")
DEFAULT = ("dp+dp,fma+fma,dp+fma,maddwd+fma,maddubs+fma,mul+fma,cvt+fma,perm+fma,add+fma,"
           "dp+cvt,dp+perm,fma_bcast+fma_bcast,fma_bcast+cvt,bcast_load+bcast_load,bcast_load+cvt")


def source(pairs: list[tuple[str, str]]) -> str:
    """The C++ program timing every pair."""
    lines = ["#include <cstdio>", "#include <cstdint>", "#include <x86intrin.h>",
             "constexpr long N = 20000000;", "alignas(64) float buf[64];"]
    clobbers = ",".join(f'"xmm{k}"' for k in (*range(12), 14, 15))
    for n, (a, b) in enumerate(pairs):
        body = " ".join('"' + OPS[a if k % 2 == 0 else b].format(r=f"%%ymm{k}") + '\\n\\t"'
                        for k in range(12))
        lines.append(
            f"static uint64_t t{n}() {{ uint64_t t = __rdtsc(); long n = N; asm volatile("
            f'"vpxor %%ymm14,%%ymm14,%%ymm14\\n\\tvpxor %%ymm15,%%ymm15,%%ymm15\\n\\t1:\\n\\t" {body} '
            f'"dec %0\\n\\tjnz 1b" : "+r"(n) : "r"(buf) : {clobbers}, "cc", "memory"); '
            f"return __rdtsc() - t; }}")
    lines.append("int main() { for (int i = 0; i < 64; ++i) buf[i] = 1.0f;")
    for n, (a, b) in enumerate(pairs):
        lines.append(f'{{ uint64_t best = ~0ull; for (int r = 0; r < 5; ++r) {{ uint64_t t = t{n}(); '
                     f'if (t < best) best = t; }} printf("{a}+{b} %.3f\\n", double(best) / N); }}')
    lines.append("}")
    return "\n".join(lines)


def parse_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        a, sep, b = item.strip().partition("+")
        if not sep or a not in OPS or b not in OPS:
            raise SystemExit(f"error: --pairs: '{item}' is not OP+OP with OP one of {', '.join(OPS)}")
        pairs.append((a, b))
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=None,
                    help="comma list of OP+OP (default: the avx512vnni path's ops, or the AVX2 body's "
                         "on a CPU without AVX-512 VNNI)")
    args = ap.parse_args()
    feats = K.cpu_features()
    avx512 = feats["avx512vl"] and feats["avx512vnni"]
    pairs = parse_pairs(args.pairs or (DEFAULT if avx512 else DEFAULT_AVX2))
    missing = sorted({op for pair in pairs for op in pair if op in AVX512_OPS}) if not avx512 else []
    if missing:
        needs = "; ".join(f"'{op}' needs {AVX512_OPS[op]}" for op in missing)
        print(f"error: --pairs: {needs}, which this CPU does not have; the AVX2 ops are "
              f"{', '.join(o for o in OPS if o not in AVX512_OPS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "pipes.cpp", Path(tmp) / "pipes"
        src.write_text(source(pairs))
        cc = subprocess.run(["g++", "-O2", "-march=native", "-o", str(exe), str(src)],
                            capture_output=True, text=True)
        if cc.returncode != 0:
            print(f"error: g++ failed:\n{cc.stderr[-2000:]}",
                  file=sys.stderr)
            return 1
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    print("| ops (6 + 6 chains) | TSC ticks per 12 ops |\n| --- | ---: |")
    for line in out.split("\n"):
        if line:
            name, ticks = line.split()
            print(f"| {name} | {ticks} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
