"""`dflash-qualify analyze`: reproduces the hand-computed fixtures of test_stats.py from a CSV."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dflash_qualify.harness.cli import main
from test_stats import A, B, CAND

SHA = "ab" * 32


def write_csv(path, rows, header="arm,phase,value,response_sha256"):
    path.write_text(header + "\n" + "".join(r + "\n" for r in rows))
    return path


def fixture_csv(tmp_path):
    rows = [f"A,warmup,9.0,{SHA}"]
    for arm, values in (("A", A), ("cand", CAND), ("B", B)):
        rows += [f"{arm},measured,{v},{SHA}" for v in values]
    return write_csv(tmp_path / "bench.csv", rows)


def invoke(*args):
    return CliRunner().invoke(main, ["analyze", *map(str, args)])


def test_markdown_reproduces_fixture(tmp_path):
    r = invoke(fixture_csv(tmp_path), "--reference", "A", "--reference", "B", "--candidate", "cand")
    assert r.exit_code == 0, r.output
    # inputs have up to 2 decimals (12.18), so every value is shown with 2
    assert "| A | 10.00, 10.20, 9.80, 10.00, 10.40 | 10.00 | 0.20 |" in r.output
    assert "| cand | 12.18, 12.00, 12.30, 12.18, 12.50 | 12.18 | 0.12 |" in r.output
    assert "| B | 10.10, 10.30, 10.10, 10.50, 10.20 | 10.20 | 0.10 |" in r.output
    assert ("The pooled 10-sample reference median was 10.15. Cand reached 12.18, a 20.00% gain. "
            "The two reference brackets differed by 1.97%.") in r.output
    assert f"All 16 requests produced the same response SHA-256: {SHA}" in r.output
    assert "Evidence manifest" not in r.output
    assert "Reproduce: `dflash-qualify analyze" in r.output


def test_json_reproduces_fixture(tmp_path):
    r = invoke(fixture_csv(tmp_path), "--reference", "A", "--reference", "B", "--candidate", "cand",
               "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    comp = doc["stats"]["comparisons"][0]
    assert comp["pooled_reference"]["median"] == pytest.approx(10.15)
    assert comp["gain_pct"] == pytest.approx(20.0)
    assert comp["drift_pct"] == pytest.approx(0.2 / 10.15 * 100)
    assert [a["mad"] for a in doc["stats"]["arms"]] == pytest.approx([0.2, 0.12, 0.1])
    assert doc["qualified"] is True


def test_precision_follows_inputs(tmp_path):
    # odd count with 3 decimals: median 16.695; even count: (16.695 + 16.698) / 2 = 16.6965 shown exactly
    csv = write_csv(tmp_path / "p.csv", ["A,measured,16.695", "A,measured,16.690", "A,measured,16.701",
                                         "c,measured,16.695", "c,measured,16.698"], header="arm,phase,value")
    r = invoke(csv, "--reference", "A", "--candidate", "c")
    assert r.exit_code == 0, r.output
    assert "| A | 16.695, 16.690, 16.701 | 16.695 | 0.005 |" in r.output
    assert "| c | 16.695, 16.698 | 16.6965 | 0.0015 |" in r.output
    assert "Bracket drift: n/a (needs two reference arms (A and B))." in r.output


def test_lower_is_better(tmp_path):
    # ms: ref 10, 10.2, 9.8 -> median 10; cand 8, 8.1, 7.9 -> 8; (1 - 8 / 10) * 100 = 20 % lower time
    csv = write_csv(tmp_path / "ms.csv", ["main,measured,10.0", "main,measured,10.2", "main,measured,9.8",
                                          "pr,measured,8.0", "pr,measured,8.1", "pr,measured,7.9"],
                    header="arm,phase,value")
    r = invoke(csv, "--reference", "main", "--candidate", "pr", "--direction", "lower")
    assert r.exit_code == 0, r.output
    assert "The 3-sample main median was 10.0. Pr took 8.0, 20.00% lower time." in r.output


@pytest.mark.parametrize("rows, header, args, message", [
    (["A,measured,abc"], "arm,phase,value", (),
     "line 2, column value: bad value (expected a finite number > 0, got 'abc')"),
    (["A,measured,1", "A,later,1"], "arm,phase,value", (),
     "line 3, column phase: bad phase (expected 'warmup' or 'measured', got 'later')"),
    (["A,measured,-1"], "arm,phase,value", (), "expected a finite number > 0, got '-1'"),
    (["A,1"], "arm,value", (), "line 1 (header): missing column (expected columns arm,phase,value"),
    (["A,measured,1,zz"], "arm,phase,value,response_sha256", (),
     "line 2, column response_sha256: bad response hash (expected 64 hex digits or empty, got 'zz')"),
    (["A,measured,1", "c,measured,2"], "arm,phase,value", ("--reference", "X"),
     "--reference: unknown arm (expected an arm in the CSV (A, c), got 'X')"),
])
def test_bad_csv_is_one_line_usage_error(tmp_path, rows, header, args, message):
    csv = write_csv(tmp_path / "bad.csv", rows, header=header)
    base = ["--reference", "A", "--candidate", "c"] if not args else [*args, "--candidate", "c"]
    r = invoke(csv, *base)
    assert r.exit_code == 2
    assert r.output.startswith("error: ") and r.output.count("\n") == 1
    assert message in r.output and f"error: {csv}: " in r.output
    assert "Traceback" not in r.output


def test_a_fixed_n_csv_gets_a_fixed_n_verdict_and_says_so(tmp_path):
    r = invoke(fixture_csv(tmp_path), "--reference", "A", "--reference", "B", "--candidate", "cand")
    assert r.exit_code == 0, r.output
    assert "Design: fixed-N (one look at the protocol's N; no sequential stopping)." in r.output
    assert "## Sequential looks" not in r.output
