"""`dflash-qualify compare` (harness/adhoc.py + cli/compare.py) without third-party servers: the
generated protocol, one-line input errors, and a command-target bracket that `run` reproduces.
(Two real llama-server command lines: tests/test_real_llama_server.py.)"""
from __future__ import annotations

import json
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness import adhoc
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.verify import verify

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_generated_protocol_is_an_aba_bracket_with_the_bundled_defaults():
    args = adhoc.CompareArgs(target="openai", reference="srv --port {port} --x 'a b'",
                             candidate="srv --port {port} --fast",
                             reference_env=("OMP_NUM_THREADS=1", "GONE="),
                             candidate_env=("FAST=1",), endpoint="chat", timings="llama-server")
    doc = tomllib.loads(adhoc.protocol_toml(args, "dflash-qualify compare ..."))
    assert doc["kind"] == "bracket" and doc["target"]["command"] == ["srv", "--port", "{port}",
                                                                     "--x", "a b"]
    assert doc["target"]["endpoint"] == "chat"
    assert doc["target"]["timings"] == {"preset": "llama-server"}
    assert [a["id"] for a in doc["arms"]] == ["A", "cand", "B"]
    assert doc["arms"][1]["command"] == ["srv", "--port", "{port}", "--fast"]
    assert doc["arms"][0]["env"] == doc["arms"][2]["env"] == {"OMP_NUM_THREADS": "1",
                                                              "GONE": False}
    assert doc["arms"][1]["env"] == {"FAST": "1"}
    m = doc["measure"]
    assert (m["warmups"], m["measured"], m["max_tokens"]) == (1, 5, 8)
    assert doc["prompts"] == [{"id": "p256", "length": 256}]


@pytest.mark.parametrize("kw, message", [
    ({"reference": "srv --port 8080"}, "--reference: expected a command line containing {port}"),
    ({"candidate": "srv 'unclosed"}, "--candidate: not a valid shell-quoted command line"),
    ({"candidate": "  "}, "--candidate: an empty command line"),
    ({"reference_env": ("1BAD=x",)}, "--reference-env: expected K=V"),
    ({"candidate_env": ("NOEQUALS",)}, "--candidate-env: expected K=V"),
    ({"target": "llamacpp", "endpoint": "chat"}, "--endpoint applies to --target openai only"),
])
def test_bad_input_is_one_line(kw, message):
    base = {"target": "openai", "reference": "s --port {port}", "candidate": "s --port {port}"}
    with pytest.raises(UsageError) as err:
        adhoc.protocol_toml(adhoc.CompareArgs(**{**base, **kw}), "x")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_command_target_compare_seals_and_run_on_its_protocol_reproduces(tmp_path):
    py = shlex.quote(sys.executable)
    adapter = f"{py} {shlex.quote(str(EXAMPLES / 'engine_adapter.py'))} -- {py} " \
              f"{shlex.quote(str(EXAMPLES / 'fake_engine.py'))}"
    result = CliRunner().invoke(main, [
        "compare", "--target", "command", "--reference", adapter,
        "--candidate", adapter + " --batch 4", "--candidate-env", "FAKE_ENGINE_PREFILL_MS=0.2",
        "--prompt-length", "64", "--warmups", "0", "--measured", "3",
        "--out", str(tmp_path / "ev")])
    assert result.exit_code == 0, result.output      # --batch 4: 4x faster, same bytes
    (d,) = (tmp_path / "ev").iterdir()
    assert verify(d).ok and "QUALIFIED" in result.output
    proto = json.loads((d / "protocol.json").read_text())
    assert proto["arms"][1]["env"] == {"FAKE_ENGINE_PREFILL_MS": "0.2"}
    assert proto["source"]["file"].startswith("dflash-qualify compare")
    env = json.loads((d / "environment.json").read_text())
    assert env["invocation"].startswith("dflash-qualify compare --target command")
    again = CliRunner().invoke(main, ["run", str(d / "protocol.toml"),
                                      "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    (d2,) = (tmp_path / "again").iterdir()
    p2 = json.loads((d2 / "protocol.json").read_text())
    assert p2["arms"] == proto["arms"] and p2["target"] == proto["target"]


def test_compare_usage_errors_exit_2():
    result = CliRunner().invoke(main, ["compare", "--target", "llamacpp", "--reference", "s",
                                       "--candidate", "s --port {port}"])
    assert result.exit_code == 2
    assert "--reference: expected a command line containing {port}" in result.output
