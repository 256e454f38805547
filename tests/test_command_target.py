"""The `command` target with the example adapter (examples/engine_adapter.py wrapping
examples/fake_engine.py): a sealed, verified A/B/A with per-arm command and env, and named
engine failures. (The embedded worker's A/B/A is tests/test_run_e2e.py.)"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness import kinds
from dflash_qualify.harness.errors import RunFailed
from dflash_qualify.harness.verify import verify

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ADAPTER_PROTOCOL = EXAMPLES / "command-adapter-aba.toml"


def samples_of(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]


def test_example_adapter_bracket_seals_verifies_and_qualifies(tmp_path):
    loaded = protocol_mod.load(str(ADAPTER_PROTOCOL), warmups=1, measured=3)
    out = kinds.qualify(loaded, tmp_path / "ev", invocation="test")
    assert out.qualified, out.stats["verdict"]   # --batch 4 prefills 4x faster, same bytes
    assert verify(out.path).ok
    samples = samples_of(out.path)
    assert len(samples) == 12 and len({s["response_sha256"] for s in samples}) == 1
    assert all(s["prompt_tokens"] == 64 and s["generated_tokens"] == 8 for s in samples)
    assert {s["timing_source"] for s in samples} == {"engine"}
    assert all(s["worker_ms"] is not None for s in samples)
    env = json.loads((out.path / "environment.json").read_text())
    py = sys.executable
    assert env["arms"]["A"]["command"] == (f"{py} {EXAMPLES}/engine_adapter.py -- "
                                           f"{py} {EXAMPLES}/fake_engine.py")
    assert env["arms"]["cand"]["command"].endswith("fake_engine.py --batch 4")
    assert env["arms"]["cand"]["env"] == {"FAKE_ENGINE_PREFILL_MS": "0.2"}
    assert env["arms"]["cand"]["binaries"][0]["sha256"]
    log = (out.path / "logs" / "cand.log").read_text()
    assert log.count("prompt eval time") == 4   # the engine's own lines, one per request
    stored = (out.path / "responses" / f"{samples[0]['response_sha256']}.bin").read_bytes()
    assert len(stored) == 8 and stored.isalpha()


def adapter(*engine: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(EXAMPLES / "engine_adapter.py"), "--", *engine],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def test_adapter_speaks_the_worker_protocol():
    proc = adapter(sys.executable, str(EXAMPLES / "fake_engine.py"))
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["ready"] is True and ready["protocol_version"] == 1
        proc.stdin.write(json.dumps({"id": "r1", "prompt": "hello", "max_tokens": 5,
                                     "options": {"batch": 2}}) + "\n")
        proc.stdin.write(json.dumps({"id": "r2", "tokens": [1, 2]}) + "\n")
        proc.stdin.flush()
        first, second = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()
    data = base64.b64decode(first["response_b64"])
    assert first["id"] == "r1" and len(data) == 5 and first["text"] == data.decode()
    t = first["timings"]
    assert (t["prompt_tokens"], t["generated_tokens"], t["cache_hits"]) == (5, 5, 0)
    assert t["prefill_ms"] == pytest.approx(5 * 0.2 / 2, rel=0.02)   # --batch 2 from options
    assert second == {"id": "r2", "error": {"type": "ValueError", "message":
                                            "this engine takes text prompts only (no token ids)"}}


def test_engine_failure_through_the_adapter_is_named(tmp_path):
    text = ADAPTER_PROTOCOL.read_text().replace(
        '"{python}", "{protocol_dir}/fake_engine.py"]', '"false"]', 1)
    path = tmp_path / "broken.toml"
    path.write_text(text)
    loaded = protocol_mod.load(str(path))
    loaded.resolved["target"]["command"] = [sys.executable, str(EXAMPLES / "engine_adapter.py"),
                                            "--", "false"]
    with pytest.raises(RunFailed, match=r"arm A: request A-0: engine error ValueError: engine "
                                        r"exited with code 1"):
        kinds.qualify(loaded, tmp_path / "ev", invocation="test")
    (d,) = list((tmp_path / "ev").iterdir())
    assert d.name.endswith(".partial")
