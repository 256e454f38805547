"""Against a real third-party server: llama.cpp's llama-server built from source (tests/real_servers.py)
on a tiny random-weight Q8_0 GGUF. Brackets through the `llamacpp` target and the `openai`
target (completions and chat, streamed and not), a `-ctk q4_0` candidate caught as
responses_differ naming the first differing token, and `dflash-qualify compare` on two
llama-server command lines reproduced by `run` on its stored protocol.

Skipped when llama-server is not built here (scripts/build_llamacpp.sh), unless
DQ_REQUIRE_REAL_SERVERS=1 (CI), which makes a missing build a failure.
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

import real_servers
from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness import kinds
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.verify import verify

WARMUPS, MEASURED = 1, 2   # few requests: CI has 2 cores; nothing here is timed


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    """(bin dir, tiny GGUF path) or skip."""
    required = os.environ.get(real_servers.REQUIRE_ENV) == "1"
    try:
        bin_dir = real_servers.llama_bin(build=required)
    except real_servers.NotBuilt as exc:
        if required:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    model = real_servers.write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-q8_0.gguf")
    return bin_dir, model


def protocol_text(kind: str, command: list[str], cand_command: list[str], target_extra: str = "",
                  extra_body: str = "{ ignore_eos = true }") -> str:
    return f"""\
schema_version = 1
kind = "bracket"
name = "real-llama-{kind}"
[target]
kind = "{kind}"
command = {json.dumps(command)}
health_path = "/health"
start_timeout_s = 120
extra_body = {extra_body}
{target_extra}
[measure]
metric = "prefill_tok_s"
warmups = {WARMUPS}
measured = {MEASURED}
max_tokens = 8
cache = "cold"
request_timeout_s = 120
[[prompts]]
id = "p64"
length = 64
[gate]
min_gain_pct = 1.0
max_drift_pct = 50.0
bootstrap_resamples = 200
[[arms]]
id = "A"
role = "reference"
[[arms]]
id = "cand"
role = "candidate"
command = {json.dumps(cand_command)}
[[arms]]
id = "B"
role = "reference"
"""


def run_text(tmp_path: Path, text: str) -> kinds.Sealed:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return kinds.qualify(protocol_mod.load(str(path)), tmp_path / "ev", invocation="test")


def samples_of(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]


def sealed(out: kinds.Sealed) -> list[dict]:
    assert not out.path.name.endswith(".partial")
    result = verify(out.path)
    assert result.ok, result.problems
    samples = samples_of(out.path)
    assert len(samples) == 3 * (WARMUPS + MEASURED)
    assert all(s["ok"] and s["cache_hits"] == 0 for s in samples)
    env = json.loads((out.path / "environment.json").read_text())
    assert env["arms"]["A"]["binaries"][0]["path"].endswith("llama-server")
    return samples


def test_llamacpp_target_bracket_ub1_ub4_is_identical_and_server_timed(tmp_path, llama):
    bin_dir, model = llama
    ref = real_servers.server_command(bin_dir, model, "-ub", "1")
    out = run_text(tmp_path, protocol_text("llamacpp", ref,
                                           real_servers.server_command(bin_dir, model, "-ub", "4")))
    samples = sealed(out)
    assert out.stats["responses"]["identical"] is True
    assert {s["timing_source"] for s in samples} == {"server"}
    assert all(s["prompt_tokens"] > 0 and s["generated_tokens"] == 8 for s in samples)
    assert all(len(s["response_tokens"]) == 8 and len(s["response_token_texts"]) == 8
               for s in samples)
    assert "POST /completion" in (out.path / "logs" / "A.log").read_text()


def test_ctk_q4_0_candidate_fails_responses_differ_naming_the_first_token(tmp_path, llama):
    bin_dir, model = llama
    ref = real_servers.server_command(bin_dir, model)
    out = run_text(tmp_path, protocol_text("llamacpp", ref,
                                           real_servers.server_command(bin_dir, model,
                                                                       "-ctk", "q4_0")))
    sealed(out)
    verdict = out.stats["verdict"]
    assert not out.qualified and "responses_differ" in verdict["reasons"]
    cond = next(c for c in verdict["conditions"] if c["reason"] == "responses_differ")
    m = out.stats["responses"]["first_mismatch"]
    diff = m["first_differing_token"]
    assert m["request"]["arm"] == "cand" and diff is not None
    assert diff["token"] != diff["reference_token"]
    assert isinstance(diff["text"], str) and isinstance(diff["reference_text"], str)
    assert f"first differing token at index {diff['index']}: {diff['token']}" in cond["message"]
    report = (out.path / "report.md").read_text()
    assert "first differing token at index" in report


@pytest.mark.parametrize("endpoint, stream", [("chat", False), ("completions", True),
                                              ("chat", True), ("completions", False)])
def test_openai_target_with_the_llama_server_preset(tmp_path, llama, endpoint, stream):
    bin_dir, model = llama
    cmd = real_servers.server_command(bin_dir, model)
    extra = (f'endpoint = "{endpoint}"\nstream = {str(stream).lower()}\n'
             'timings = { preset = "llama-server" }')
    out = run_text(tmp_path, protocol_text("openai", cmd, cmd, extra))
    samples = sealed(out)
    # server-reported prefill (timings.prompt_ms), never the client's clock
    assert {s["timing_source"] for s in samples} == {"server"}
    assert out.stats["responses"]["identical"] is True
    assert all(0 < s["prefill_ms"] < s["wall_ms"] and s["generated_tokens"] == 8
               for s in samples)
    proto = json.loads((out.path / "protocol.json").read_text())
    assert proto["target"]["timing"].startswith(
        "server-reported (preset llama-server): prefill_ms = timings.prompt_ms")
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    assert f"POST {path}" in (out.path / "logs" / "cand.log").read_text()


def test_compare_two_llama_server_command_lines_then_run_reproduces(tmp_path, llama):
    bin_dir, model = llama
    ref = shlex.join(real_servers.server_command(bin_dir, model, "-ub", "1"))
    cand = shlex.join(real_servers.server_command(bin_dir, model, "-ub", "4"))
    result = CliRunner().invoke(main, [
        "compare", "--target", "llamacpp", "--reference", ref, "--candidate", cand,
        "--prompt-length", "64", "--max-tokens", "8", "--warmups", "1", "--measured", "2",
        "--out", str(tmp_path / "ev")])
    assert result.exit_code in (0, 1), result.output   # sealed either way; noise decides
    (first,) = (tmp_path / "ev").iterdir()
    assert verify(first).ok
    stored = first / "protocol.toml"
    assert "dflash-qualify compare --target llamacpp" in stored.read_text()
    again = CliRunner().invoke(main, ["run", str(stored), "--out", str(tmp_path / "again")])
    assert again.exit_code in (0, 1), again.output
    (second,) = (tmp_path / "again").iterdir()
    assert verify(second).ok
    p1 = json.loads((first / "protocol.json").read_text())
    p2 = json.loads((second / "protocol.json").read_text())
    for key in ("kind", "name", "target", "arms", "prompts", "max_tokens", "metric", "gate",
                "schedule", "cache"):
        assert p1[key] == p2[key], key
    s1, s2 = samples_of(first), samples_of(second)
    assert [(s["arm"], s["phase"]) for s in s1] == [(s["arm"], s["phase"]) for s in s2]
    assert {s["response_sha256"] for s in s1} == {s["response_sha256"] for s in s2}
