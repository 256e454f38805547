"""Fuzzed command lines: every subcommand with hostile options, values and paths answers with
a clear error and an exit code, never a traceback (click's CliRunner for the many cases, the
real executable for a sample). `serve` is left out (valid arguments would serve forever;
tests/test_server.py covers its usage errors). No valid protocol name is drawn, but `run`
and `calibrate` fall back to the default protocol: in-process every target kind is replaced
by one that fails at start, so a fuzzed run ends with exit 3 and never starts an engine."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evidence_factory as ef
from dflash_qualify.harness import targets
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.targets.fake import FakeScript, FakeTarget

EXE = str(Path(sys.executable).parent / "dflash-qualify")
COMMANDS = ["run", "verify", "report", "gate", "analyze", "engine-info", "calibrate", "bogus"]
OPTIONS = ["--format", "--min-gain", "--max-drift", "--junit", "--reference", "--candidate",
           "--direction", "--seed", "--resamples", "--json", "--model", "--out", "--warmups",
           "--measured", "--repeats", "--effect", "--power", "--simulations",
           "--max-false-rate", "--version", "-x", "--", "-"]
VALUES = ["-1", "0", "1", "3", "1e309", "nan", "inf", "-inf", "abc", "", " ", "md", "json",
          "csv", "html", "higher", "lower", "A", "cand", "B", "\udcff\udcfe", "ü", "x" * 300,
          "no-such-protocol"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """Hostile and valid path arguments, all under one temporary directory."""
    root = tmp_path_factory.mktemp("cli-fuzz")
    sealed = ef.build(root / "ev")
    partial = ef.build(root / "partial", seal=False)
    (root / "garbage.bin").write_bytes(b"\xff\x00garbage")
    (root / "samples.csv").write_text("arm,phase,value\nA,measured,1\nB,measured,2\n"
                                      "cand,measured,3\n")
    (root / "bad.csv").write_text("arm,value\nA,abc\n,,\n")
    (root / "bad.toml").write_text('schema_version = 1\nkind = "bracket"\nname = 3\n')
    (root / "cfg.json").write_text('{"base": "ds4-tiny", "rope_theta": NaN}')
    (root / "empty").mkdir()
    return {name: str(p) for name, p in {
        "sealed": sealed, "partial": partial, "garbage": root / "garbage.bin",
        "csv": root / "samples.csv", "bad_csv": root / "bad.csv", "toml": root / "bad.toml",
        "cfg": root / "cfg.json", "empty": root / "empty", "missing": root / "missing",
        "junit": root / "out" / "junit.xml", "file_as_dir": root / "garbage.bin" / "sub"}.items()}


def argv_strategy(paths: dict[str, str]):
    token = st.one_of(st.sampled_from(OPTIONS), st.sampled_from(VALUES),
                      st.sampled_from(sorted(paths.values())),
                      st.text(alphabet=st.characters(blacklist_characters="\x00",
                                                     blacklist_categories=("Cs",)),
                              max_size=12))
    return st.tuples(st.sampled_from(COMMANDS), st.lists(token, max_size=7)).map(
        lambda t: [t[0], *t[1]])


def test_fuzzed_command_lines_never_trace(paths, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a relative --out or --junit lands in tmp_path
    refuse = FakeScript(fail_prepare="engine start refused by the CLI fuzz test")
    for kind in list(targets.TARGETS):
        monkeypatch.setitem(targets.TARGETS, kind, lambda proto, arm: FakeTarget(arm["id"], refuse))
    seen = {"cases": 0, "codes": {}}

    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(argv=argv_strategy(paths))
    def case(argv):
        result = CliRunner().invoke(main, argv)
        seen["cases"] += 1
        seen["codes"][result.exit_code] = seen["codes"].get(result.exit_code, 0) + 1
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            (argv, result.output, repr(result.exception))
        assert result.exit_code in (0, 1, 2, 3), (argv, result.output)
        assert "Traceback" not in result.output, (argv, result.output)
        if result.exit_code == 2:   # a usage error says what is wrong
            assert "rror" in result.output, (argv, result.output)

    case()
    assert seen["cases"] >= 400 and set(seen["codes"]) & {1, 2}


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("engine-info", "bogus")])
def test_a_name_too_long_for_the_os_is_a_usage_error(command, tmp_path, monkeypatch):
    """A 300-character protocol name or path (ENAMETOOLONG from stat) once escaped `run` as an
    OSError (found by the fuzz test above); every command answers with an exit code instead."""
    monkeypatch.chdir(tmp_path)
    refuse = FakeScript(fail_prepare="engine start refused")
    for kind in list(targets.TARGETS):
        monkeypatch.setitem(targets.TARGETS, kind, lambda proto, arm: FakeTarget(arm["id"], refuse))
    result = CliRunner().invoke(main, [command, "x" * 300])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (1, 2, 3), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ["verify", "{garbage}"], ["verify", "{partial}"], ["report", "{partial}", "--format", "x"],
    ["gate", "{sealed}", "--min-gain", "nan"], ["gate", "{sealed}", "--junit", "{file_as_dir}"],
    ["analyze", "{bad_csv}", "--candidate", "cand"], ["analyze", "{garbage}", "--candidate", "A"],
    ["engine-info", "--model", "{cfg}"], ["run", "{toml}", "--out", "{empty}"],
    ["calibrate", "{toml}", "--repeats", "-3"], ["run", "\udcff", "--warmups", "x"],
])
def test_real_executable_sample(paths, tmp_path, args):
    argv = [a.format(**paths) if "{" in a else a for a in args]
    done = subprocess.run([EXE, *argv], capture_output=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode in (1, 2, 3), out
    assert "Traceback" not in out and ("rror" in out or "INVALID" in out), out
