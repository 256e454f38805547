"""Protocol loading: bundled protocols resolve; bad files give one precise line and exit 2."""
from __future__ import annotations

from evidence_factory import fixed_n_text

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness import protocol
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.errors import UsageError

GOOD = """\
schema_version = 1
kind = "bracket"
name = "t"

[measure]
warmups = 1
measured = 3

[[prompts]]
id = "p"
text = "hello"

[[arms]]
id = "A"
role = "reference"

[[arms]]
id = "cand"
role = "candidate"
env = { DFLASH_DS4_EXACT_PREFILL_BANDS = "1" }
engine = { chunk = 4 }

[[arms]]
id = "B"
role = "reference"
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# exactness protocols (kind = "exactness") have their own loader: tests/test_exactness_trace.py
RUN_PROTOCOLS = [n for n in protocol.bundled_names()
                 if b'kind = "exactness"' not in (protocol.bundled_dir() / f"{n}.toml").read_bytes()]


@pytest.mark.parametrize("name", RUN_PROTOCOLS)
def test_bundled_protocols_load(name):
    loaded = protocol.load(name)
    r = loaded.resolved
    assert r["name"] == name
    assert r["schema_version"] == 1
    assert r["source"]["bundled"] is True
    assert loaded.source_bytes.startswith(b"#")
    ids = [a["id"] for a in r["arms"]]
    assert r["schedule"] == ids
    for p in r["prompts"]:
        assert p["text"] and p["bytes"] == len(p["text"].encode())


def test_default_protocol_is_the_aba_bracket():
    r = protocol.load(None).resolved
    assert r["name"] == "exact-bands-aba" and r["kind"] == "bracket"
    assert [a["role"] for a in r["arms"]] == ["reference", "candidate", "reference"]
    assert r["target"]["model"] == "ds4-mini" and r["cache"] == "cold"
    assert all(a["warmups"] == 1 and a["measured"] == 2 for a in r["arms"])  # per block
    assert r["sequential"] == {"max_rounds": 240, "max_seconds": 900.0}
    assert r["gate"]["min_gain_pct"] == 2.0
    assert r["metric"] == "prefill_tok_s" and r["direction"] == "higher"
    cand = r["arms"][1]
    assert cand["env"]["DFLASH_DS4_EXACT_PREFILL_BANDS"] == "1"
    assert r["arms"][0]["env"]["DFLASH_DS4_EXACT_PREFILL_BANDS"] is None  # unset for q1


def test_compare_protocol_groups_and_direction():
    r = protocol.load("narrow-mmvq-compare").resolved
    assert r["kind"] == "compare" and r["groups"] == ["64", "128"]
    assert r["direction"] == "lower" and r["gate"]["require_identical"] is False
    main_arm, pr = r["arms"]
    assert main_arm["env"]["LUCE_MMVQ_MAX_NCOLS"] == "1" and pr["env"]["LUCE_MMVQ_MAX_NCOLS"] is None
    assert [len(p["text"]) for p in r["prompts"]] == [64, 128]


def test_overrides_apply_to_every_arm_and_are_recorded(tmp_path):
    r = protocol.load(str(write(tmp_path, GOOD)), warmups=0, measured=2).resolved
    assert all(a["warmups"] == 0 and a["measured"] == 2 for a in r["arms"])
    assert r["overrides"] == {"warmups": 0, "measured": 2}


def test_prompt_file_relative_to_protocol(tmp_path):
    (tmp_path / "q.txt").write_text("a prompt from a file")
    text = GOOD.replace('text = "hello"', 'file = "q.txt"')
    r = protocol.load(str(write(tmp_path, text))).resolved
    assert r["prompts"][0]["text"] == "a prompt from a file"


# (edit to GOOD, exact one-line message after "<file>: ")
BAD = [
    ("syntax", lambda s: s.replace('name = "t"', 'name = "t'),
     "TOML syntax error: Illegal character '\\n' (at line 3, column 10)"),
    ("missing key", lambda s: s.replace('name = "t"\n', ''),
     "name: missing required key"),
    ("wrong type", lambda s: s.replace("measured = 3", 'measured = "5"'),
     "measure.measured: expected an integer from 1 to 100000, found string '5'"),
    ("unknown key", lambda s: s.replace("warmups = 1", "warmup = 1"),
     "measure.warmup: unknown key (allowed here: arm_timeout_s, cache, max_rounds, max_seconds, "
     "max_tokens, measured, metric, request_timeout_s, sequential, start_timeout_s, warmups)"),
    ("bad role", lambda s: s.replace('id = "B"\nrole = "reference"', 'id = "B"\nrole = "control"'),
     "arms[2].role: expected one of \"reference\", \"candidate\", found string 'control'"),
    ("bad env value", lambda s: s.replace('DFLASH_DS4_EXACT_PREFILL_BANDS = "1"',
                                          "LUCE_MMVQ_MAX_NCOLS = [1, 2]"),
     "arms[1].env.LUCE_MMVQ_MAX_NCOLS: expected a string, an integer, or false (unset), "
     "found an array of 2"),
    ("float env value", lambda s: s.replace('DFLASH_DS4_EXACT_PREFILL_BANDS = "1"',
                                            "LUCE_MMVQ_MAX_NCOLS = 1.5"),
     "arms[1].env.LUCE_MMVQ_MAX_NCOLS: expected a string, an integer, or false (unset), "
     "found float 1.5"),
    ("schema version", lambda s: s.replace("schema_version = 1", "schema_version = 2"),
     "schema_version: expected 1 (the only version this tool reads), found integer 2"),
    ("bad kind", lambda s: s.replace('kind = "bracket"', 'kind = "abba"'),
     "kind: expected one of \"bracket\", \"compare\", found string 'abba'"),
    ("no candidate", lambda s: s.replace('role = "candidate"', 'role = "reference"'),
     "arms: expected one candidate arm and at least one reference arm, found 3 reference and "
     "0 candidate arms"),
    ("duplicate arm", lambda s: s.replace('id = "B"', 'id = "A"'),
     "arms[2].id: expected an id not used by another arm, found string 'A'"),
    ("bad engine arg", lambda s: s.replace("chunk = 4", "chunk = 0"),
     "arms[1].engine.chunk: expected an integer from 1 to 64, found integer 0"),
    ("bad mode", lambda s: s.replace("chunk = 4", 'chunk = 4, mode = "fast"'),
     "arms[1].engine.mode: expected one of \"exact\", \"approximate\", found string 'fast'"),
    ("unknown engine arg", lambda s: s.replace("chunk = 4", "chunks = 4"),
     "arms[1].engine.chunks: unknown key (allowed here: bands, chunk, mmvq_max_ncols, mode)"),
    ("key in the wrong table", lambda s: s + 'schedule = ["A", "cand", "C"]\n',
     "arms[2].schedule: unknown key (allowed here: engine, env, id, label, measured, role, "
     "warmups)"),
    ("two prompt sources", lambda s: s.replace('text = "hello"', 'text = "hello"\nlength = 4'),
     "prompts[0]: expected exactly one of text, file or length, found text, length"),
    ("missing prompt file", lambda s: s.replace('text = "hello"', 'file = "nope.txt"'),
     "prompts[0].file: expected a file relative to the protocol or the bundled protocols "
     "directory, found 'nope.txt', which does not exist"),
    ("bad metric", lambda s: s.replace("warmups = 1", 'warmups = 1\nmetric = "tok_s"'),
     "measure.metric: expected one of \"prefill_tok_s\", \"prefill_ms\", \"decode_tok_s\", "
     "\"total_ms\", found string 'tok_s'"),
]


@pytest.mark.parametrize("case,edit,message", BAD, ids=[b[0] for b in BAD])
def test_bad_protocol_message(tmp_path, case, edit, message):
    path = write(tmp_path, edit(GOOD))
    with pytest.raises(UsageError) as err:
        protocol.load(str(path))
    assert str(err.value) == f"{path}: {message}"


def test_schedule_must_name_arms(tmp_path):
    text = GOOD.replace('name = "t"\n', 'name = "t"\nschedule = ["A", "cand", "C"]\n')
    with pytest.raises(UsageError, match=r"schedule\[2\]: expected one of \"A\", \"cand\", \"B\""):
        protocol.load(str(write(tmp_path, text)))


def test_unknown_bundled_name_lists_the_bundled_ones():
    with pytest.raises(UsageError, match="unknown protocol 'exact-bandz'.*exact-bands-aba"):
        protocol.load("exact-bandz")


@pytest.mark.parametrize("case,edit,message", BAD[:6], ids=[b[0] for b in BAD[:6]])
def test_cli_bad_protocol_exit_2_one_line(tmp_path, case, edit, message):
    path = write(tmp_path, edit(GOOD))
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "ev")])
    assert result.exit_code == 2
    assert result.output == f"error: {path}: {message}\n"
    assert not (tmp_path / "ev").exists()  # nothing written for a bad protocol


def test_cli_subprocess_no_traceback(tmp_path):
    path = write(tmp_path, GOOD.replace('kind = "bracket"', "kind = 3"))
    exe = Path(sys.executable).parent / "dflash-qualify"
    done = subprocess.run([str(exe), "run", str(path),
                           "--out", str(tmp_path / "ev")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {path}: kind: expected one of \"bracket\", \"compare\", found integer 3"]


def test_command_target(tmp_path):
    text = GOOD.replace('[measure]', '[target]\nkind = "command"\ncommand = ["my-engine", "--x"]'
                        '\n\n[measure]')
    r = protocol.load(str(write(tmp_path, text))).resolved
    assert r["target"]["kind"] == "command" and r["target"]["command"] == ["my-engine", "--x"]
    bad = text.replace('command = ["my-engine", "--x"]', 'command = "my-engine --x"')
    path = write(tmp_path, bad, "bad.toml")
    with pytest.raises(UsageError) as err:
        protocol.load(str(path))
    assert str(err.value) == (f"{path}: target.command: expected a non-empty array of strings "
                              "(program and arguments), found string 'my-engine --x'")
    model = text.replace('kind = "command"', 'kind = "command"\nmodel = "ds4-mini"')
    with pytest.raises(UsageError, match=r"target.model: unknown key"):
        protocol.load(str(write(tmp_path, model, "model.toml")))


def test_arm_command_needs_a_command_target(tmp_path):
    text = GOOD.replace('id = "B"', 'id = "B"\ncommand = ["x"]')
    with pytest.raises(UsageError, match=r"arms\[2\].command: unknown key"):
        protocol.load(str(write(tmp_path, text)))


# ---------------------------------------------------------------------- fuzzing (bounded)
import copy  # noqa: E402
import tomllib  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_protocol_documents_never_crash(tmp_path_factory, data):
    doc = tomllib.loads(GOOD)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=8))] = data.draw(VALUES)
        else:
            parent[path[-1]] = copy.deepcopy(data.draw(VALUES))
    try:
        protocol.resolve(doc, file="fuzz.toml", base_dir=tmp_path_factory.getbasetemp())
    except UsageError as exc:
        assert str(exc).startswith("fuzz.toml") and "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_fuzzed_protocol_text_never_crashes(tmp_path_factory, text):
    path = tmp_path_factory.getbasetemp() / "fuzz-text.toml"
    path.write_text(GOOD[: len(GOOD) // 2] + text, encoding="utf-8")
    try:
        protocol.load(str(path))
    except UsageError as exc:
        assert "\n" not in str(exc)


def test_trailing_newline_never_passes_an_anchored_pattern(tmp_path):
    # re.match with "...$" accepts "x\n" ("$" matches before a final newline): names, arm ids
    # and env names must be refused whole, and a key with a newline is quoted on one line.
    text = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text())
    for old, new, field in (('name = "exact-bands-quick"', 'name = "quick\\n"', "name"),
                            ('id = "cand"', 'id = "cand\\n"', "arms[1].id"),
                            ('[target]\n', '[target]\n"0\\n" = 1\n', 'target."0\\n"')):
        path = tmp_path / "p.toml"
        path.write_text(text.replace(old, new, 1))
        with pytest.raises(UsageError) as err:
            protocol.load(str(path))
        assert "\n" not in str(err.value) and field in str(err.value), str(err.value)
