"""Reporters: markdown in DESIGN.md's PR-report layout, schema-versioned JSON, CSV, registry."""
from __future__ import annotations

import csv
import io
import json

import pytest

import evidence_factory as ef
from dflash_qualify.harness import analysis
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.evidence import load_evidence
from dflash_qualify.harness.reports import FORMATS, render, render_markdown
from dflash_qualify.harness.reports.base import fmt_value
from test_stats import A, B, CAND


@pytest.fixture
def evidence(tmp_path):
    return load_evidence(ef.build(tmp_path / "ev", {"A": A, "cand": CAND, "B": B}))


def test_markdown_layout(evidence):
    md = render(evidence, "md")
    sha = evidence.samples[0]["response_sha256"]
    assert md.startswith("# factory-aba: qualified\n")
    assert "| arm | samples (every measured value) | median | MAD |" in md
    assert "| q1 reference A | 10.000, 10.200, 9.800, 10.000, 10.400 | 10.000 | 0.200 |" in md
    assert "| exact bands chunk 4 | 12.180, 12.000, 12.300, 12.180, 12.500 | 12.180 | 0.120 |" in md
    assert ("The pooled 10-sample q1 median was 10.150 tok/s. Exact bands chunk 4 reached 12.180 tok/s, "
            "a 20.00% gain. The two q1 brackets differed by 1.97%.") in md
    assert "Gain 95% CI: [" in md and "Mann-Whitney U two-sided p = " in md
    assert f"All 18 requests were cache-cold and produced the same response SHA-256: {sha}" in md
    assert "**Verdict: QUALIFIED**" in md
    assert "Reproduce: `dflash-qualify run factory-aba --out evidence`" in md
    assert "Environment: CPU Test CPU; governor performance; host testhost; OS Linux test; Python 3.11.0" in md
    assert md.endswith(f"Evidence manifest SHA-256: {evidence.manifest_sha}\n")
    # order follows the PR example: table, sentence, responses, verdict, manifest
    order = [md.index(s) for s in ("| arm |", "The pooled", "All 18", "**Verdict", "Evidence manifest")]
    assert order == sorted(order)


def test_markdown_before_sealing_points_at_manifest(evidence):
    md = render_markdown(evidence.protocol, evidence.environment, evidence.stats, evidence.samples, None)
    assert md.endswith("Evidence manifest SHA-256: see manifest.json (written when the evidence is sealed)\n")


def test_markdown_mismatch_and_reasons(tmp_path):
    other = ef.RESPONSE[:7] + b"?" + ef.RESPONSE[8:]
    ev = load_evidence(ef.build(tmp_path / "ev", responses={("cand", "measured", 1): other}))
    md = render(ev, "md")
    assert "**Verdict: NOT QUALIFIED** (`responses_differ`)" in md
    assert "Responses differ: 1 of 18 hashed requests differ" in md
    assert "request cand measured #1 (seq 8)" in md and "first differing byte at position 7" in md
    assert "| responses_identical | FAIL `responses_differ` |" in md


def test_markdown_compare_lower_time(tmp_path):
    values = {"main": {"64": [10.0, 10.2, 9.8], "128": [20.0, 20.2, 19.8]},
              "pr": {"64": [8.0, 8.1, 7.9], "128": [19.0, 19.1, 18.9]}}
    ev = load_evidence(ef.build(tmp_path / "ev", values, protocol=ef.compare_protocol()))
    md = render(ev, "md")
    assert "## 64" in md and "## 128" in md
    assert "The 3-sample main median was 10.000 ms. PR took 8.000 ms, 20.00% lower prefill time." in md
    assert "The 3-sample main median was 20.000 ms. PR took 19.000 ms, 5.00% lower prefill time." in md
    assert "same response SHA-256 per prompt:" in md
    assert md.index("- group 64, prompt p64") < md.index("- group 128, prompt p128")  # protocol order
    assert "| gain_meets_min [128] | pass | lower time 5.00% (128) reaches the minimum 1.00% |" in md
    assert "Thresholds: min lower time 1.00% (point estimate; the CI must lie above zero), " \
           "identical responses reported only." in md


def test_json_report(evidence):
    doc = json.loads(render(evidence, "json"))
    assert doc["schema"] == "dflash-qualify.report" and doc["version"] == 1
    assert doc["evidence"]["manifest_sha256"] == evidence.manifest_sha
    assert doc["qualified"] is True and doc["verdict"] == evidence.stats["verdict"]
    assert doc["stats"]["comparisons"][0]["gain_pct"] == pytest.approx(20.0)


def test_csv_report_feeds_analyze_columns(evidence):
    rows = list(csv.DictReader(io.StringIO(render(evidence, "csv"))))
    assert len(rows) == 18
    assert list(rows[0])[:4] == ["arm", "phase", "value", "response_sha256"]
    assert rows[0]["phase"] == "warmup" and rows[1]["value"] == "10.0" and rows[1]["ok"] == "true"


def test_registry_and_unknown_format(evidence):
    assert sorted(FORMATS) == ["csv", "html", "json", "md"]
    with pytest.raises(UsageError, match=r"--format: unknown report format \(expected md \| json \| csv \| html, got 'pdf'\)"):
        render(evidence, "pdf")


@pytest.mark.parametrize("x, d, text", [
    (16.695, 3, "16.695"), (16.6965, 3, "16.6965"), (10.0, 3, "10.000"), (1 / 3, 3, "0.333"), (None, 3, "n/a"),
])
def test_fmt_value(x, d, text):
    assert fmt_value(x, d) == text


def test_reports_are_pure_text(evidence):
    for fmt in FORMATS:
        assert isinstance(render(evidence, fmt), str)
    assert analysis.STATS_VERSION == evidence.stats["version"]


def test_report_cli_formats_and_refuses_tampered_evidence(tmp_path):
    from click.testing import CliRunner

    from dflash_qualify.harness.cli import main
    d = ef.build(tmp_path / "ev")
    runner = CliRunner()
    md = runner.invoke(main, ["report", str(d)])
    assert md.exit_code == 0 and md.output.startswith("# factory-aba: qualified\n")
    js = runner.invoke(main, ["report", str(d), "--format", "json"])
    assert js.exit_code == 0 and json.loads(js.output)["qualified"] is True
    (d / "report.md").write_text("forged")
    bad = runner.invoke(main, ["report", str(d)])
    assert bad.exit_code == 1
    assert bad.output.startswith(f"error: {d} failed verification: report.md: modified: size 6 bytes")
