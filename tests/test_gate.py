"""`dflash-qualify gate`: exit codes, threshold overrides, JUnit XML and the GitHub step summary."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from click.testing import CliRunner

import evidence_factory as ef
from dflash_qualify.harness import gate
from dflash_qualify.harness.cli import main


def invoke(*args, env=None):
    return CliRunner().invoke(main, ["gate", *map(str, args)], env=env)


def test_qualified_exits_0(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    d = ef.build(tmp_path / "ev")
    r = invoke(d)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("factory-aba: QUALIFIED\n")
    assert "Evidence manifest SHA-256: " in r.output


def test_not_qualified_exits_1_with_reasons(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    d = ef.build(tmp_path / "ev", responses={("B", "warmup", 0): b"other bytes"})
    r = invoke(d)
    assert r.exit_code == 1
    assert r.output.startswith("factory-aba: NOT QUALIFIED (responses_differ)\n")
    assert "request B warmup #0 (seq 12)" in r.output and "first differing byte at position 0" in r.output


def test_overrides_change_the_verdict(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    d = ef.build(tmp_path / "ev")  # gain 20 %, drift 0 %
    r = invoke(d, "--min-gain", "30")
    assert r.exit_code == 1 and "gain_below_min: gain 20.00% is below the minimum 30.00%" in r.output
    assert invoke(d, "--min-gain", "5", "--max-drift", "0.5").exit_code == 0
    bad = invoke(d, "--min-gain", "nan")
    assert bad.exit_code == 2 and "--min-gain: not a finite number" in bad.output


def test_invalid_evidence_exits_1(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    d = ef.build(tmp_path / "ev")
    (d / "samples.csv").write_text("forged\n")
    junit = tmp_path / "junit.xml"
    r = invoke(d, "--junit", junit)
    assert r.exit_code == 1
    assert "invalid: samples.csv: modified: size 7 bytes" in r.output
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case.get("name") == "evidence_valid"
    assert case.find("failure").get("type") == "evidence_invalid"
    assert "evidence invalid" in summary.read_text()


def test_unsealed_evidence_exits_1(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    r = invoke(ef.build(tmp_path / "ev", seal=False))
    assert r.exit_code == 1 and "incomplete: running" in r.output


def test_junit_one_testcase_per_condition(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    d = ef.build(tmp_path / "ev")
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    assert invoke(d, "--min-gain", "30", "--junit", junit).exit_code == 1
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1 and suites[0].get("name") == "dflash-qualify gate: factory-aba"
    cases = {c.get("name"): c for c in suites[0].findall("testcase")}
    assert list(cases) == ["responses_identical", "requests_ok", "cache_cold", "ci_excludes_zero",
                           "gain_meets_min", "drift_below_max", "drift_below_half_gain"]
    assert suites[0].get("tests") == "7" and suites[0].get("failures") == "1"
    failure = cases["gain_meets_min"].find("failure")
    assert failure.get("type") == "gain_below_min"
    assert failure.get("message") == "gain 20.00% is below the minimum 30.00%"
    assert all(cases[n].find("failure") is None for n in cases if n != "gain_meets_min")


def test_step_summary_appends_report(tmp_path, monkeypatch):
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    d = ef.build(tmp_path / "ev")
    r = invoke(d, "--min-gain", "30")
    assert r.exit_code == 1
    text = summary.read_text()
    assert text.startswith("earlier step\n# factory-aba: not qualified\n")
    assert "**Verdict: NOT QUALIFIED** (`gain_below_min`)" in text
    assert "Thresholds: min gain 30.00%" in text  # the overridden threshold, not the stored one
    assert "Evidence manifest SHA-256: " in text


def test_decide_is_pure():
    stats = {"gate": dict(ef.GATE), "kind": "bracket", "verdict": None,
             "responses": {"identical": True, "hashed": 1, "mismatches": 0, "first_mismatch": None},
             "requests": {"failed": 0, "total": 1, "cache_recorded": 0, "cache_hit_requests": 0},
             "comparisons": []}
    out = gate.decide(stats, min_gain_pct=3)
    assert out["gate"]["min_gain_pct"] == 3.0 and stats["gate"]["min_gain_pct"] == 1.0
    assert out["verdict"]["qualified"] is True
