"""Every SIMD path this CPU has runs the engine exactness tests (q1 == bands bitwise, threads
1 == 2) on its own, forced at start-up through DQ_SIMD_PATH, so an AVX-512 host also proves
its AVX2 path; an unavailable or unknown path is refused with a clear error."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_qualify.engine._core import kernels as K

TESTS = Path(__file__).resolve().parent
EXACTNESS = ["test_engine_exact.py"]
PATHS = K.cpu_features()["paths"]


def _env(path: str) -> dict[str, str]:
    return {**os.environ, "DQ_SIMD_PATH": path}


@pytest.mark.parametrize("path", PATHS)
def test_forced_path_is_taken_at_start_up(path: str) -> None:
    code = ("from dflash_qualify.engine._core import kernels as K; "
            "print(K.simd_path(), repr(K.simd_path_env_error()))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(path), capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [path, "''"]


@pytest.mark.parametrize("path", PATHS)
def test_exactness_tests_pass_on_each_path(path: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 't'}",
           *(str(TESTS / t) for t in EXACTNESS)]
    res = subprocess.run(cmd, env=_env(path), capture_output=True, text=True, cwd=TESTS.parent)
    assert res.returncode == 0, f"exactness tests failed on {path}:\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}"


def test_unknown_path_is_refused_with_the_choices() -> None:
    code = ("from dflash_qualify.engine import Engine, EngineError\n"
            "try:\n    Engine('ds4-tiny', threads=1)\nexcept EngineError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env("sse9"), capture_output=True, text=True,
                         check=True).stdout
    assert "refused: DQ_SIMD_PATH names no SIMD path" in out and "'sse9'" in out and "'scalar'" in out

