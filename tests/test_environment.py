"""Environment capture: the facts recorded, and secrets that never reach an evidence file."""
from __future__ import annotations

from evidence_factory import fixed_n_text

import json
from pathlib import Path

import pytest

from dflash_qualify.harness import environment, kinds, protocol
from dflash_qualify.harness.targets.fake import FakeScript, fake_factory

SECRET_ENV = "pr0cess-s3cret-value-1234"
SECRET_ARM = "arm-s3cret-value-5678"


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY",
                                  "DB_PASSWORD", "GITHUB_PAT", "MY_CREDENTIALS", "DFLASH_AUTH",
                                  "api_key", "LUCE_PRIVATE_KEY", "SSH_PASSPHRASE",
                                  "DFLASH_ACCESSTOKEN"])
def test_secret_names(name):
    assert environment.is_secret_name(name)


@pytest.mark.parametrize("name", ["DFLASH_DS4_EXACT_PREFILL_BANDS", "LUCE_MMVQ_MAX_NCOLS",
                                  "OMP_NUM_THREADS", "PATH", "PWD", "KEYBOARD_LAYOUT",
                                  "HOME", "GGML_NTHREADS"])
def test_non_secret_names(name):
    assert not environment.is_secret_name(name)


def test_redact_env_keeps_unset_and_plain_values():
    env = {"LUCE_MMVQ_MAX_NCOLS": "1", "DFLASH_DS4_EXACT_PREFILL_BANDS": None, "HF_TOKEN": "x"}
    assert environment.redact_env(env) == {"LUCE_MMVQ_MAX_NCOLS": "1",
                                           "DFLASH_DS4_EXACT_PREFILL_BANDS": None,
                                           "HF_TOKEN": "<redacted>"}


def test_relevant_env_filters_and_redacts():
    env = environment.relevant_env({"DFLASH_X": "1", "HOME": "/root", "OMP_NUM_THREADS": "2",
                                    "LUCE_API_TOKEN": "abcd1234", "PYTHONHASHSEED": "0"})
    assert env == {"DFLASH_X": "1", "LUCE_API_TOKEN": "<redacted>", "OMP_NUM_THREADS": "2",
                   "PYTHONHASHSEED": "0"}


def test_capture_records_host_facts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a git work tree
    rec = environment.capture(protocol.load("exact-bands-quick").resolved, invocation="x")
    for key in ("invocation", "tool_version", "started_utc", "host", "cpu", "memory", "os",
                "python", "packages", "git", "env"):
        assert key in rec, key
    assert rec["git"]["cwd"] is None
    assert rec["git"]["tool"] is None or len(rec["git"]["tool"]["sha"]) == 40
    assert rec["cpu"]["logical_cpus"] >= 1
    assert rec["python"]["version"].startswith("3.")
    assert rec["packages"]["click"]
    json.dumps(rec)  # JSON-ready


def test_secrets_never_reach_evidence(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_SERVICE_TOKEN", SECRET_ENV)
    src = protocol.bundled_dir() / "exact-bands-quick.toml"
    text = fixed_n_text(src.read_text()).replace(
        'env = { DFLASH_DS4_EXACT_PREFILL_BANDS = "1", LUCE_MMVQ_MAX_NCOLS = false }',
        f'env = {{ DFLASH_DS4_EXACT_PREFILL_BANDS = "1", LUCE_MMVQ_MAX_NCOLS = false, '
        f'LUCE_API_KEY = "{SECRET_ARM}" }}')
    assert SECRET_ARM in text
    path = tmp_path / "secret.toml"
    path.write_text(text)
    loaded = protocol.load(str(path))
    # a target whose log echoes both secrets must not leak them either
    leaky = FakeScript(prefill_ms=[5.0])
    make = fake_factory({"cand": leaky})

    def make_leaky(proto, arm):
        target = make(proto, arm)
        original = target.teardown
        target.teardown = lambda: original() + f"env {SECRET_ENV} {SECRET_ARM}\n"
        return target

    out = kinds.qualify(loaded, tmp_path / "ev", invocation=f"run {SECRET_ARM}",
                         make_target=make_leaky)
    files = [p for p in out.path.rglob("*") if p.is_file()]
    assert len(files) > 8
    for p in files:
        data = p.read_bytes()
        assert SECRET_ENV.encode() not in data, p
        assert SECRET_ARM.encode() not in data, p
    env = json.loads((out.path / "environment.json").read_text())
    assert env["env"]["DFLASH_SERVICE_TOKEN"] == "<redacted>"
    assert env["arms"]["cand"]["env"]["LUCE_API_KEY"] == "<redacted>"
    assert b"<redacted>" in (out.path / "protocol.toml").read_bytes()


def test_secrets_never_reach_evidence_of_a_real_run(tmp_path):
    """`dflash-qualify run` with real ds4-tiny workers: a secret in the harness's environment
    and one set by an arm appear in no evidence file (logs, protocol copies, environment)."""
    import os
    import subprocess
    import sys

    text = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text()).replace(
        'env = { DFLASH_DS4_EXACT_PREFILL_BANDS = "1", LUCE_MMVQ_MAX_NCOLS = false }',
        f'env = {{ DFLASH_DS4_EXACT_PREFILL_BANDS = "1", LUCE_MMVQ_MAX_NCOLS = false, '
        f'HF_TOKEN = "{SECRET_ARM}" }}')
    path = tmp_path / "secret.toml"
    path.write_text(text)
    exe = str(Path(sys.executable).parent / "dflash-qualify")
    env = {**os.environ, "DFLASH_DEPLOY_PASSWORD": SECRET_ENV, "OPENAI_API_KEY": SECRET_ENV}
    done = subprocess.run([exe, "run", str(path), "--out", str(tmp_path / "ev"),
                           "--warmups", "0", "--measured", "2"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode in (0, 1), done.stderr
    (d,) = list((tmp_path / "ev").iterdir())
    files = [p for p in d.rglob("*") if p.is_file()]
    assert len(files) > 8 and (d / "logs" / "cand.log").is_file()
    for p in files:
        data = p.read_bytes()
        assert SECRET_ENV.encode() not in data and SECRET_ARM.encode() not in data, p
    assert SECRET_ENV not in done.stdout + done.stderr
    env_record = json.loads((d / "environment.json").read_text())
    assert env_record["env"]["DFLASH_DEPLOY_PASSWORD"] == "<redacted>"
    assert env_record["arms"]["cand"]["env"]["HF_TOKEN"] == "<redacted>"
