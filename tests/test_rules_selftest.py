"""The shared routing rule (csrc/common/engine_rules.h) at any lane count: tests/cpp/rules_selftest.cpp."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_route_from_logits_matches_serial_top_k_at_any_lane_count(tmp_path):
    exe = tmp_path / "rules_selftest"
    build = subprocess.run(
        ["g++", "-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread", f"-I{ROOT / 'csrc'}",
         str(ROOT / "tests" / "cpp" / "rules_selftest.cpp"), "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 of 20000 cases differ" in run.stdout
