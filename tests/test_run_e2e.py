"""`dflash-qualify run` end to end with real workers on ds4-tiny: sealed evidence, verify, gate,
compare protocols, and a clean stop on SIGINT with no worker left behind."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dflash_qualify.harness import protocol

EXE = str(Path(sys.executable).parent / "dflash-qualify")
LIMIT_S = 300  # only stops a hung test; nothing is timed


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=LIMIT_S,
                          env=env)


def sealed_dirs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir() and not p.name.endswith(".partial")]


def processes_with_marker(marker: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment holds our marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().split(")")[-1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_run_quick_seals_verifies_and_gates(tmp_path):
    out = tmp_path / "ev"
    done = cli("run", "exact-bands-quick", "--out", str(out), "--warmups", "1",
               "--measured", "3")
    assert done.returncode in (0, 1, 4), done.stderr  # the verdict depends on this machine
    assert "Traceback" not in done.stderr
    (d,) = sealed_dirs(out)
    assert not (d / "INCOMPLETE").exists()
    sha = hashlib.sha256((d / "manifest.json").read_bytes()).hexdigest()
    assert f"Evidence manifest SHA-256: {sha}" in done.stdout
    assert "q1 reference A" in done.stdout and "exact bands chunk 4" in done.stdout
    assert re.search(r"arm cand: measured 3/3 .* median", done.stderr)  # plain progress lines
    verify = cli("verify", str(d))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    gate = cli("gate", str(d))
    assert gate.returncode == done.returncode
    stats = json.loads((d / "stats.json").read_text())
    # exact bands must produce the q1 bytes: this holds whatever the timing verdict
    assert stats["responses"]["identical"] is True
    env = json.loads((d / "environment.json").read_text())
    assert env["invocation"] == (f"dflash-qualify run exact-bands-quick --out {out} "
                                 "--warmups 1 --measured 3")
    assert env["engine_build"]["simd_path"]
    cand = env["arms"]["cand"]
    assert cand["env"]["DFLASH_DS4_EXACT_PREFILL_BANDS"] == "1"
    assert "--chunk 4" in cand["command"] and "--threads 1" in cand["command"]
    samples = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    widths = {s["arm"]: s["band_widths"] for s in samples}
    assert widths["A"]["4"] == 0 and widths["cand"]["4"] > 0   # the arms really differ
    assert all(s["cache_hits"] == 0 for s in samples)
    assert (d / "logs" / "B.1.log").read_text().strip()   # sequential: one log per block
    assert re.search(r"block 1: gain .* bound", done.stderr)       # a look after every block


def test_run_compare_on_tiny(tmp_path):
    text = (protocol.bundled_dir() / "narrow-mmvq-compare.toml").read_text()
    text = text.replace('model = "ds4-mini"', 'model = "ds4-tiny"')
    path = tmp_path / "compare-tiny.toml"
    path.write_text(text)
    done = cli("run", str(path), "--out", str(tmp_path / "ev"), "--warmups", "0",
               "--measured", "2")
    assert done.returncode in (0, 1), done.stderr
    (d,) = sealed_dirs(tmp_path / "ev")
    samples = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    assert [(s["group"], s["arm"]) for s in samples] == [
        ("64", "main"), ("64", "pr"), ("64", "main"), ("64", "pr"),
        ("128", "main"), ("128", "pr"), ("128", "main"), ("128", "pr")]
    assert all(s["metric"] == "prefill_ms" for s in samples)
    assert cli("verify", str(d)).returncode == 0
    assert "## 64" in done.stdout and "## 128" in done.stdout


def test_sigint_leaves_incomplete_evidence_and_no_worker(tmp_path):
    marker = f"DFLASH_TEST_MARKER_{uuid.uuid4().hex}"
    env = {**os.environ, marker: "1"}
    proc = subprocess.Popen([EXE, "run", "exact-bands-quick", "--out", str(tmp_path / "ev"),
                             "--measured", "100000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stderr:  # wait until the first arm is measuring
            if "measured 2/" in line:
                break
        assert processes_with_marker(marker)  # a worker is running now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3
    assert "interrupted (SIGINT)" in err and "Traceback" not in err
    (d,) = list((tmp_path / "ev").iterdir())
    assert d.name.endswith(".partial")
    assert (d / "INCOMPLETE").read_text() == "interrupted: SIGINT"
    assert not (d / "manifest.json").exists()
    assert processes_with_marker(marker) == []
    verify = cli("verify", str(d))
    assert verify.returncode != 0


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_sigterm_is_an_interrupt_too(tmp_path, sig):
    proc = subprocess.Popen([EXE, "run", "exact-bands-quick", "--out", str(tmp_path / "ev"),
                             "--measured", "100000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "measured 1/" in line:
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3 and "interrupted (SIGTERM)" in err
    (d,) = list((tmp_path / "ev").iterdir())
    assert (d / "INCOMPLETE").read_text() == "interrupted: SIGTERM"
