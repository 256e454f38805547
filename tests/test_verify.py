"""harness.verify and `dflash-qualify verify`: every tampering is named precisely."""
from __future__ import annotations

import hashlib
import json
import os

import pytest
from click.testing import CliRunner

import evidence_factory as ef
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.evidence import dumps_json
from dflash_qualify.harness.verify import verify


@pytest.fixture
def sealed(tmp_path):
    return ef.build(tmp_path / "ev")


def messages(d):
    return [str(p) for p in verify(d).problems]


def rewrite_manifest(d, edit):
    manifest = json.loads((d / "manifest.json").read_text())
    edit(manifest)
    (d / "manifest.json").write_text(dumps_json(manifest))


def response_rel(d):
    return next(p for p in (d / "responses").iterdir()).relative_to(d).as_posix()


def test_sealed_evidence_verifies(sealed):
    r = verify(sealed)
    assert r.ok, r.problems
    assert r.manifest_sha == hashlib.sha256((sealed / "manifest.json").read_bytes()).hexdigest()


def test_changed_byte(sealed):
    rel = response_rel(sealed)
    data = bytearray((sealed / rel).read_bytes())
    data[3] ^= 1
    (sealed / rel).write_bytes(bytes(data))
    msgs = messages(sealed)
    assert len(msgs) == 1
    assert msgs[0].startswith(f"{rel}: modified: sha256 {hashlib.sha256(bytes(data)).hexdigest()}, manifest says ")


def test_changed_size(sealed):
    with open(sealed / "report.md", "a") as f:
        f.write("forged line\n")
    size = (sealed / "report.md").stat().st_size
    assert messages(sealed) == [f"report.md: modified: size {size} bytes, manifest says {size - 12}"]


def test_removed_file(sealed):
    (sealed / "environment.json").unlink()
    assert messages(sealed) == ["environment.json: missing (listed in manifest.json, not on disk)"]


def test_added_file(sealed):
    (sealed / "logs").mkdir()
    (sealed / "logs" / "extra.log").write_text("x")
    assert messages(sealed) == ["logs/extra.log: extra file (on disk, not listed in manifest.json)"]


def test_symlink_file_and_directory(sealed, tmp_path):
    (tmp_path / "outside.txt").write_text("x")
    os.symlink(tmp_path / "outside.txt", sealed / "link.txt")
    os.symlink(tmp_path, sealed / "linkdir")
    msgs = messages(sealed)
    assert f"link.txt: symbolic link (to {tmp_path / 'outside.txt'}); evidence must hold regular files only" in msgs
    assert f"linkdir: symbolic link (to {tmp_path}); evidence must hold regular files only" in msgs


def test_listed_file_replaced_by_symlink(sealed):
    target = sealed / "protocol.toml"
    content = target.read_bytes()
    target.unlink()
    (sealed.parent / "elsewhere.toml").write_bytes(content)
    os.symlink(sealed.parent / "elsewhere.toml", target)
    msgs = messages(sealed)
    assert msgs == [f"protocol.toml: symbolic link (to {sealed.parent / 'elsewhere.toml'}); "
                    "evidence must hold regular files only"]


def test_hard_link(sealed, tmp_path):
    os.link(sealed / "report.md", tmp_path / "copy.md")
    assert messages(sealed) == ["report.md: hard-linked file (2 links); evidence files must be unshared"]


@pytest.mark.parametrize("path, why", [
    ("../escape.txt", "contains '..'"),
    ("a/../../b", "contains '..'"),
    ("/etc/passwd", "is absolute"),
    ("a\\b", "contains a backslash"),
    ("./report.md", "is not a normalized path"),
    ("a//b", "is not a normalized path"),
])
def test_path_escaping_manifest_entry(sealed, path, why):
    rewrite_manifest(sealed, lambda m: m["files"].append({"path": path, "size": 1, "sha256": "0" * 64}))
    assert f"manifest.json: files[{len(json.loads((sealed / 'manifest.json').read_text())['files']) - 1}]: " \
           f"path {path!r} {why}" in messages(sealed)


def test_duplicate_manifest_entry_and_duplicate_keys(sealed):
    rewrite_manifest(sealed, lambda m: m["files"].insert(1, dict(m["files"][0])))
    first = json.loads((sealed / "manifest.json").read_text())["files"][0]["path"]
    assert f"manifest.json: files[1]: duplicate entry for {first!r}" in messages(sealed)
    text = (sealed / "manifest.json").read_text()
    (sealed / "manifest.json").write_text(text.replace('"version": 1', '"version": 1, "version": 1'))
    assert messages(sealed) == ["manifest.json: not valid JSON (duplicate key 'version')"]


def test_wrong_manifest_version(sealed):
    rewrite_manifest(sealed, lambda m: m.update(version=2))
    assert messages(sealed) == ["manifest.json: version: expected 1, got 2 (this tool reads manifest version 1 only)"]


def test_incomplete_directory(tmp_path):
    partial = ef.build(tmp_path / "ev", seal=False)
    msgs = messages(partial)
    assert msgs[0] == ".: incomplete: running"
    assert "manifest.json: missing: the directory is not sealed" in msgs


def test_incomplete_marker_in_sealed_dir(sealed):
    (sealed / "INCOMPLETE").write_text("failed: worker died")
    msgs = messages(sealed)
    assert ".: incomplete: failed: worker died" in msgs


def test_forged_stats_with_rehashed_manifest(sealed):
    stats = json.loads((sealed / "stats.json").read_text())
    stats["comparisons"][0]["gain_pct"] = 99.0
    (sealed / "stats.json").write_text(dumps_json(stats))

    def rehash(m):
        for e in m["files"]:
            if e["path"] == "stats.json":
                data = (sealed / "stats.json").read_bytes()
                e.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    rewrite_manifest(sealed, rehash)
    msgs = messages(sealed)
    assert len(msgs) == 1
    assert msgs[0].startswith("stats.json: does not match statistics recomputed from samples.jsonl: "
                              "comparisons[0].gain_pct: stored 99.0, recomputed 19.9999")


def test_fifo_is_not_a_regular_file(sealed):
    os.mkfifo(sealed / "pipe")
    assert messages(sealed) == ["pipe: not a regular file"]


def test_garbage_never_raises(tmp_path):
    d = tmp_path / "junk"
    d.mkdir()
    (d / "manifest.json").write_bytes(b"\xff\xfe not json")
    msgs = messages(d)
    assert msgs[0].startswith("manifest.json: not valid JSON")
    assert messages(tmp_path / "absent") == [".: does not exist"]


def test_cli_ok_and_failure(sealed):
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", str(sealed)])
    sha = hashlib.sha256((sealed / "manifest.json").read_bytes()).hexdigest()
    assert ok.exit_code == 0 and ok.output == f"OK {sha}\n"
    (sealed / "environment.json").unlink()
    bad = runner.invoke(main, ["verify", str(sealed)])
    assert bad.exit_code == 1
    assert bad.output == (f"{sealed}/environment.json: missing (listed in manifest.json, not on disk)\n"
                          f"INVALID: 1 problem(s) in {sealed}\n")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=30, deadline=None)
@given(files=st.lists(st.dictionaries(st.sampled_from(["path", "size", "sha256", "x"]), _json, max_size=4),
                      max_size=4))
def test_hostile_manifest_never_raises(tmp_path_factory, files):
    d = tmp_path_factory.mktemp("hostile")
    (d / "manifest.json").write_text(json.dumps({"schema": "dflash-qualify.manifest", "version": 1,
                                                 "files": files}))
    result = verify(d)
    assert not result.ok and all(isinstance(p.message, str) for p in result.problems)
    assert not any("unexpected error" in p.message for p in result.problems)


# ---------------------------------------------------------------------- hardening (issue 7)
def test_manifest_replaced_by_a_directory_is_not_sealed(sealed):
    (sealed / "manifest.json").unlink()
    (sealed / "manifest.json").mkdir()
    assert "manifest.json: not a regular file: the directory is not sealed" in messages(sealed)


def test_empty_directory_and_huge_sparse_file_are_named_without_reading(sealed):
    (sealed / "spare").mkdir()
    with open(sealed / "samples.jsonl", "r+b") as f:   # 8 GiB, sparse: must not be hashed
        f.truncate(1 << 33)
    msgs = messages(sealed)
    assert "spare: empty directory; evidence holds files only" in msgs
    assert any(m.startswith(f"samples.jsonl: modified: size {1 << 33} bytes") for m in msgs)


def test_non_canonical_manifest_and_unknown_keys(sealed):
    m = json.loads((sealed / "manifest.json").read_text())
    (sealed / "manifest.json").write_text(json.dumps(m))
    assert messages(sealed) == ["manifest.json: not in the canonical form the sealer writes "
                                "(indent 2, sorted keys, UTF-8, trailing newline): its bytes "
                                "were edited"]
    rewrite_manifest(sealed, lambda m: m.update(signed_by="me"))
    assert messages(sealed)[0].startswith("manifest.json: keys: expected exactly")


def test_response_must_be_named_by_its_hash(sealed):
    rel = response_rel(sealed)
    data = (sealed / rel).read_bytes() + b"!"
    (sealed / rel).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    rewrite_manifest(sealed, lambda m: [e.update(size=len(data), sha256=digest)
                                        for e in m["files"] if e["path"] == rel])
    assert messages(sealed) == [f"{rel}: a stored response must be named by its SHA-256 "
                                f"(responses/{digest}.bin)"]


def test_non_utf8_and_newline_names_print_on_one_line(sealed):
    (sealed / os.fsdecode(b"bad\xff\nname")).write_text("x")
    result = CliRunner().invoke(main, ["verify", str(sealed)])
    assert result.exit_code == 1 and result.exception is not None  # SystemExit(1)
    assert f"{sealed}/bad\\xff\\x0aname: extra file (on disk, not listed in manifest.json)\n" \
        in result.output


def test_cli_not_evidence_says_so_at_once(tmp_path):
    """A directory without manifest.json is a user error (exit 2) named in one line, before
    any scan: no file of the tree is listed; an unsealed run says why it is unsealed."""
    runner = CliRunner()
    tree = tmp_path / "src"
    for i in range(5):
        (tree / f"d{i}").mkdir(parents=True)
        (tree / f"d{i}" / "file.py").write_text("x")
    out = runner.invoke(main, ["verify", str(tree)])
    assert out.exit_code == 2
    assert out.output == f"error: {tree} is not an evidence directory (no manifest.json)\n"

    partial = ef.build(tmp_path / "ev", seal=False)
    out = runner.invoke(main, ["verify", str(partial)])
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert out.output == (f"error: {partial} is an unsealed run, not sealed evidence "
                          f"(incomplete: running; no manifest.json)\n")

    sealed_name = partial.with_name(partial.name.removesuffix(".partial"))
    if sealed_name != partial:
        out = runner.invoke(main, ["verify", str(sealed_name)])
        assert out.exit_code == 2 and out.output.count("\n") == 1
        assert f"{partial} is an unsealed run (incomplete: running" in out.output

    out = runner.invoke(main, ["verify", str(tmp_path / "absent")])
    assert out.exit_code == 2 and out.output == f"error: {tmp_path / 'absent'}: does not exist\n"
    for odd in ("", ".", "x" * 5000, "a\x00b"):   # names the OS refuses never raise
        out = runner.invoke(main, ["verify", odd])
        assert out.exit_code == 2 and out.output.startswith("error: "), (odd[:20], out.output)
        assert out.exception is None or isinstance(out.exception, SystemExit)
