"""Bracket schedules (ABA, ABBA, randomized, interleaved): planning, protocol syntax, stats
version 2 (block drift, Wilcoxon), and ABBA / randomized / interleaved runs on ds4-tiny that
seal and verify (issue 8, acceptance 3)."""
from __future__ import annotations

from evidence_factory import fixed_n_text

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_qualify.harness import analysis, protocol
from dflash_qualify.harness import bracket_order as schedule
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.evidence import dumps_json, load_evidence, read_jsonl, sha256_file
from dflash_qualify.harness.verify import verify

EXE = str(Path(sys.executable).parent / "dflash-qualify")
LIMIT_S = 300  # only stops a hung test; nothing is timed


def quick_with(tmp_path: Path, schedule_line: str) -> Path:
    """exact-bands-quick with its schedule line (interleaved) replaced by `schedule_line`."""
    text = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text())
    assert text.count('\nschedule = "interleaved"\n') == 1
    text = text.replace('\nschedule = "interleaved"\n', f"\n{schedule_line}\n")
    path = tmp_path / "quick.toml"
    path.write_text(text)
    return path


def arms(measured: int = 4) -> dict:
    return {"arms": [{"id": "A", "role": "reference", "warmups": 1, "measured": measured},
                     {"id": "cand", "role": "candidate", "warmups": 1, "measured": measured},
                     {"id": "B", "role": "reference", "warmups": 1, "measured": measured}],
            "schedule": ["A", "cand", "B"]}


# ---------------------------------------------------------------------------- planning

def test_aba_is_one_visit_per_arm_in_order():
    v = schedule.visits({**arms(5), "schedule_plan": {"kind": "ABA", "seed": None, "rounds": 1}})
    assert [(x.block, x.arm, x.measured, x.warmups) for x in v] == \
        [(0, "A", 5, 1), (1, "cand", 5, 1), (2, "B", 5, 1)]


def test_abba_mirrors_the_order_and_splits_measured():
    v = schedule.visits({**arms(5), "schedule_plan": {"kind": "ABBA", "seed": None, "rounds": 2}})
    assert [x.arm for x in v] == ["A", "cand", "B", "B", "cand", "A"]
    assert [x.measured for x in v] == [3, 3, 3, 2, 2, 2]
    assert [x.block for x in v] == list(range(6))


def test_randomized_is_seeded_complete_blocks():
    plan = {"kind": "randomized", "seed": 7, "rounds": 3}
    v = schedule.visits({**arms(6), "schedule_plan": plan})
    assert v == schedule.visits({**arms(6), "schedule_plan": dict(plan)})  # reproducible
    for r in range(3):  # every round visits every arm once
        assert sorted(x.arm for x in v if x.visit == r) == ["A", "B", "cand"]
    orders = {tuple(x.arm for x in schedule.visits({**arms(6), "schedule_plan": {**plan, "seed": s}}))
              for s in range(10)}
    assert len(orders) > 1  # the seed matters


def test_too_few_measured_for_the_visits():
    proto = {**arms(1), "schedule_plan": {"kind": "ABBA", "seed": None, "rounds": 2}}
    assert "visits it 2 times" in schedule.check(proto)


# ---------------------------------------------------------------------------- protocol syntax

@pytest.mark.parametrize("line, plan", [
    ('schedule = "ABBA"', {"kind": "ABBA", "seed": None, "rounds": 2}),
    ('schedule = "randomized"', {"kind": "randomized", "seed": 0, "rounds": 2}),
    ('schedule = { kind = "randomized", seed = 9, rounds = 3 }',
     {"kind": "randomized", "seed": 9, "rounds": 3}),
    ('schedule = "interleaved"', {"kind": "interleaved", "seed": None, "rounds": 1}),
    ('schedule = ["B", "cand", "A"]', {"kind": "ABA", "seed": None, "rounds": 1}),
])
def test_schedule_forms(tmp_path, line, plan):
    r = protocol.load(str(quick_with(tmp_path, line))).resolved
    assert r["schedule_plan"] == plan
    assert sorted(r["schedule"]) == ["A", "B", "cand"]


def test_default_schedule_is_aba():
    r = protocol.load("serve-llamacpp-aba").resolved  # a bracket without a schedule line
    assert r["schedule_plan"] == {"kind": "ABA", "seed": None, "rounds": 1}
    assert r["schedule"] == ["A", "cand", "B"]


@pytest.mark.parametrize("line, message", [
    ('schedule = "ABC"', 'schedule.kind: expected one of "ABA", "ABBA", "randomized", "interleaved"'),
    ('schedule = { kind = "ABBA", seed = 1 }', 'schedule.seed: expected no seed'),
    ('schedule = { kind = "randomized", rounds = 0 }', "schedule.rounds: expected an integer from 1"),
    ('schedule = { kind = "ABA", order = ["A", "cand"] }', "schedule.order: expected every arm id"),
    ('schedule = 3', "schedule: expected an array of arm ids, a schedule name or a table"),
])
def test_schedule_errors(tmp_path, line, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        protocol.load(str(quick_with(tmp_path, line)))


def test_measured_override_below_rounds_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="visits it 3 times"):
        protocol.load(str(quick_with(tmp_path, 'schedule = { kind = "randomized", rounds = 3 }')),
                      measured=2)


# ---------------------------------------------------------------------------- stats version 2

def _bracket(plan: dict) -> dict:
    return {"kind": "bracket", "metric": "prefill_tok_s", "direction": "higher",
            "arms": [{"id": "A", "role": "reference"}, {"id": "cand", "role": "candidate"},
                     {"id": "B", "role": "reference"}],
            "schedule": ["A", "cand", "B"], "schedule_plan": plan, "groups": [],
            "gate": {"min_gain_pct": 1.0, "max_drift_pct": 2.0, "require_identical": True,
                     "confidence": 0.95, "bootstrap_resamples": 500, "seed": 0}}


def _records(rows: list[tuple[str, int, float]]) -> list[dict]:
    sha = hashlib.sha256(b"x").hexdigest()
    return [{"seq": i, "arm": arm, "phase": "measured", "index": i, "group": None, "block": block,
             "value": value, "response_sha256": sha, "cache_hits": 0, "ok": True}
            for i, (arm, block, value) in enumerate(rows)]


def test_abba_drift_compares_first_and_last_reference_block():
    rows = [("A", 0, 10.0), ("A", 0, 10.0), ("cand", 1, 12.0), ("B", 2, 10.5), ("B", 3, 10.5),
            ("cand", 4, 12.0), ("A", 5, 11.0), ("A", 5, 11.0)]
    out = analysis.compute(_bracket({"kind": "ABBA", "seed": None, "rounds": 2}), _records(rows),
                           lambda sha: b"x")
    comp = out["comparisons"][0]
    assert out["version"] == 3 and out["verdict"]["design"] == "fixed-N"
    assert comp["drift_blocks"] == [0, 5] and comp["drift_arms"] == ["A", "A"]
    assert comp["drift_pct"] == pytest.approx(1.0 / 10.5 * 100)   # |10 - 11| / pooled 10.5
    assert [(b["block"], b["arm"]) for b in comp["blocks"]] == \
        [(0, "A"), (1, "cand"), (2, "B"), (3, "B"), (4, "cand"), (5, "A")]
    assert comp["blocks"][0]["delta_pct"] == pytest.approx((10.0 / 10.5 - 1) * 100)
    assert comp["paired_test"]["p_value"] is None  # sequential: nothing to pair


def test_aba_with_blocks_matches_version_1_drift():
    rows = [("A", 0, 10.0), ("A", 0, 10.2), ("cand", 1, 12.0), ("cand", 1, 12.1),
            ("B", 2, 10.4), ("B", 2, 10.1)]
    p = _bracket({"kind": "ABA", "seed": None, "rounds": 1})
    v2 = analysis.compute(p, _records(rows), lambda sha: b"x")
    v1 = analysis.compute(p, _records(rows), lambda sha: b"x", version=1)
    assert v1["version"] == 1 and "blocks" not in v1["comparisons"][0]
    for key in ("drift_pct", "gain_pct", "ci", "drift_arms"):
        assert v2["comparisons"][0][key] == v1["comparisons"][0][key]


def test_interleaved_bracket_pairs_rounds_with_wilcoxon():
    rows = []
    for r in range(6):
        rows += [("A", r, 10.0 + r * 0.1), ("cand", r, 11.0 + r * 0.13), ("B", r, 10.05 + r * 0.1)]
    out = analysis.compute(_bracket({"kind": "interleaved", "seed": None, "rounds": 1}),
                           _records(rows), lambda sha: b"x")
    comp = out["comparisons"][0]
    assert comp["drift_arms"] == ["A", "B"] and comp["drift_blocks"] is None
    assert comp["paired_test"]["n_pairs"] == 6
    assert comp["paired_test"]["p_value"] == pytest.approx(2 / 64)  # exact: all 6 positive


def test_compare_reports_wilcoxon_per_group(evidence_factory):
    p = evidence_factory.compare_protocol()
    values = {"main": {"64": [5.0, 5.1, 5.2, 5.05, 5.15], "128": [9.0, 9.1, 9.2, 9.3, 9.4]},
              "pr": {"64": [4.0, 4.1, 4.2, 4.05, 4.1], "128": [9.0, 9.1, 9.2, 9.3, 9.4]}}
    samples, blobs = evidence_factory.make_samples(p, values)
    out = analysis.compute(p, samples, blobs.__getitem__)
    t64, t128 = (c["paired_test"] for c in out["comparisons"])
    assert t64["n_pairs"] == 5 and t64["p_value"] == pytest.approx(0.0625)
    assert t128["p_value"] is None and t128["reason"] == "every pair difference is zero"
    assert "Wilcoxon" in out["methods"]["paired_test"]


def test_version_1_evidence_still_verifies(tmp_path, evidence_factory):
    """Evidence sealed before schedules (stats version 1) is recomputed the version-1 way."""
    d = evidence_factory.build(tmp_path / "ev", evidence_factory.QUALIFYING)
    ev = load_evidence(d)
    v1 = analysis.compute(ev.protocol, ev.samples, ev.response_bytes, version=1)
    assert v1["version"] == 1 and "blocks" not in v1["comparisons"][0]
    (d / "stats.json").write_text(dumps_json(v1))
    manifest = json.loads((d / "manifest.json").read_text())
    size, digest = sha256_file(d / "stats.json")
    for entry in manifest["files"]:
        if entry["path"] == "stats.json":
            entry.update(size=size, sha256=digest)
    (d / "manifest.json").write_text(dumps_json(manifest))
    result = verify(d)
    assert result.ok, [str(p) for p in result.problems]
    v1["comparisons"][0]["drift_pct"] = 0.5   # and a forged v1 file is still caught
    (d / "stats.json").write_text(dumps_json(v1))
    size, digest = sha256_file(d / "stats.json")
    for entry in manifest["files"]:
        if entry["path"] == "stats.json":
            entry.update(size=size, sha256=digest)
    (d / "manifest.json").write_text(dumps_json(manifest))
    assert any("comparisons[0].drift_pct" in str(p) for p in verify(d).problems)


# ---------------------------------------------------------------------------- end to end

@pytest.mark.parametrize("line, n_blocks", [
    ('schedule = "ABBA"', 6),
    ('schedule = { kind = "randomized", seed = 3, rounds = 2 }', 6),
    ('schedule = "interleaved"', 3),
])
def test_schedule_runs_seal_and_verify(tmp_path, line, n_blocks):
    out = tmp_path / "ev"
    done = subprocess.run([EXE, "run", str(quick_with(tmp_path, line)), "--out", str(out),
                           "--warmups", "0", "--measured", "3"],
                          capture_output=True, text=True, timeout=LIMIT_S)
    assert done.returncode in (0, 1), done.stderr  # the verdict depends on this machine
    (d,) = [p for p in out.iterdir() if p.is_dir()]
    samples = read_jsonl(d, "samples.jsonl")
    assert len({s["block"] for s in samples}) == n_blocks
    assert sorted(s["arm"] for s in samples) == ["A"] * 3 + ["B"] * 3 + ["cand"] * 3
    if "interleaved" in line:
        assert [s["arm"] for s in samples[:3]] == ["A", "cand", "B"]
    else:
        assert len(list((d / "logs").iterdir())) == 6  # one log per worker visit
    result = verify(d)
    assert result.ok, [str(p) for p in result.problems]
    ok = subprocess.run([EXE, "verify", str(d)], capture_output=True, text=True, timeout=LIMIT_S)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "per-block medians" in (d / "report.md").read_text()


def test_bundled_cpu_brackets_interleave_pinned_workers():
    # docs/calibration.md: whole-arm host speed states and per-process core placement are
    # block effects no per-request CI sees; the bundled CPU brackets block both out.
    for name in ("exact-bands-aba", "exact-bands-quick"):
        r = protocol.load(name).resolved
        assert r["schedule_plan"]["kind"] == "interleaved", name
        assert r["target"]["pin_cpu"] == "auto", name
