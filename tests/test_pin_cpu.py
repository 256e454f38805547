"""[target] pin_cpu: every arm's worker pinned to one CPU, validated, resolved and recorded."""
from __future__ import annotations

from evidence_factory import fixed_n_text

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_qualify.harness import protocol
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.targets.worker import resolve_pin_cpu

EXE = str(Path(sys.executable).parent / "dflash-qualify")
pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux CPU affinity")


def quick_with(tmp_path: Path, pin_line: str) -> Path:
    text = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text())
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith("pin_cpu")]
    text = "".join(lines).replace('[target]\nkind = "embedded"\n', f'[target]\nkind = "embedded"\n{pin_line}')
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("value", ['"fast"', "-1", "4096", "true", "1.5"])
def test_bad_pin_cpu_names_the_field(tmp_path, value):
    with pytest.raises(UsageError, match=r'target.pin_cpu: expected "auto" or a CPU number 0..4095'):
        protocol.load(str(quick_with(tmp_path, f"pin_cpu = {value}\n")))


def test_pin_cpu_resolves_on_this_machine():
    allowed = sorted(os.sched_getaffinity(0))
    assert resolve_pin_cpu(None) is None
    assert resolve_pin_cpu("auto") == allowed[-1]
    assert resolve_pin_cpu(allowed[0]) == allowed[0]
    missing = next(c for c in range(4096) if c not in allowed)
    with pytest.raises(UsageError, match=f"CPU {missing} is not available to this process"):
        resolve_pin_cpu(missing)


def test_pinned_run_records_one_cpu_per_arm_and_unpinned_records_the_set(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    for name, line, expect in (("pinned", 'pin_cpu = "auto"\n', [allowed[-1]]), ("free", "", allowed)):
        out = tmp_path / name
        proc = subprocess.run([EXE, "run", str(quick_with(tmp_path, line)), "--out", str(out),
                               "--warmups", "0", "--measured", "1"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        (ev,) = [p for p in out.iterdir() if p.is_dir()]
        env = json.loads((ev / "environment.json").read_text())
        assert {a: v["cpu_affinity"] for a, v in env["arms"].items()} == {a: expect for a in ("A", "cand", "B")}
        assert json.loads((ev / "protocol.json").read_text())["target"]["pin_cpu"] == ("auto" if line else None)
