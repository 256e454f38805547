"""A fifth evidence kind registered from a test runs, verifies and reports through the same
commands as the built-in ones, touching no other module (acceptance 4 of issue 21)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness import kinds
from dflash_qualify.harness.checker import Checker
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.evidence import first_difference, read_json, read_jsonl
from dflash_qualify.harness.protocol import LoadedProtocol, parse_env

TALLY = """schema_version = 1
kind = "tally"
name = "tally-demo"
counts = [3, 4, 5]
[[arms]]
id = "only"
role = "candidate"
env = { SOMETHING = "1" }
"""


def _schema(document, **overrides) -> LoadedProtocol:
    ck = Checker(document.display)
    doc = document.doc
    ck.table(doc, "", {"schema_version", "kind", "name", "counts", "arms"},
             {"schema_version", "kind", "name", "counts", "arms"})
    counts = [ck.integer(c, f"counts[{i}]", lo=0) for i, c in enumerate(doc["counts"])]
    arms = [{"id": a["id"], "role": a["role"], "env": parse_env(ck, a.get("env", {}), "arms.env")}
            for a in doc["arms"]]
    resolved = {"schema_version": 1, "kind": "tally", "name": doc["name"], "counts": counts,
                "arms": arms, "source": document.source(), "overrides": dict(overrides)}
    return LoadedProtocol(resolved=resolved, source_bytes=document.raw, path=str(document.path))


def _run(session) -> dict:
    for i, c in enumerate(session.protocol["counts"]):
        session.writer.append_jsonl("counts.jsonl", {"i": i, "count": c})
    return {"only": {"start_s": 0.0}}


def _totals(protocol: dict, counts: list[dict]) -> dict:
    return {"total": sum(r["count"] for r in counts), "n": len(counts),
            "expected": sum(protocol["counts"])}


def _analyze(session) -> dict:
    results = _totals(session.stored, read_jsonl(session.writer.path, "counts.jsonl"))
    session.writer.write_json("tally.json", results)
    return results


def _recompute(root: Path, result) -> None:
    fresh = _totals(read_json(root, "protocol.json"), read_jsonl(root, "counts.jsonl"))
    diff = first_difference(read_json(root, "tally.json"), fresh, "")
    if diff:
        result.add("tally.json", f"does not match counts.jsonl: {diff}")


TALLY_KIND = kinds.Kind(
    name="tally", what="tally", command="run", schema=_schema, run=_run, analyze=_analyze,
    render=lambda session, r: f"# tally\n\ntotal {r['total']} of {r['n']} counts\n",
    qualified=lambda r: r["total"] == r["expected"],
    required=("protocol.json", "environment.json", "counts.jsonl", "tally.json"),
    recompute=_recompute,
    pages={"md": lambda root, sha: (root / "report.md").read_text() + f"\nEvidence {sha}\n",
           "json": lambda root, sha: json.dumps({"sha": sha, **read_json(root, "tally.json")}) + "\n"})


@pytest.fixture
def tally():
    kinds.register(TALLY_KIND)
    yield TALLY_KIND
    kinds.unregister("tally")


def test_fifth_kind_runs_verifies_and_reports(tmp_path, tally):
    path = tmp_path / "tally.toml"
    path.write_text(TALLY)
    out = tmp_path / "ev"
    r = CliRunner().invoke(main, ["run", str(path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "total 12 of 3 counts" in r.output
    (d,) = list(out.iterdir())
    assert sorted(p.name for p in d.iterdir()) == [
        "counts.jsonl", "environment.json", "manifest.json", "protocol.json", "protocol.toml",
        "report.md", "tally.json"]
    v = CliRunner().invoke(main, ["verify", str(d)])
    assert v.exit_code == 0 and v.output.startswith("OK "), v.output
    rep = CliRunner().invoke(main, ["report", str(d), "--format", "json"])
    assert rep.exit_code == 0, rep.output
    assert json.loads(rep.output)["total"] == 12
    bad = CliRunner().invoke(main, ["report", str(d), "--format", "csv"])
    assert bad.exit_code == 2 and "tally evidence renders as md or json" in bad.output
    # an edited result no longer verifies
    (d / "tally.json").write_text('{"expected": 12, "n": 3, "total": 13}\n')
    assert CliRunner().invoke(main, ["verify", str(d)]).exit_code == 1


def test_registry_rejects_a_second_kind_of_the_same_name(tally):
    with pytest.raises(ValueError, match="already registered"):
        kinds.register(TALLY_KIND)


def test_builtin_kinds():
    assert list(kinds.KINDS) == ["bracket", "compare", "calibration", "exactness"]
    assert kinds.for_evidence({"kind": "bracket", "calibration": {}}).name == "calibration"
    assert kinds.for_evidence({"kind": "exactness"}).name == "exactness"
