"""HTTP targets end to end: A/B/A brackets through `llamacpp` and `openai` against `dflash-qualify
serve` started per arm on 127.0.0.1 (ds4-tiny), attach mode, llama.cpp field names, protocol keys."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness import kinds
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.targets.http_base import HttpFailure
from dflash_qualify.harness.targets.llamacpp import completion_body, parse_completion
from dflash_qualify.harness.targets.base import Request
from dflash_qualify.harness.verify import verify

EXE = str(Path(sys.executable).parent / "dflash-qualify")
START_S = 60.0  # only stops a hung test; nothing is timed


def samples_of(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]


def pids_of_group(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def run_bracket(tmp_path: Path, spec: str) -> kinds.Sealed:
    loaded = protocol_mod.load(spec, warmups=1, measured=3)
    return kinds.qualify(loaded, tmp_path / "ev", invocation=f"dflash-qualify run {spec}")


def check_sealed_identical(out: kinds.Sealed) -> list[dict]:
    assert not out.path.name.endswith(".partial") and (out.path / "manifest.json").is_file()
    result = verify(out.path)
    assert result.ok, result.problems
    assert out.stats["responses"]["identical"] is True
    samples = samples_of(out.path)
    assert len(samples) == 3 * 4 and len({s["response_sha256"] for s in samples}) == 1
    env = json.loads((out.path / "environment.json").read_text())
    for arm in ("A", "cand", "B"):
        info = env["arms"][arm]
        assert info["url"].startswith("http://127.0.0.1:")
        port = info["url"].rsplit(":", 1)[1]
        assert info["command"].endswith(f"--host 127.0.0.1 --port {port}")
        assert info["config_hash"] and info["binaries"][0]["sha256"]
        log = (out.path / "logs" / f"{arm}.log").read_text()
        assert "dflash-qualify serve: listening on" in log and "stopped" in log
        pid = int(log.rsplit("server pid ", 1)[1].split()[0])
        assert not pids_of_group(pid)  # the arm's server and its group are gone
    assert env["arms"]["cand"]["env"]["DFLASH_DS4_EXACT_PREFILL_BANDS"] == "1"
    assert env["arms"]["A"]["env"]["DFLASH_DS4_EXACT_PREFILL_BANDS"] is None
    # the env reached each arm's server: bands only in the candidate (serve's raw engine timings)
    for s in samples:
        wide = sum(n for w, n in s["band_widths"].items() if w != "1")
        assert (wide > 0) == (s["arm"] == "cand"), s
    return samples


def test_llamacpp_target_bracket_against_serve_per_arm(tmp_path):
    out = run_bracket(tmp_path, "serve-llamacpp-aba")
    samples = check_sealed_identical(out)
    assert {s["timing_source"] for s in samples} == {"server"}
    assert {s["response_source"] for s in samples} == {"dflash.content_b64"}
    assert all(s["cache_hits"] == 0 and s["prompt_tokens"] == 65 for s in samples)
    report = (out.path / "report.md").read_text()
    assert "Timings: server-reported: prefill_ms = timings.prompt_ms" in report
    assert "Warning" not in report
    assert "POST /completion" in (out.path / "logs" / "A.log").read_text()


def test_openai_target_bracket_against_serve_per_arm(tmp_path):
    out = run_bracket(tmp_path, "serve-openai-aba")
    samples = check_sealed_identical(out)
    assert {s["timing_source"] for s in samples} == {"client-side TTFT"}
    assert all(s["prefill_ms"] <= s["wall_ms"] for s in samples)
    report = (out.path / "report.md").read_text()
    assert "Timings: client-side TTFT: prefill_ms = time from sending the request" in report
    env = json.loads((out.path / "environment.json").read_text())
    assert env["target"]["timing"].startswith("client-side TTFT")
    assert "POST /v1/completions" in (out.path / "logs" / "cand.log").read_text()


ATTACH = """\
schema_version = 1
kind = "bracket"
name = "attach"
[target]
kind = "{kind}"
url = "{url}"
[measure]
warmups = 0
measured = 2
max_tokens = 4
[[prompts]]
id = "p"
text = "attach to a running server"
[[arms]]
id = "A"
role = "reference"
[[arms]]
id = "cand"
role = "candidate"
"""


@pytest.fixture(scope="module")
def running_serve(tmp_path_factory):
    """One `dflash-qualify serve` started outside the harness; yields its URL."""
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([EXE, "serve", "--model", "ds4-tiny", "--threads", "1",
                                 "--port", "0"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + START_S
        while "listening on" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        yield log_path.read_text().split("listening on ", 1)[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=START_S)


@pytest.mark.parametrize("kind", ["llamacpp", "openai"])
def test_attach_to_url_warns_in_protocol_environment_and_report(tmp_path, running_serve, kind):
    path = tmp_path / "attach.toml"
    path.write_text(ATTACH.format(kind=kind, url=running_serve))
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "ev")])
    assert result.exit_code in (0, 1), result.output   # no per-arm difference: gate decides
    (d,) = list((tmp_path / "ev").iterdir())
    assert verify(d).ok
    warning = f"attached to running server(s) at {running_serve}"
    proto = json.loads((d / "protocol.json").read_text())
    env = json.loads((d / "environment.json").read_text())
    assert proto["warnings"][0].startswith(warning) and env["warnings"] == proto["warnings"]
    assert "cache-cold requests and per-arm environment isolation are not guaranteed" in \
        proto["warnings"][0]
    assert f"**Warning:** {warning}" in (d / "report.md").read_text()
    assert f"**Warning:** {warning}" in result.output
    assert "its log is not available here" in (d / "logs" / "A.log").read_text()


# llama.cpp tools/server/README.md, "POST /completion" (response), abridged to what we read
LLAMA_RESPONSE = {
    "index": 0, "content": "Paris is the capital", "tokens": [], "id_slot": 0, "stop": True,
    "model": "gguf", "tokens_predicted": 4, "tokens_evaluated": 9, "generation_settings": {},
    "prompt": "", "has_new_line": False, "truncated": False, "stop_type": "limit",
    "stopping_word": "", "tokens_cached": 0,
    "timings": {"cache_n": 0, "prompt_n": 9, "prompt_ms": 12.5, "prompt_per_token_ms": 1.39,
                "prompt_per_second": 720.0, "predicted_n": 4, "predicted_ms": 40.0,
                "predicted_per_token_ms": 10.0, "predicted_per_second": 100.0},
}


def _fail(code: str, text: str) -> HttpFailure:
    return HttpFailure(code, text)


def test_llamacpp_parses_documented_field_names():
    r = parse_completion(json.loads(json.dumps(LLAMA_RESPONSE)), _fail)
    assert r.data == b"Paris is the capital" and r.response_source == "content"
    assert (r.prompt_tokens, r.prefill_ms, r.generated_tokens, r.decode_ms) == (9, 12.5, 4, 40.0)
    assert r.cache_hits == 0 and r.tokens is None and r.timing_source == "server"
    older = json.loads(json.dumps(LLAMA_RESPONSE))
    del older["timings"]["cache_n"]
    older["tokens_cached"] = 3          # before timings.cache_n existed
    assert parse_completion(older, _fail).cache_hits == 3
    for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms"):
        broken = json.loads(json.dumps(LLAMA_RESPONSE))
        del broken["timings"][key]
        with pytest.raises(HttpFailure, match=f"missing timings: timings.{key} is missing"):
            parse_completion(broken, _fail)
    req = Request(id="A-0", prompt_id="p", max_tokens=8, timeout_s=1, text="hi")
    assert completion_body(req, cache_cold=True) == {
        "prompt": "hi", "n_predict": 8, "stream": False, "return_tokens": True,
        "cache_prompt": False}


PROTO = """\
schema_version = 1
kind = "bracket"
name = "p"
[target]
kind = "llamacpp"
{target}
[[prompts]]
id = "p"
text = "x"
[[arms]]
id = "A"
role = "reference"
{arm}
[[arms]]
id = "cand"
role = "candidate"
"""


@pytest.mark.parametrize("target, arm, message", [
    ('', '', "target: expected exactly one of command (a server started per arm) or url"),
    ('command = ["srv"]\nurl = "http://x:1"', '', "found command and url"),
    ('command = ["srv", "--port", "8080"]', '', "target.command: expected a command line "
                                                 "containing {port}"),
    ('url = "ftp://x"', '', "target.url: expected an http:// or https:// base URL"),
    ('url = "http://127.0.0.1:1"', 'env = { A = "1" }', "arms[0].env: expected no env: an "
                                                        "attached server"),
    ('url = "http://127.0.0.1:1"', 'command = ["s", "{port}"]', "arms[0].command: expected no "
                                                                "command"),
    ('command = ["s", "{port}"]', 'url = "http://h:1"', "arms[0].url: expected no url"),
    ('command = ["s", "{port}"]\nextra_body = { n_predict = 3 }', '',
     "target.extra_body.n_predict: expected a field the harness does not set itself"),
    ('command = ["s", "{port}"]\nhealth_path = "health"', '', "target.health_path: expected a "
                                                               "path starting with '/'"),
    ('command = ["s", "{port}"]\nstart_timeout_s = 5\n[measure]\nstart_timeout_s = 5', '',
     "start_timeout_s in [target] or [measure], not both"),
    ('command = ["s", "{port}"]\nthreads = 2', '', "target.threads: unknown key"),
])
def test_http_protocol_errors_are_one_line(tmp_path, target, arm, message):
    path = tmp_path / "p.toml"
    path.write_text(PROTO.format(target=target, arm=arm))
    with pytest.raises(UsageError) as err:
        protocol_mod.load(str(path))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_http_protocol_resolves_placeholders_and_defaults(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(PROTO.format(
        target='command = ["{python}", "{protocol_dir}/srv.py", "--port", "{port}"]\n'
               'start_timeout_s = 7\nextra_body = { temperature = 0.5, top_k = 1 }',
        arm='command = ["other", "--listen", "{host}:{port}"]'))
    resolved = protocol_mod.load(str(path)).resolved
    t = resolved["target"]
    assert t["command"] == [sys.executable, f"{tmp_path.resolve()}/srv.py", "--port", "{port}"]
    assert resolved["arms"][0]["command"] == ["other", "--listen", "{host}:{port}"]
    assert t["health_path"] == "/health" and t["url"] is None and t["model"] is None
    assert t["extra_body"] == {"temperature": 0.5, "top_k": 1}
    assert resolved["timeouts"]["start_s"] == 7.0 and "start_timeout_s" not in t
    assert resolved["warnings"] == [] and t["timing"].startswith("server-reported")
    assert os.path.isabs(t["command"][0])


def test_bundled_serve_protocols_load():
    for name in ("serve-llamacpp-aba", "serve-openai-aba"):
        resolved = protocol_mod.load(name).resolved
        assert resolved["target"]["command"][0] == sys.executable
        assert resolved["timeouts"]["start_s"] == 60.0
