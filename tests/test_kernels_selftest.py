"""The Q8_0 kernels without Python, under ASan + UBSan: tests/cpp/kernels_selftest.cpp (every SIMD
path this CPU has, narrow MMVQ on the x16 layout bitwise equal to the scalar reference for ncols
1..12, threads 1..3, partial 16-row groups and odd block counts; MMQ thread-count independent)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_kernel_selftest_passes_under_sanitizers(tmp_path):
    run = subprocess.run(["sh", str(ROOT / "tests" / "cpp" / "run_selftest.sh")], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "OUT_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "all passed" in run.stdout
