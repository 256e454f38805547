"""Hostile evidence: a property test that mutates one real sealed directory in 1000+ ways and
requires `verify` to reject every changed directory with a precise message, never raising.

The template is sealed once by the real runner (fake targets, so it costs well under a
second) and copied per case. Mutations: byte flips, truncation, appends, renames, removed
and added files (non-UTF-8 names too), empty directories, symbolic and hard links, FIFOs,
huge sparse files, a stray INCOMPLETE, corrupted, non-canonical or duplicate-key manifest
JSON, manifest entries with `..`, absolute, unencodable or duplicate paths, and forgeries
that edit stats, samples or a response and rehash the manifest to match.

The one change verify cannot see is an in-place edit of the manifest's own metadata
(created_utc, tool_version) that keeps it canonical: the manifest is the root of trust, so
that directory is a different piece of evidence with a different id (SHA-256 of
manifest.json). The property allows exactly that, and checks the id changed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_qualify.harness import kinds, protocol
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.evidence import dumps_json, parse_json
from dflash_qualify.harness.targets.fake import FakeScript, fake_factory
from dflash_qualify.harness.verify import printable, verify

CASES = int(os.environ.get("HOSTILE_CASES", 1050))  # examples; >= MIN_CASES must change the dir
MIN_CASES = 1000
HUGE = 1 << 33        # 8 GiB, sparse: costs no disk, but must never be read whole
HASH_LIMIT = 1 << 20  # the fingerprint hashes file contents up to this size

NAMES = st.one_of(
    st.sampled_from([b"extra.txt", b"logs/extra.log", b"responses/" + b"0" * 64 + b".bin",
                     b"new/deep/file", b".hidden", b"INCOMPLETE", b"manifest.json.bak",
                     b"bad\xff\xfename", b"caf\xc3\xa9", b"logs/\x80.log", b"report.md ",
                     b"stats.json~"]),
    st.binary(min_size=1, max_size=12).map(
        lambda b: bytes(c for c in b if c not in (0, 0x2F)) or b"x"))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """One real sealed evidence directory (runner + fake targets, small bootstrap)."""
    loaded = protocol.load("exact-bands-quick", measured=3)
    loaded.resolved["gate"]["bootstrap_resamples"] = 200
    root = tmp_path_factory.mktemp("template")
    out = kinds.qualify(loaded, root / "ev", invocation="dflash-qualify run hostile",
                         make_target=fake_factory({"cand": FakeScript(prefill_ms=[5.0, 5.1])}))
    assert verify(out.path).ok
    return out.path


def files_of(d: Path) -> list[str]:
    """Regular files (not links, not huge) under d, relative: what a mutation may pick."""
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.stat().st_size <= HASH_LIMIT)


def fresh(d: Path, stem: str) -> Path:
    """A name under d that does not exist yet (mutations may run twice in one case)."""
    n = 0
    while os.path.lexists(d / f"{stem}{n or ''}"):
        n += 1
    return d / f"{stem}{n or ''}"


def fingerprint(d: Path) -> dict:
    """Everything a mutation can change: names (bytes), types, link counts and targets,
    sizes, and contents of files up to HASH_LIMIT."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(d)):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st_ = os.lstat(full)
            key = os.path.relpath(full, os.fsencode(d))
            if stat.S_ISLNK(st_.st_mode):
                out[key] = ("link", os.readlink(full))
            elif stat.S_ISREG(st_.st_mode):
                digest = None
                if st_.st_size <= HASH_LIMIT:
                    with open(full, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                out[key] = ("file", st_.st_size, st_.st_nlink, digest)
            else:
                out[key] = (stat.S_IFMT(st_.st_mode),)
    return out


def restore(work: Path, outside: Path, pristine: dict[str, bytes]) -> None:
    """Bring `work` back to the template by repairing only what the last case changed (far
    fewer file-system calls than a fresh copy), and empty `outside`."""
    dirs = {os.path.dirname(rel) for rel in pristine} - {""}
    dirs |= {os.path.dirname(d) for d in dirs} - {""}
    for dirpath, dirnames, filenames in os.walk(work, topdown=False):
        for name in filenames + dirnames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, work)
            st_ = os.lstat(full)
            if stat.S_ISDIR(st_.st_mode):
                if rel not in dirs:
                    os.rmdir(full)   # bottom-up: its contents are gone already
                continue
            if rel in pristine and stat.S_ISREG(st_.st_mode) and st_.st_nlink == 1 \
                    and st_.st_size == len(pristine[rel]):
                with open(full, "rb") as f:
                    if f.read() == pristine[rel]:
                        continue
            os.unlink(full)
    for rel, raw in pristine.items():
        if not os.path.lexists(work / rel):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(raw)
    outside.mkdir(exist_ok=True)
    for entry in os.scandir(outside):
        os.unlink(entry.path)


# ---------------------------------------------------------------------- mutations
def _pick(data, d: Path, label: str) -> str:
    return data.draw(st.sampled_from(files_of(d)), label=label)


def flip(data, d, outside):
    rel = _pick(data, d, "flip")
    raw = bytearray((d / rel).read_bytes())
    if not raw:
        return rel, None
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    (d / rel).write_bytes(bytes(raw))
    return rel, rel


def truncate(data, d, outside):
    rel = _pick(data, d, "truncate")
    size = (d / rel).stat().st_size
    if size == 0:
        return rel, None
    os.truncate(d / rel, data.draw(st.integers(0, size - 1)))
    return rel, rel


def append(data, d, outside):
    rel = _pick(data, d, "append")
    with open(d / rel, "ab") as f:
        f.write(data.draw(st.binary(min_size=1, max_size=16)))
    return rel, rel


def remove(data, d, outside):
    rel = _pick(data, d, "remove")
    (d / rel).unlink()
    return rel, rel


def rename(data, d, outside):
    rel = _pick(data, d, "rename")
    new = os.fsdecode(data.draw(NAMES, label="new name"))
    if new == rel:
        return rel, None
    dest = d / new
    if dest.is_dir():
        return rel, None
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(d / rel, dest)
    return rel, rel


def add_file(data, d, outside):
    new = os.fsdecode(data.draw(NAMES, label="added name"))
    dest = d / new
    if dest.is_dir():
        return new, None
    dest.parent.mkdir(parents=True, exist_ok=True)
    existed = dest.exists()
    dest.write_bytes(data.draw(st.binary(max_size=32)))
    return new, (None if existed else new)


def add_empty_dir(data, d, outside):
    new = os.fsdecode(data.draw(NAMES, label="dir name"))
    if os.path.lexists(d / new):
        return new, None
    (d / new).mkdir(parents=True)
    return new, None


def symlink(data, d, outside):
    rel = _pick(data, d, "symlink")
    kind = data.draw(st.sampled_from(["replace", "add-inside", "add-outside", "dangling", "dir"]))
    if kind == "replace":  # the listed file becomes a link to an identical copy elsewhere
        copy = fresh(outside, "copy")
        shutil.copyfile(d / rel, copy)
        (d / rel).unlink()
        os.symlink(copy, d / rel)
        return rel, rel
    name = fresh(d, f"link-{kind}")
    target = {"add-inside": d / rel, "add-outside": outside / "elsewhere",
              "dangling": outside / "absent", "dir": outside}[kind]
    if kind == "add-outside":
        target = fresh(outside, "elsewhere")
        target.write_bytes(b"outside")
    os.symlink(target, name)
    return name.name, name.name


def hard_link(data, d, outside):
    rel = _pick(data, d, "hard link")
    if data.draw(st.booleans(), label="inside"):
        os.link(d / rel, fresh(d, "hard-copy"))
    else:
        os.link(d / rel, fresh(outside, "hard-copy"))
    return rel, rel


def fifo(data, d, outside):
    pipe = fresh(d, "pipe")
    os.mkfifo(pipe)
    return pipe.name, pipe.name


def huge(data, d, outside):
    if data.draw(st.booleans(), label="replace a listed file"):
        rel = _pick(data, d, "huge")
    else:
        rel = os.fsdecode(data.draw(NAMES, label="huge name"))
        if (d / rel).is_dir():
            return rel, None
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
    with open(d / rel, "wb") as f:
        f.truncate(HUGE)
    return rel, rel


def incomplete(data, d, outside):
    if (d / "INCOMPLETE").is_dir():
        return "INCOMPLETE", None
    (d / "INCOMPLETE").write_bytes(data.draw(st.binary(max_size=20)))
    return "INCOMPLETE", "."


def _manifest(d: Path) -> dict | None:
    """The parsed manifest, or None when an earlier mutation already broke it."""
    if "manifest.json" not in files_of(d):
        return None
    try:
        m = parse_json((d / "manifest.json").read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(m, dict) and isinstance(m.get("files"), list) and m["files"] and \
        all(isinstance(e, dict) and isinstance(e.get("path"), str) for e in m["files"])
    return m if ok else None


def _text(m) -> str:
    """Canonical JSON text, or its ASCII-escaped form when a lone surrogate has no UTF-8."""
    text = dumps_json(m)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(m, indent=2, sort_keys=True) + "\n"
    return text


def _write_manifest(d: Path, m: dict) -> None:
    (d / "manifest.json").write_text(_text(m))


def manifest_entry(data, d, outside):
    """Edit one entry of a (parseable) manifest and write it back canonically."""
    m = _manifest(d)
    if m is None:
        return "manifest.json", None
    i = data.draw(st.integers(0, len(m["files"]) - 1))
    entry = m["files"][i]
    edit = data.draw(st.sampled_from(["dotdot", "absolute", "surrogate", "nul", "backslash",
                                      "dot", "dup", "drop", "size", "sha", "upper", "key",
                                      "type", "self"]))
    if edit == "dotdot":
        entry["path"] = "../" + entry["path"]
    elif edit == "absolute":
        entry["path"] = "/" + entry["path"]
    elif edit == "surrogate":
        entry["path"] = entry["path"] + "\ud800"
    elif edit == "nul":
        entry["path"] = entry["path"] + "\x00"
    elif edit == "backslash":
        entry["path"] = entry["path"].replace("/", "\\") + "\\x"
    elif edit == "dot":
        entry["path"] = "./" + entry["path"]
    elif edit == "dup":
        m["files"].insert(i, dict(entry))
    elif edit == "drop":
        del m["files"][i]
    elif edit == "size":
        # no inf: the canonical writer (allow_nan=False) has no text for it, so it cannot be planted
        entry["size"] = data.draw(st.one_of(st.integers(-5, 1 << 40),
                                            st.floats(allow_nan=False, allow_infinity=False),
                                            st.text(max_size=3), st.none(), st.booleans())
                                  .filter(lambda v: v != entry["size"] or type(v) is not int))
    elif edit == "sha":
        entry["sha256"] = data.draw(st.text("0123456789abcdefABCDEF", min_size=0, max_size=66)
                                    .filter(lambda v: v != entry["sha256"]))
    elif edit == "upper":
        entry["sha256"] = entry["sha256"].upper() if any(c.isalpha() for c in entry["sha256"]) \
            else "A" + entry["sha256"][1:]
    elif edit == "key":
        entry["extra"] = 1
    elif edit == "type":
        m["files"][i] = data.draw(st.sampled_from([None, [], "x", 1, {"path": entry["path"]}]))
    elif edit == "self":
        m["files"].append({"path": "manifest.json", "size": 1, "sha256": "0" * 64})
    _write_manifest(d, m)
    return "manifest.json", "manifest.json"


def manifest_text(data, d, outside):
    """Corrupt manifest.json as text: duplicate keys, non-canonical, garbage, wrong top level."""
    m = _manifest(d)
    if m is None:
        return "manifest.json", None
    text = (d / "manifest.json").read_text()
    edit = data.draw(st.sampled_from(["dup-key", "compact", "garbage", "not-utf8", "top",
                                      "schema", "version", "files", "drop-key", "extra-key",
                                      "nan", "created", "empty"]))
    if edit == "dup-key":
        key = data.draw(st.sampled_from(['"version": 1', '"schema": "dflash-qualify.manifest"']))
        new = text.replace(key, f"{key}, {key}", 1)
    elif edit == "compact":
        new = json.dumps(m)
    elif edit == "garbage":
        new = text[: data.draw(st.integers(0, len(text) - 1))] + "}{"
    elif edit == "not-utf8":
        (d / "manifest.json").write_bytes(b"\xff\xfe" + text.encode())
        return "manifest.json", "manifest.json"
    elif edit == "top":
        new = json.dumps(data.draw(st.sampled_from([[], "x", 1, None, [m]])))
    elif edit == "schema":
        new = _text({**m, "schema": "something-else"})
    elif edit == "version":
        new = _text({**m, "version": data.draw(st.sampled_from([0, 2, "1", True, 1.5]))})
    elif edit == "files":
        new = _text({**m, "files": data.draw(st.sampled_from([None, {}, "x", 3]))})
    elif edit == "drop-key":
        key = data.draw(st.sampled_from(["created_utc", "tool_version"]))
        new = _text({k: v for k, v in m.items() if k != key})
    elif edit == "extra-key":
        new = _text({**m, "signed_by": "me"})
    elif edit == "nan":
        new = text.replace('"version": 1', '"version": NaN', 1)
    elif edit == "created":
        new = _text({**m, "created_utc": data.draw(st.sampled_from(
            ["yesterday", "", None, 5, "2026-11-29 11:45:00"]))})
    else:
        new = ""
    (d / "manifest.json").write_text(new)
    return "manifest.json", "manifest.json"


def forge(data, d, outside):
    """Edit what a verdict rests on and rehash the manifest to match: recomputation catches it."""
    try:
        return _forge(data, d)
    except (OSError, ValueError, KeyError, TypeError, IndexError, StopIteration, AttributeError):
        return "stats.json", None   # an earlier mutation broke the file this one edits


def _forge(data, d):
    what = data.draw(st.sampled_from(["stats", "sample", "response", "csv"]))
    if not {"stats.json", "samples.jsonl", "samples.csv"} <= set(files_of(d)):
        return "stats.json", None   # an earlier mutation removed, linked or inflated them
    if what == "stats":
        rel = "stats.json"
        stats = json.loads((d / rel).read_text())
        comp = stats["comparisons"][0]
        key = data.draw(st.sampled_from(["gain_pct", "drift_pct"]))
        comp[key] = (comp[key] or 0) + data.draw(st.sampled_from([0.5, -3.0, 10.0]))
        (d / rel).write_text(dumps_json(stats))
    elif what == "sample":
        rel = "samples.jsonl"
        lines = (d / rel).read_text().splitlines()
        i = data.draw(st.integers(0, len(lines) - 1))
        rec = json.loads(lines[i])
        key = data.draw(st.sampled_from(["value", "response_sha256", "arm", "phase", "ok"]))
        rec[key] = {"value": rec["value"] * 1.5, "response_sha256": "0" * 64, "arm": "cand"
                    if rec["arm"] != "cand" else "A",
                    "phase": "warmup" if rec["phase"] == "measured" else "measured",
                    "ok": False}[key]
        lines[i] = json.dumps(rec, sort_keys=True)
        (d / rel).write_text("\n".join(lines) + "\n")
    elif what == "csv":
        rel = "samples.csv"
        (d / rel).write_text((d / rel).read_text().replace(",measured,", ",warmup,", 1))
    else:
        rel = next(f for f in files_of(d) if f.startswith("responses/"))
        (d / rel).write_bytes((d / rel).read_bytes() + b"!")
    m = _manifest(d)
    if m is None or rel not in files_of(d):
        return rel, None
    raw = (d / rel).read_bytes()
    for e in m["files"]:
        if e["path"] == rel:
            e.update(size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    _write_manifest(d, m)
    return rel, None


MUTATIONS = [flip, truncate, append, remove, rename, add_file, add_empty_dir, symlink,
             hard_link, fifo, huge, incomplete, manifest_entry, manifest_text, forge]


# ---------------------------------------------------------------------- the property
def test_hostile_evidence_is_always_rejected(template, tmp_path, capsys):
    work, outside = tmp_path / "case", tmp_path / "outside"
    original_id = hashlib.sha256((template / "manifest.json").read_bytes()).hexdigest()
    original = fingerprint(template)
    pristine = {rel: (template / rel).read_bytes() for rel in files_of(template)}
    tally = {"changed": 0, "rejected": 0, "new_id_only": 0, "unchanged": 0}
    kinds: dict[str, int] = {}

    @settings(max_examples=CASES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def case(data):
        restore(work, outside, pristine)
        chosen = data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3),
                           label="mutations")
        named = []
        for mutate in chosen:
            _, must_name = mutate(data, work, outside)
            named.append(must_name)
        if fingerprint(work) == original:
            tally["unchanged"] += 1
            return
        tally["changed"] += 1
        for m in chosen:
            kinds[m.__name__] = kinds.get(m.__name__, 0) + 1
        result = verify(work)   # must never raise
        problems = [str(p) for p in result.problems]
        assert not any("unexpected error" in p for p in problems), problems
        assert all(p and "\n" not in p for p in problems), problems
        if result.ok:
            # only a canonical in-place edit of the manifest's own metadata passes: a new id
            changed = {k for k in set(fingerprint(work)) | set(original)
                       if fingerprint(work).get(k) != original.get(k)}
            assert changed == {b"manifest.json"}, (chosen, changed)
            assert result.manifest_sha != original_id
            tally["new_id_only"] += 1
        else:
            tally["rejected"] += 1
            # precise: names what changed (a changed manifest may name the files it lists)
            if len(chosen) == 1 and named[0] not in (None, "manifest.json"):
                where = printable(named[0])
                assert any(p.path == where or p.path.startswith(where + "/")
                           or where in p.message for p in result.problems), (where, problems)
        if tally["changed"] % 5 and not any("\\" in p for p in problems):
            return   # the CLI path for every 5th case and every escaped (non-UTF-8) name
        cli = CliRunner().invoke(main, ["verify", str(work)])
        assert cli.exception is None or isinstance(cli.exception, SystemExit), cli.output
        unsealed = not os.path.lexists(work / "manifest.json")  # not evidence: a user error
        assert cli.exit_code == (2 if unsealed else 0 if result.ok else 1), cli.output
        assert "Traceback" not in cli.output

    case()
    with capsys.disabled():
        print(f"\nhostile evidence: {tally['changed']} changed directories "
              f"({tally['rejected']} rejected by verify, {tally['new_id_only']} with only a new "
              f"evidence id), {tally['unchanged']} no-op draws; per mutation {sorted(kinds.items())}")
    assert tally["changed"] >= MIN_CASES
