"""The engine worker process and the worker target, with real processes on ds4-tiny."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from dflash_qualify.harness.targets import Request, TargetError, WorkerTarget
from dflash_qualify.harness.targets.worker import embedded_argv

TINY = {"kind": "embedded", "model": "ds4-tiny", "seed": 0, "threads": 1,
        "prefix_cache_slots": 0}
BANDS = "DFLASH_DS4_EXACT_PREFILL_BANDS"
# generous bounds: they only stop a hung test, nothing is timed
START_S, REQUEST_S = 60.0, 60.0


def tiny_target(arm_id="t", env=None, engine=None, argv=None) -> WorkerTarget:
    arm = {"id": arm_id, "env": env or {}, "engine": engine or {}}
    return WorkerTarget(arm_id, argv or embedded_argv(TINY, arm), arm["env"],
                        start_timeout_s=START_S)


def request(rid="r0", text="The lighthouse keeper kept a ledger", tokens=None, max_tokens=4):
    return Request(id=rid, prompt_id="p", max_tokens=max_tokens, timeout_s=REQUEST_S,
                   text=None if tokens is not None else text, tokens=tokens)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is not running
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_ready_round_trip_and_teardown():
    target = tiny_target()
    info = target.prepare()
    try:
        assert info["engine_build"]["simd_path"]
        assert info["model"]["name"] == "ds4-tiny"
        assert isinstance(info["config_hash"], str) and len(info["config_hash"]) == 64
        assert info["command"][1:3] == ["-m", "dflash_qualify.engine.worker"]
        assert info["binaries"] and len(info["binaries"][0]["sha256"]) == 64
        r = target.run_once(request())
        assert r.generated_tokens == 4 and len(r.tokens) == 4
        assert r.prompt_tokens == len("The lighthouse keeper kept a ledger") + 1  # BOS
        assert r.prefill_ms > 0 and r.decode_ms > 0 and r.cache_hits == 0
        assert r.band_widths["1"] == r.prompt_tokens   # q1: one token per step
        again = target.run_once(request("r1"))
        assert again.data == r.data                     # deterministic
    finally:
        log = target.teardown()
    assert "end of input after 2 requests" in log
    assert not alive(info["pid"])
    assert target.teardown() == log                     # idempotent


def test_engine_error_is_a_named_failure_and_the_worker_survives():
    with tiny_target() as target:
        target.prepare()
        with pytest.raises(TargetError, match=r"request bad: engine error EngineError: "
                                              r".*999 is out of range"):
            target.run_once(request("bad", tokens=[1, 999]))
        assert target.run_once(request("ok", tokens=[1, 2, 3])).generated_tokens == 4


def test_env_isolation_bands_arm_uses_wide_bands(monkeypatch):
    monkeypatch.setenv(BANDS, "1")  # our own env says bands; the q1 arm must unset it
    q1 = tiny_target("q1", env={BANDS: None})
    bands = tiny_target("bands", env={BANDS: "1"}, engine={"chunk": 4})
    results = {}
    for t in (q1, bands):
        with t:
            t.prepare()
            results[t.arm_id] = t.run_once(request())
    assert set(results["q1"].band_widths) <= {"1", "2", "3", "4"}
    assert results["q1"].band_widths["1"] == results["q1"].prompt_tokens
    wide = sum(n for w, n in results["bands"].band_widths.items() if int(w) > 1)
    assert wide > 0
    assert results["bands"].data == results["q1"].data   # exact bands: same bytes
    assert BANDS not in q1.env and bands.env[BANDS] == "1"


def test_raw_protocol_lines_only_on_stdout():
    lines = [json.dumps({"id": "a", "prompt": "hi", "max_tokens": 2}),
             "not json",
             json.dumps({"id": "b", "tokens": [1, 2], "max_tokens": 2, "colour": "red"}),
             json.dumps({"id": 7, "prompt": "hi", "tokens": [1]}),
             json.dumps({"id": "c", "tokens": [1, 2], "max_tokens": 2,
                         "options": {"bands": True, "chunk": 4}})]
    done = subprocess.run(embedded_argv(TINY, {"engine": {}}), input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = [json.loads(x) for x in done.stdout.splitlines()]   # every line is JSON
    assert out[0]["ready"] is True and out[0]["protocol_version"] == 1
    a, garbage, unknown, both, c = out[1:]
    assert a["id"] == "a" and len(a["tokens"]) == 2
    if "text" in a:  # present exactly when the bytes are UTF-8
        assert a["text"].encode() == base64.b64decode(a["response_b64"])
    assert garbage == {"id": None, "error": {"type": "BadRequest", "message":
                       "request is not JSON: Expecting value at column 1"}}
    assert unknown["error"]["message"] == "unknown request keys: colour"
    assert unknown["id"] == "b"
    assert both == {"id": 7, "error": {"type": "BadRequest", "message":
                    "give exactly one of prompt (text) or tokens (ids)"}}
    assert c["id"] == "c" and c["timings"]["band_widths"]["2"] == 1   # 2 tokens, one band
    assert "ready in" in done.stderr


def test_bad_model_fails_prepare_with_the_engine_message():
    argv = embedded_argv({**TINY, "model": "ds4-huge"}, {"engine": {}})
    target = WorkerTarget("x", argv, {}, start_timeout_s=START_S)
    with pytest.raises(TargetError, match=r"arm x: the worker could not start the engine: "
                                          r"EngineError: unknown model 'ds4-huge'"):
        target.prepare()
    target.teardown()


HANG = "import json,sys,time; print(json.dumps({'ready': True}), flush=True); time.sleep(600)"
GARBAGE = ("import json,sys; print(json.dumps({'ready': True}), flush=True); sys.stdin.readline();"
           " print('Segmentation fault?', flush=True)")
DIE = "import json,sys,os; print(json.dumps({'ready': True}), flush=True); os._exit(7)"


def test_hung_worker_times_out_and_is_killed():
    target = WorkerTarget("h", [sys.executable, "-c", HANG], {}, start_timeout_s=START_S)
    target.prepare()
    pid = target.proc.pid
    with pytest.raises(TargetError, match=r"arm h: timed out after 0.2 s waiting for the "
                                          r"response to request r0"):
        target.run_once(Request(id="r0", prompt_id="p", max_tokens=1, timeout_s=0.2, text="x"))
    target.teardown()
    assert not alive(pid)


def test_garbage_and_dead_workers_are_named():
    g = WorkerTarget("g", [sys.executable, "-c", GARBAGE], {}, start_timeout_s=START_S)
    g.prepare()
    with pytest.raises(TargetError, match=r"not JSON .*'Segmentation fault\?'"):
        g.run_once(request())
    g.teardown()
    d = WorkerTarget("d", [sys.executable, "-c", DIE], {}, start_timeout_s=START_S)
    d.prepare()
    with pytest.raises(TargetError, match=r"arm d: worker (exited|died) before .*exit code 7"):
        d.run_once(request())
    d.teardown()


def test_missing_program_is_a_named_failure():
    t = WorkerTarget("m", ["/nonexistent/engine-binary"], {}, start_timeout_s=START_S)
    with pytest.raises(TargetError, match="worker did not start: /nonexistent/engine-binary"):
        t.prepare()
    t.teardown()


ECHO_ENGINE = r'''
import base64, json, os, sys
print(json.dumps({"ready": True, "engine": {"name": "echo", "build": os.environ.get("BUILD")},
                  "model": {"name": "echo"}, "config_hash": "echo-1"}), flush=True)
ms = float(os.environ["PREFILL_MS"])
for line in sys.stdin:
    req = json.loads(line)
    data = req["prompt"][:req["max_tokens"]].upper().encode()
    print(json.dumps({"id": req["id"], "response_b64": base64.b64encode(data).decode(),
                      "timings": {"prompt_tokens": len(req["prompt"]), "prefill_ms": ms,
                                  "decode_ms": 1.0, "cache_hits": 0,
                                  "generated_tokens": len(data),
                                  "options": req["options"]}}), flush=True)
'''

COMMAND_PROTOCOL = """\
schema_version = 1
kind = "bracket"
name = "echo-aba"

[target]
kind = "command"
command = ["{python}", "{script}"]

[measure]
warmups = 1
measured = 3

[[prompts]]
id = "p"
text = "any engine that speaks the worker protocol"

[gate]
min_gain_pct = 10.0

[[arms]]
id = "A"
role = "reference"
env = {{ PREFILL_MS = "20" }}

[[arms]]
id = "cand"
role = "candidate"
env = {{ PREFILL_MS = "10", BUILD = "fast" }}
command = ["{python}", "{script}", "--fast-build"]
engine = {{ chunk = 4 }}

[[arms]]
id = "B"
role = "reference"
env = {{ PREFILL_MS = "20" }}
"""


def test_command_target_runs_any_program_speaking_the_protocol(tmp_path):
    script = tmp_path / "echo_engine.py"
    script.write_text(ECHO_ENGINE)
    path = tmp_path / "echo.toml"
    path.write_text(COMMAND_PROTOCOL.format(python=sys.executable, script=script))
    exe = os.path.join(os.path.dirname(sys.executable), "dflash-qualify")
    done = subprocess.run([exe, "run", str(path), "--out", str(tmp_path / "ev")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr   # 20 ms -> 10 ms, identical bytes
    (d,) = [p for p in (tmp_path / "ev").iterdir()]
    env = json.loads((d / "environment.json").read_text())
    assert env["arms"]["cand"]["command"].endswith("echo_engine.py --fast-build")
    assert env["arms"]["cand"]["engine_build"] == {"name": "echo", "build": "fast"}
    samples = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    assert (d / "responses" / f"{samples[0]['response_sha256']}.bin").read_bytes() == \
        b"ANY ENGI"
    verify = subprocess.run([exe, "verify", str(d)], capture_output=True, text=True,
                            timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_worker_serve_reports_unexpected_engine_exceptions():
    import io

    from dflash_qualify.engine import worker

    class Broken:
        def generate(self, prompt, **kw):
            raise RuntimeError("kernel exploded")

    out = io.StringIO()
    n = worker.serve(Broken(), [json.dumps({"id": "x", "prompt": "hi"}) + "\n"], out)
    assert n == 1
    assert json.loads(out.getvalue()) == {"id": "x", "error": {"type": "RuntimeError",
                                                               "message": "kernel exploded"}}
