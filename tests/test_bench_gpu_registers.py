"""bench/gpu/registers.py's pure parts: the ptxas -v parser and the register-file occupancy rule."""
from __future__ import annotations

import shutil

import pytest

from bench.gpu.registers import ctas_per_sm, parse_ptxas, ROOT, compile_report

PTXAS = """\
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'
ptxas info    : Function properties for _Z3fooPf
    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 130 registers, used 1 barriers, 256 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_Z3barv' for 'sm_90a'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_parse_ptxas_reads_each_entry_with_its_spills_and_shared_memory():
    rows = parse_ptxas(PTXAS)
    assert [(r["mangled"], r["regs"], r["spill_stores"], r["spill_loads"], r["smem"]) for r in rows] == [
        ("_Z3fooPf", 130, 8, 4, 256), ("_Z3barv", 24, 0, 0, 0)]


@pytest.mark.parametrize("regs, threads, ctas", [
    (128, 128, 4),   # 4 warps x 4096 registers = 16384: four fit 65536
    (130, 128, 3),   # 130 x 32 rounds up to 4352 per warp: three
    (96, 128, 5),
    (105, 128, 4),
    (128, 512, 1),
    (24, 128, 16),   # the 64-warp limit (registers would allow 21)
    (16, 32, 32),    # the 32-CTA limit, not the registers
    (16, 1024, 2),   # the 64-warp limit
])
def test_ctas_per_sm_follows_the_hopper_register_file(regs, threads, ctas):
    assert ctas_per_sm(regs, threads) == ctas


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
def test_the_grouped_mmvq_keeps_five_ctas_per_sm():
    rows = compile_report(ROOT / "csrc" / "cuda" / "q8_kernels.cu", shutil.which("nvcc"))
    group = [r for r in rows if "mmvq_group_kernel" in r["kernel"]]
    assert len(group) == 6  # 1- and 4-column forms at P = 1, 2, 4
    assert all(ctas_per_sm(r["regs"], 128) >= 5 for r in group), [(r["kernel"], r["regs"]) for r in group]
