"""No secret reaches any evidence file of any kind (acceptance 2 of issue 21).

A secret set in an arm's env and another in the harness's own environment (also written into
the protocol's description, so protocol.toml and protocol.json carry it) must appear in no
file of any evidence directory that run, compare, calibrate and exactness seal, gzip members
(traces) included; and every directory must still verify.
"""
from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from dflash_qualify.harness import kinds
from dflash_qualify.harness.evidence import EvidenceWriter, Redactor
from dflash_qualify.harness.kinds.calibration import calibrate
from dflash_qualify.harness.verify import verify

SECRET_ARM = "hf_armSecretValue0123456789"
SECRET_ENV = "procSecretValue9876543210"

ARM_ENV = f'env = {{ DFLASH_DS4_EXACT_PREFILL_BANDS = "1", HF_TOKEN = "{SECRET_ARM}" }}'
BRACKET = f"""schema_version = 1
kind = "bracket"
name = "secret-bracket"
description = "a description quoting {SECRET_ENV}"
[target]
kind = "embedded"
model = "ds4-tiny"
threads = 1
[measure]
warmups = 0
measured = 2
max_tokens = 2
[[prompts]]
id = "p"
length = 12
[gate]
bootstrap_resamples = 100
[[arms]]
id = "A"
role = "reference"
[[arms]]
id = "cand"
role = "candidate"
{ARM_ENV}
engine = {{ chunk = 4 }}
[[arms]]
id = "B"
role = "reference"
"""
COMPARE = f"""schema_version = 1
kind = "compare"
name = "secret-compare"
description = "a description quoting {SECRET_ENV}"
[target]
kind = "embedded"
model = "ds4-tiny"
threads = 1
[measure]
warmups = 0
measured = 2
max_tokens = 2
[[prompts]]
id = "p8"
length = 8
[[prompts]]
id = "p12"
length = 12
[gate]
bootstrap_resamples = 100
[[arms]]
id = "main"
role = "reference"
[[arms]]
id = "pr"
role = "candidate"
{ARM_ENV}
engine = {{ chunk = 4 }}
"""
EXACTNESS = f"""schema_version = 1
kind = "exactness"
name = "secret-exactness"
description = "a description quoting {SECRET_ENV}"
[target]
kind = "embedded"
model = "ds4-tiny"
threads = 1
[trace]
level = "digest"
max_tokens = 1
[[requests]]
id = "r1"
length = 5
[[candidates]]
id = "q4"
engine = {{ bands = true, chunk = 4 }}
env = {{ HF_TOKEN = "{SECRET_ARM}" }}
"""


def _members(path: Path) -> list[bytes]:
    """A file's bytes and, for a gzip file, its decompressed members too."""
    data = path.read_bytes()
    out = [data]
    if data[:2] == b"\x1f\x8b":
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out.append(f.read())
    return out


def _assert_clean(directory: Path) -> int:
    files = [p for p in directory.rglob("*") if p.is_file()]
    for p in files:
        for blob in _members(p):
            assert SECRET_ARM.encode() not in blob, p
            assert SECRET_ENV.encode() not in blob, p
    return len(files)


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("DFLASH_DEPLOY_PASSWORD", SECRET_ENV)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    assert SECRET_ARM in text and SECRET_ENV in text
    return str(path)


@pytest.mark.parametrize("name,text,command", [("bracket", BRACKET, "run"),
                                               ("compare", COMPARE, "run"),
                                               ("exactness", EXACTNESS, "exactness")])
def test_no_secret_in_evidence_of_run_compare_exactness(tmp_path, secret_env, name, text, command):
    loaded = kinds.load(_write(tmp_path, name, text), command=command)
    assert loaded.resolved["kind"] == name
    out = kinds.seal(name, loaded, tmp_path / "ev", invocation=f"test {SECRET_ENV} {SECRET_ARM}")
    assert _assert_clean(out.path) > 4
    assert verify(out.path).ok, verify(out.path).problems
    if name == "exactness":
        assert list(out.path.glob("traces/*/*.jsonl.gz"))


def test_no_secret_in_calibration_evidence(tmp_path, secret_env):
    loaded = kinds.load(_write(tmp_path, "bracket", BRACKET), command="run")
    settings = {"repeats": 2, "simulations": 10, "seed": 0, "target_effect_pct": 5.0,
                "target_power": 0.8, "max_false_rate_pct": 1.0}
    out = calibrate(loaded, tmp_path / "ev", settings, invocation=f"test {SECRET_ARM}")
    assert _assert_clean(out.path) > 4
    assert verify(out.path).ok, verify(out.path).problems


def test_failed_run_leaves_no_secret_in_partial(tmp_path, secret_env):
    text = BRACKET.replace('model = "ds4-tiny"', f'model = "no-such-model-{SECRET_ENV}"')
    loaded = kinds.load(_write(tmp_path, "bad", text), command="run")
    with pytest.raises(Exception):
        kinds.seal("bracket", loaded, tmp_path / "ev", invocation="test")
    (partial,) = list((tmp_path / "ev").iterdir())
    assert partial.name.endswith(".partial")
    _assert_clean(partial)


def test_writer_scrubs_gzip_members_text_json_and_responses(tmp_path):
    w = EvidenceWriter.create(tmp_path, "demo", secrets=[SECRET_ARM])
    member = gzip.compress(f"header {SECRET_ARM}\n".encode()) + gzip.compress(b"second member\n")
    w.write_bytes("traces/a/r.jsonl.gz", member)
    w.write_text("logs/a.log", f"line {SECRET_ARM}")
    w.write_json("x.json", {"k": SECRET_ARM, SECRET_ARM: [SECRET_ARM]})
    w.append_jsonl("s.jsonl", {"v": f"a{SECRET_ARM}b"})
    sha = w.store_response(SECRET_ARM.encode())
    w.mark_incomplete(f"failed: {SECRET_ARM}")
    for p in w.path.rglob("*"):
        if p.is_file():
            for blob in _members(p):
                assert SECRET_ARM.encode() not in blob, p
    text = gzip.decompress((w.path / "traces/a/r.jsonl.gz").read_bytes())
    assert text == b"header <redacted>\nsecond member\n"
    assert (w.path / "responses" / f"{sha}.bin").read_bytes() == b"<redacted>"


def test_redactor_keeps_bytes_without_secrets_exact():
    data = gzip.compress(b"no secrets here", mtime=12345)
    assert Redactor(["a-secret-value"]).data(data) == data
    assert Redactor([]).data(b"abc") == b"abc"
