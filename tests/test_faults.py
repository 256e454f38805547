"""Faults end a run the same way: a named reason, exit 3, no process left, and a `.partial`
evidence directory that `verify` rejects as incomplete; a re-run never overwrites evidence.

Every run is the real `dflash-qualify run` in a subprocess with a marker variable in its
environment, so /proc shows every process it (or its workers) started. Faulty workers are
command targets (tests/test_worker.py checks the worker target alone); the killed worker,
the engine exception, the full disk and the signals use the real ds4-tiny worker.
"""
from __future__ import annotations

from evidence_factory import fixed_n_text

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from dflash_qualify.harness import protocol

EXE = str(Path(sys.executable).parent / "dflash-qualify")
LIMIT_S = 300  # only stops a hung test; nothing is timed

# A worker that speaks the protocol and fails on request #2 the way FAULT_MODE says. It starts
# a child in its process group first, so a leftover grandchild would be caught as well.
FAULTY = r'''
import base64, json, os, subprocess, sys, time
mode = os.environ["FAULT_MODE"]
child = subprocess.Popen(["sleep", "3600"])
print(f"faulty worker {os.getpid()} mode {mode}", file=sys.stderr, flush=True)
if mode == "exit-at-start":
    print("fatal: cannot open /models/missing.gguf", file=sys.stderr, flush=True)
    sys.exit(7)
print(json.dumps({"ready": True, "engine": {"name": "faulty"}, "model": {"name": "faulty"},
                  "config_hash": "faulty-1"}), flush=True)
for n, line in enumerate(sys.stdin, 1):
    req = json.loads(line)
    if n == 2 and mode == "hang":
        time.sleep(3600)
    if n == 2 and mode == "garbage":
        print("Segmentation fault (core dumped)", flush=True)
        continue
    if n == 2 and mode == "exit":
        print("fatal: device lost", file=sys.stderr, flush=True)
        os._exit(7)
    data = req["prompt"][:4].encode()
    print(json.dumps({"id": req["id"], "response_b64": base64.b64encode(data).decode(),
                      "timings": {"prompt_tokens": 8, "prefill_ms": 2.0, "decode_ms": 1.0,
                                  "cache_hits": 0, "generated_tokens": 4}}), flush=True)
'''

COMMAND_PROTOCOL = """\
schema_version = 1
kind = "bracket"
name = "faulty"
[target]
kind = "command"
command = ["{{python}}", "{script}"]
[measure]
warmups = 1
measured = 3
request_timeout_s = {request_s}
arm_timeout_s = {arm_s}
[[prompts]]
id = "p"
text = "hello faults"
[[arms]]
id = "A"
role = "reference"
env = {{ FAULT_MODE = "{mode}" }}
[[arms]]
id = "cand"
role = "candidate"
[[arms]]
id = "B"
role = "reference"
"""


@dataclass
class Fault:
    """What one faulty run left: exit code, stderr, its evidence directory, leftover pids."""

    returncode: int
    stderr: str
    evidence: Path
    leftover: list[int]


def processes_with_marker(marker: str, exclude: int | None = None) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment holds our marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == exclude:
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def marked_env() -> tuple[str, dict[str, str]]:
    marker = f"DFLASH_FAULT_MARKER_{uuid.uuid4().hex}"
    return marker, {**os.environ, marker: "1"}


def only_dir(root: Path) -> Path:
    (d,) = list(root.iterdir())
    return d


def finish(proc: subprocess.Popen, marker: str, root: Path) -> Fault:
    """Wait for the harness, then collect its evidence directory and any process it left."""
    try:
        _, err = proc.communicate(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Fault(proc.returncode, err, only_dir(root), processes_with_marker(marker))


def run_protocol(tmp_path: Path, path: Path, *args: str, out: Path | None = None) -> Fault:
    marker, env = marked_env()
    out = out or tmp_path / "ev"
    proc = subprocess.Popen([EXE, "run", str(path), "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return finish(proc, marker, out)


def faulty_protocol(tmp_path: Path, mode: str, *, request_s: float = 60,
                    arm_s: float = 300) -> Path:
    script = tmp_path / "faulty_worker.py"
    script.write_text(FAULTY)
    path = tmp_path / f"faulty-{mode}.toml"
    path.write_text(COMMAND_PROTOCOL.format(script=script, mode=mode, request_s=request_s,
                                            arm_s=arm_s))
    return path


def assert_failed(fault: Fault, reason: str, incomplete: str | None = None) -> str:
    """The four properties every fault must have; returns the INCOMPLETE text."""
    stderr = " ".join(fault.stderr.split())
    assert fault.returncode == 3, fault.stderr
    assert "Traceback" not in fault.stderr
    assert reason in stderr, fault.stderr
    assert fault.leftover == [], f"processes left behind: {fault.leftover}"
    d = fault.evidence
    assert d.name.endswith(".partial") and f"/{d.name}" in stderr  # the reason names it
    assert not (d / "manifest.json").exists()
    marker = (d / "INCOMPLETE").read_text()
    assert marker == (incomplete if incomplete is not None else f"failed: {reason}") or \
        (incomplete is None and marker.startswith("failed: ") and reason in marker), marker
    verify = subprocess.run([EXE, "verify", str(d)], capture_output=True, text=True,
                            timeout=LIMIT_S)
    # not sealed evidence: a user error (exit 2) in one line that names the unsealed run and why
    assert verify.returncode == 2, verify.stdout + verify.stderr
    assert verify.stderr.count("\n") == 1 and not verify.stdout, verify.stdout + verify.stderr
    assert f"{d} is an unsealed run, not sealed evidence (incomplete: " in verify.stderr
    assert marker.splitlines()[0] in verify.stderr and "Traceback" not in verify.stderr
    return marker


def wait_for_line(proc: subprocess.Popen, text: str) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if text in line:
            return
    raise AssertionError(f"the run ended before printing {text!r}")


# ---------------------------------------------------------------------- worker faults
def quick_aba(tmp_path: Path) -> str:
    """exact-bands-quick run ABA (its schedule line dropped): one worker alive at a time."""
    text = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text())
    assert text.count('\nschedule = "interleaved"\n') == 1
    path = tmp_path / "quick-aba.toml"
    path.write_text(text.replace('\nschedule = "interleaved"\n', "\n"))
    return str(path)


def test_worker_killed_mid_arm(tmp_path):
    marker, env = marked_env()
    proc = subprocess.Popen([EXE, "run", quick_aba(tmp_path), "--out", str(tmp_path / "ev"),
                             "--measured", "100000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for_line(proc, "arm A: measured 2/")
        (worker,) = processes_with_marker(marker, exclude=proc.pid)
        os.kill(worker, signal.SIGKILL)
    finally:
        fault = finish(proc, marker, tmp_path / "ev")
    marker_text = assert_failed(fault, "arm A: worker ")
    assert "exit code -9" in marker_text   # "exited before the response" or "died before"
    assert (fault.evidence / "logs" / "A.log").read_text()


def test_worker_hangs_request_timeout(tmp_path):
    fault = run_protocol(tmp_path, faulty_protocol(tmp_path, "hang", request_s=1))
    assert_failed(fault, "arm A: timed out after 1 s waiting for the response to request A-1")
    samples = (fault.evidence / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 1  # the request before the hang is kept


def test_worker_hangs_arm_timeout(tmp_path):
    # the request timeout is far away; the arm's deadline cuts the wait short and is named
    fault = run_protocol(tmp_path, faulty_protocol(tmp_path, "hang", request_s=600, arm_s=2))
    assert_failed(fault, "arm A: arm timeout of 2 s exceeded while waiting for the response "
                         "to request A-1")


def test_worker_prints_garbage(tmp_path):
    fault = run_protocol(tmp_path, faulty_protocol(tmp_path, "garbage"))
    assert_failed(fault, "arm A: worker printed a line that is not JSON while we waited for "
                         "the response to request A-1: 'Segmentation fault (core dumped)'")


def test_worker_exits_nonzero_mid_arm(tmp_path):
    fault = run_protocol(tmp_path, faulty_protocol(tmp_path, "exit"))
    assert_failed(fault, "arm A: worker exited before the response to request A-1 "
                         "(exit code 7; last log line: fatal: device lost)")


def test_worker_exits_nonzero_at_start(tmp_path):
    fault = run_protocol(tmp_path, faulty_protocol(tmp_path, "exit-at-start"))
    assert_failed(fault, "arm A: worker exited before the ready line (exit code 7; last log "
                         "line: fatal: cannot open /models/missing.gguf)")


def test_engine_exception(tmp_path):
    # the real ds4-tiny worker: a 600-byte prompt exceeds its 512-token context
    text = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text())
    path = tmp_path / "too-long.toml"
    path.write_text(text.replace("length = 256 ", "length = 600"))
    fault = run_protocol(tmp_path, path)
    assert_failed(fault, "arm A: request A-0: engine error EngineError: prompt too long: "
                         "601 tokens exceeds the context of 512 tokens")


# ---------------------------------------------------------------------- the harness itself
def _can_mount_tmpfs(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                           f"mount -t tmpfs -o size=8k tmpfs {probe}"],
                          capture_output=True, timeout=60)
    probe.rmdir()
    return done.returncode == 0


def test_full_disk_while_writing_evidence(tmp_path):
    """A real full disk: a 64 KiB tmpfs in a private mount namespace (unshare, no root needed);
    without user namespaces, RLIMIT_FSIZE makes the same writes fail with EFBIG instead."""
    disk = tmp_path / "disk"
    disk.mkdir()
    copy = tmp_path / "copy"
    run = (f'{EXE} run exact-bands-quick --out {disk}/ev --measured 100000; rc=$?; '
           f'cp -a {disk}/ev {copy}; exit $rc')
    if _can_mount_tmpfs(tmp_path):
        argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                f"mount -t tmpfs -o size=64k tmpfs {disk} && {run}"]
        reason = "run failed writing evidence: [Errno 28] No space left on device"
    else:
        argv = ["sh", "-c", f"ulimit -f 64; {run}"]   # 64 blocks (512 B or 1 KiB) per file
        reason = "run failed writing evidence: [Errno 27] File too large"
    marker, env = marked_env()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    fault = finish(proc, marker, copy)
    # the marker is rewritten in place when the disk has no room for a temp file
    assert_failed(fault, reason, incomplete="failed: writing evidence: " +
                  reason.removeprefix("run failed writing evidence: "))
    d = fault.evidence
    # atomic writes: no temp file survives, and the appended samples hold whole records only
    assert not [p for p in d.rglob(".*tmp-*")]
    lines = (d / "samples.jsonl").read_text().splitlines()
    assert lines and all(json.loads(x)["ok"] for x in lines)


def _run_and_signal(tmp_path: Path, sig: signal.Signals) -> Fault:
    marker, env = marked_env()
    proc = subprocess.Popen([EXE, "run", "exact-bands-quick", "--out", str(tmp_path / "ev"),
                             "--measured", "100000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for_line(proc, "measured 2/")
        assert processes_with_marker(marker, exclude=proc.pid)   # a worker is running now
        proc.send_signal(sig)
    finally:
        fault = finish(proc, marker, tmp_path / "ev")
    return fault


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_harness(tmp_path, sig):
    fault = _run_and_signal(tmp_path, sig)
    assert_failed(fault, f"interrupted ({sig.name}); evidence left incomplete in",
                  incomplete=f"interrupted: {sig.name}")


# ---------------------------------------------------------------------- re-runs
def _tree_digest(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def test_rerun_never_overwrites_evidence(tmp_path):
    path = faulty_protocol(tmp_path, "garbage")
    root = tmp_path / "ev"
    first = run_protocol(tmp_path, path, out=root)
    before = _tree_digest(first.evidence)
    again = subprocess.run([EXE, "run", str(path), "--out", str(root)], capture_output=True,
                           text=True, timeout=LIMIT_S)
    assert again.returncode == 3, again.stderr
    dirs = sorted(p.name for p in root.iterdir())
    assert len(dirs) == 2 and first.evidence.name in dirs, dirs
    assert all(n.endswith(".partial") for n in dirs)
    assert _tree_digest(first.evidence) == before     # untouched by the re-run
