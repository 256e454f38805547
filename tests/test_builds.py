"""Git-ref builds (harness/builds.py) on a throwaway repository with two commits: each commit
built once in its own worktree, reused from the cache, artifact hashes recorded, conflicts named."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dflash_qualify.harness import builds
from dflash_qualify.harness.errors import RunFailed, UsageError

import git_engine_repo as repo_mod


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "engine-repo"
    return path, repo_mod.make_repo(path)


def spec_of(path: Path, command=None) -> builds.BuildSpec:
    return builds.BuildSpec(repo=path, command=tuple(command or repo_mod.BUILD_COMMAND),
                            artifacts=tuple(repo_mod.ARTIFACTS))


def count(b: builds.Build) -> int:
    return int((b.worktree.parent / "BUILD_COUNT").read_text())


def test_each_commit_builds_once_then_comes_from_the_cache(tmp_path, repo):
    path, commits = repo
    spec, root = spec_of(path), tmp_path / "cache"
    arms = [{"id": "A", "ref": "main"}, {"id": "cand", "ref": "fast"}, {"id": "B", "ref": "slow"}]
    first = builds.build_arms(spec, arms, root=root)
    assert first["A"].commit == first["B"].commit == commits["slow"]
    assert first["cand"].commit == commits["fast"]
    assert not first["A"].cached and not first["cand"].cached
    assert first["A"].worktree == first["B"].worktree != first["cand"].worktree
    assert count(first["A"]) == 1 and count(first["cand"]) == 1   # main and slow: one build
    assert (first["B"].ref, first["A"].ref) == ("slow", "main")
    for b in first.values():
        engine = b.worktree / "out" / "engine.py"
        assert b.artifacts == {"out/engine.py": hashlib.sha256(engine.read_bytes()).hexdigest()}
        assert "PREFILL_SLEEP_MS" in engine.read_text()
        assert str(root) in str(b.worktree) and b.log.is_file()
        assert b.commit in b.log.read_text()
    assert first["A"].artifacts != first["cand"].artifacts
    again = builds.build_arms(spec, arms, root=root)
    assert all(b.cached for b in again.values())
    assert count(again["A"]) == 1 and count(again["cand"]) == 1   # nothing was rebuilt
    assert {k: b.artifacts for k, b in again.items()} == {k: b.artifacts for k, b in first.items()}
    rec = again["cand"].record()
    assert rec["commit"] == commits["fast"] and rec["cached"] is True
    assert rec["log_sha256"] == hashlib.sha256(again["cand"].log.read_bytes()).hexdigest()
    # another build command is another cache entry
    other = builds.build(spec_of(path, repo_mod.BUILD_COMMAND + ["#"]), "fast", root=root)
    assert not other.cached and other.worktree != first["cand"].worktree


def test_modified_artifact_is_rebuilt(tmp_path, repo):
    path, _ = repo
    spec, root = spec_of(path), tmp_path / "cache"
    b = builds.build(spec, "fast", root=root)
    (b.worktree / "out" / "engine.py").write_text("tampered")
    again = builds.build(spec, "fast", root=root)
    assert not again.cached and again.artifacts == b.artifacts


def test_unknown_ref_and_failed_build_are_named(tmp_path, repo):
    path, _ = repo
    with pytest.raises(UsageError, match="ref 'nope' names no commit"):
        builds.build(spec_of(path), "nope", root=tmp_path / "c")
    bad = spec_of(path, ["sh", "-c", "echo compiling; echo boom >&2; exit 3"])
    with pytest.raises(RunFailed, match=r"build of main \([0-9a-f]{12}\) failed \(exit code 3\).*boom"):
        builds.build(bad, "main", root=tmp_path / "c")
    missing = builds.BuildSpec(repo=path, command=("true",), artifacts=("out/none",))
    with pytest.raises(RunFailed, match="artifact out/none is missing after the build"):
        builds.build(missing, "main", root=tmp_path / "c")


def test_worktree_placeholder_is_substituted(tmp_path, repo):
    path, _ = repo
    b = builds.build(spec_of(path), "fast", root=tmp_path / "c")
    argv = builds.substitute(["python", "{worktree}/out/engine.py", "--x"], b)
    assert argv == ["python", f"{b.worktree}/out/engine.py", "--x"]


def _arm(aid, role, ref, commit, sha):
    return {"id": aid, "role": role, "ref": ref,
            "build": {"ref": ref, "commit": commit, "artifacts": {"bin": sha}}}


def test_conflicts_refuse_unlike_builds_unless_the_protocol_names_another_ref():
    ok = [_arm("A", "reference", "main", "c1", "s1"), _arm("cand", "candidate", "pr", "c2", "s2"),
          _arm("B", "reference", "main", "c1", "s1")]
    assert builds.conflicts(ok) == []
    refs_differ = [ok[0], ok[1], _arm("B", "reference", "v2", "c3", "s3")]
    assert "reference arms run different engine builds" in builds.conflicts(refs_differ)[0]
    same_ref = [ok[0], _arm("cand", "candidate", "main", "c1", "other"), ok[2]]
    assert "names ref main like A but runs a different engine build" in \
        builds.conflicts(same_ref)[0]
    partial = [ok[0], {"id": "cand", "role": "candidate"}, ok[2]]
    assert "arms cand name no ref" in builds.conflicts(partial)[0]
    assert builds.conflicts([{"id": "A", "role": "reference"}]) == []


def test_parse_checks_the_build_table(tmp_path, repo):
    from dflash_qualify.harness.checker import Checker
    path, _ = repo
    ck = Checker("p.toml")
    spec = builds.parse(ck, {"repo": str(path), "command": ["make"], "artifacts": ["bin/x"]},
                        tmp_path)
    assert spec.repo == path and spec.command == ("make",)
    for table, message in [
        ({"repo": str(tmp_path), "command": ["make"], "artifacts": ["x"]}, "build.repo: expected a git repository"),
        ({"repo": str(path), "command": [], "artifacts": ["x"]}, "build.command: expected a non-empty array"),
        ({"repo": str(path), "command": ["make"], "artifacts": ["../x"]}, "build.artifacts[0]: expected a path inside"),
        ({"repo": str(path), "command": ["make"]}, "build.artifacts: missing required key"),
    ]:
        with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
            builds.parse(ck, table, tmp_path)


# ---------------------------------------------------------------- a git-ref bracket end to end

BRACKET = """\
schema_version = 1
kind = "bracket"
name = "git-refs"
[build]
repo = {repo}
command = {command}
artifacts = ["out/engine.py"]
[target]
kind = "command"
command = [{python}, "{{worktree}}/out/engine.py"]
[measure]
warmups = 1
measured = 4
max_tokens = 8
[[prompts]]
id = "p"
length = 32
[gate]
min_gain_pct = 20.0        # the fast commit sleeps 6 ms instead of 30 ms per prefill
max_drift_pct = 20.0
bootstrap_resamples = 500
[[arms]]
id = "A"
role = "reference"
ref = "main"
[[arms]]
id = "cand"
role = "candidate"
ref = "{cand_ref}"
[[arms]]
id = "B"
role = "reference"
ref = "{b_ref}"
"""


def bracket_file(tmp_path, path, cand_ref="fast", b_ref="main"):
    import sys
    f = tmp_path / f"git-refs-{cand_ref}-{b_ref}.toml"
    f.write_text(BRACKET.format(repo=json.dumps(str(path)),
                                command=json.dumps(repo_mod.BUILD_COMMAND),
                                python=json.dumps(sys.executable), cand_ref=cand_ref, b_ref=b_ref))
    return str(f)


def test_git_ref_bracket_builds_once_reuses_the_cache_records_and_qualifies(tmp_path, repo,
                                                                           monkeypatch):
    from dflash_qualify.harness import protocol as protocol_mod
    from dflash_qualify.harness import kinds
    from dflash_qualify.harness.verify import verify
    path, commits = repo
    monkeypatch.setenv(builds.CACHE_ENV, str(tmp_path / "cache"))
    spec = bracket_file(tmp_path, path)
    outs = [kinds.qualify(protocol_mod.load(spec), tmp_path / f"ev{i}", invocation="test")
            for i in range(2)]
    for out in outs:
        assert out.qualified, out.stats["verdict"]
        assert verify(out.path).ok
        proto = json.loads((out.path / "protocol.json").read_text())
        arms = {a["id"]: a for a in proto["arms"]}
        assert arms["A"]["build"]["commit"] == arms["B"]["build"]["commit"] == commits["slow"]
        assert arms["cand"]["build"]["commit"] == commits["fast"]
        for a in arms.values():
            engine = Path(a["build"]["worktree"]) / "out" / "engine.py"
            assert a["command"][1] == str(engine)
            assert a["build"]["artifacts"] == {
                "out/engine.py": hashlib.sha256(engine.read_bytes()).hexdigest()}
        for commit in commits.values():
            log = out.path / "logs" / f"build-{commit[:12]}.log"
            assert commit in log.read_text()
        cond = next(c for c in out.stats["verdict"]["conditions"] if c["name"] == "same_engine_build")
        assert cond["passed"]
    first, second = (json.loads((o.path / "protocol.json").read_text()) for o in outs)
    assert [a["build"]["cached"] for a in first["arms"]] == [False, False, False]
    assert [a["build"]["cached"] for a in second["arms"]] == [True, True, True]
    for a in second["arms"]:   # each commit was built exactly once over both runs
        assert (Path(a["build"]["worktree"]).parent / "BUILD_COUNT").read_text() == "1"
    gain = outs[0].stats["comparisons"][0]["gain_pct"]
    assert gain > 100   # 30 ms -> 6 ms per prefill, measured by the engine's own clock


def test_reference_arms_on_different_commits_are_refused(tmp_path, repo, monkeypatch):
    from dflash_qualify.harness import protocol as protocol_mod
    from dflash_qualify.harness import kinds
    path, _ = repo
    monkeypatch.setenv(builds.CACHE_ENV, str(tmp_path / "cache"))
    spec = bracket_file(tmp_path, path, cand_ref="fast", b_ref="fast")
    loaded = protocol_mod.load(spec, warmups=0, measured=2)
    out = kinds.qualify(loaded, tmp_path / "ev", invocation="test")
    assert not out.qualified and "builds_differ" in out.stats["verdict"]["reasons"]
    cond = next(c for c in out.stats["verdict"]["conditions"] if c["name"] == "same_engine_build")
    assert "reference arms run different engine builds (A = main" in cond["message"]


def test_ref_without_build_and_worktree_without_ref_are_protocol_errors(tmp_path, repo):
    from dflash_qualify.harness import protocol as protocol_mod
    path, _ = repo
    text = Path(bracket_file(tmp_path, path)).read_text()
    no_build = tmp_path / "nb.toml"
    no_build.write_text(text.split("[build]")[0] + "[target]" + text.split("[target]")[1])
    with pytest.raises(UsageError, match=r"arms\[0\].ref: expected no ref without a \[build\]"):
        protocol_mod.load(str(no_build))
    no_ref = tmp_path / "nr.toml"
    no_ref.write_text(text.replace('ref = "main"\n[[arms]]\nid = "cand"', '[[arms]]\nid = "cand"', 1)
                      .replace('id = "A"\nrole = "reference"\nref = "main"', 'id = "A"\nrole = "reference"'))
    with pytest.raises(UsageError, match=r"arms\[0\].ref: expected a ref: this arm's command uses \{worktree\}"):
        protocol_mod.load(str(no_ref))


def test_calibrate_on_a_git_ref_protocol_builds_only_the_reference_ref(tmp_path, repo, monkeypatch):
    from click.testing import CliRunner
    from dflash_qualify.harness.cli import main
    from dflash_qualify.harness.verify import verify
    path, commits = repo
    monkeypatch.setenv(builds.CACHE_ENV, str(tmp_path / "cache"))
    result = CliRunner().invoke(main, ["calibrate", bracket_file(tmp_path, path), "--repeats", "2",
                                       "--out", str(tmp_path / "ev")])
    assert result.exit_code in (0, 1), result.output
    (d,) = (tmp_path / "ev").iterdir()
    assert verify(d).ok
    proto = json.loads((d / "protocol.json").read_text())
    assert {a["build"]["commit"] for a in proto["arms"]} == {commits["slow"]}
    assert not list((tmp_path / "cache").glob(f"*/{commits['fast'][:16]}-*"))
