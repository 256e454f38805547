"""harness.evidence: atomic writer, naming, sealing, and the strict loader."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

import pytest

import evidence_factory as ef
from dflash_qualify.harness.errors import EvidenceInvalid, UsageError
from dflash_qualify.harness.evidence import EvidenceWriter, load_evidence, manifest_sha256

NOW = datetime(2026, 11, 29, 11, 45, 0, tzinfo=timezone.utc)


def test_create_names_partial_and_marks_running(tmp_path):
    w = EvidenceWriter.create(tmp_path / "root", "demo", now=NOW)
    assert w.path == tmp_path / "root" / "20261129T114500Z-demo.partial"
    assert w.final_path == tmp_path / "root" / "20261129T114500Z-demo"
    assert (w.path / "INCOMPLETE").read_text() == "running"


def test_create_never_reuses_an_existing_name(tmp_path):
    (tmp_path / "20261129T114500Z-demo").mkdir()
    w2 = EvidenceWriter.create(tmp_path, "demo", now=NOW)
    w3 = EvidenceWriter.create(tmp_path, "demo", now=NOW)  # -2 is taken by w2's .partial
    assert w2.final_path.name == "20261129T114500Z-demo-2"
    assert w3.final_path.name == "20261129T114500Z-demo-3"


def test_create_rejects_bad_name(tmp_path):
    with pytest.raises(UsageError, match="name"):
        EvidenceWriter.create(tmp_path, "../escape", now=NOW)


def test_write_formats_and_path_validation(tmp_path):
    w = EvidenceWriter.create(tmp_path, "demo", now=NOW)
    w.write_json("a/b.json", {"z": 1, "a": "é"})
    assert (w.path / "a/b.json").read_text(encoding="utf-8") == '{\n  "a": "é",\n  "z": 1\n}\n'
    w.append_jsonl("s.jsonl", {"b": 2, "a": 1})
    w.append_jsonl("s.jsonl", {"c": 3})
    assert (w.path / "s.jsonl").read_text() == '{"a": 1, "b": 2}\n{"c": 3}\n'
    for bad in ("../x", "/abs", "a/../b", "a\\b", "./a", "manifest.json", "INCOMPLETE", ""):
        with pytest.raises(ValueError):
            w.write_text(bad, "x")
    assert not list(w.path.glob("**/.*tmp*"))  # no temp files left behind


def test_store_response_once(tmp_path):
    w = EvidenceWriter.create(tmp_path, "demo", now=NOW)
    sha = w.store_response(b"abc")
    assert sha == hashlib.sha256(b"abc").hexdigest()
    assert w.store_response(b"abc") == sha
    assert [p.name for p in (w.path / "responses").iterdir()] == [f"{sha}.bin"]


def test_seal_writes_manifest_last_and_renames(tmp_path):
    w = EvidenceWriter.create(tmp_path, "demo", now=NOW)
    w.write_text("b.txt", "bee")
    w.write_text("a/c.txt", "sea")
    final, sha = w.seal()
    assert final == tmp_path / "20261129T114500Z-demo" and not (tmp_path / "20261129T114500Z-demo.partial").exists()
    assert not (final / "INCOMPLETE").exists()
    manifest = json.loads((final / "manifest.json").read_text())
    assert manifest["schema"] == "dflash-qualify.manifest" and manifest["version"] == 1
    assert manifest["files"] == [
        {"path": "a/c.txt", "size": 3, "sha256": hashlib.sha256(b"sea").hexdigest()},
        {"path": "b.txt", "size": 3, "sha256": hashlib.sha256(b"bee").hexdigest()}]
    assert sha == manifest_sha256(final) == hashlib.sha256((final / "manifest.json").read_bytes()).hexdigest()
    with pytest.raises(RuntimeError, match="sealed"):
        w.write_text("late.txt", "x")


def test_seal_never_overwrites_a_name_taken_meanwhile(tmp_path):
    w = EvidenceWriter.create(tmp_path, "demo", now=NOW)
    w.final_path.mkdir()  # someone else took it
    final, _ = w.seal()
    assert final.name == "20261129T114500Z-demo-2"


def test_mark_incomplete_is_never_sealed(tmp_path):
    w = EvidenceWriter.create(tmp_path, "demo", now=NOW)
    w.mark_incomplete("interrupted: SIGINT")
    assert (w.path / "INCOMPLETE").read_text() == "interrupted: SIGINT"
    with pytest.raises(RuntimeError, match="incomplete"):
        w.seal()
    assert w.path.name.endswith(".partial")


def test_load_evidence_roundtrip(tmp_path):
    d = ef.build(tmp_path / "ev")
    ev = load_evidence(d)
    assert ev.protocol["name"] == "factory-aba" and len(ev.samples) == 18
    assert ev.stats["verdict"]["qualified"] is True
    assert ev.manifest_sha == manifest_sha256(d)
    assert ev.response_bytes(ev.samples[0]["response_sha256"]) == ef.RESPONSE
    with pytest.raises(KeyError):
        ev.response_bytes("../../etc/passwd")


def test_load_evidence_errors(tmp_path):
    with pytest.raises(UsageError, match="expected a directory, got 'missing'"):
        load_evidence(tmp_path / "nope")
    partial = ef.build(tmp_path / "ev", seal=False)
    with pytest.raises(EvidenceInvalid, match="incomplete: running"):
        load_evidence(partial)
    d = ef.build(tmp_path / "ev2")
    (d / "stats.json").write_text('{"a": 1, "a": 2}')
    with pytest.raises(EvidenceInvalid, match=r"stats.json: not valid JSON \(duplicate key 'a'\)"):
        load_evidence(d)
