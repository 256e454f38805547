"""bench/gpu/code_size.py's nvdisasm parser: instructions per kernel and source line."""
from __future__ import annotations

from bench.gpu.code_size import parse_sass

SASS = """\
	.section	.text._Z3fooPf,"ax",@progbits
_Z3fooPf:
	//## File "/src/csrc/cuda/gpu_hc.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
	//## File "/usr/include/crt/sm_90_rt.hpp", line 182
        /*0020*/                   ULDC UR4, c[0x0][0x188] ;
.L_x_1:
	//## File "/src/csrc/cuda/gpu_hc.cu", line 10
        /*10a00*/                  EXIT ;
	.section	.text._Z3barv,"ax",@progbits
        /*0000*/                   NOP ;
"""


def test_parse_sass_counts_instructions_per_kernel_and_line():
    k = parse_sass(SASS)
    assert set(k) == {"_Z3fooPf", "_Z3barv"}
    assert k["_Z3fooPf"] == {("gpu_hc.cu", 10): 3, ("sm_90_rt.hpp", 182): 1}
    assert sum(k["_Z3barv"].values()) == 1  # before any line marker: file "?"
