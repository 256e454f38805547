"""Sequential brackets end to end with scripted targets: blocks of fresh workers, a look after
each, the three answers and their exit codes (0/1/4), JUnit and step summary for INCONCLUSIVE,
and verify rejecting a recorded stopping decision that does not follow from the samples."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from evidence_factory import fixed_n_text

from dflash_qualify.harness import kinds, protocol
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.evidence import dumps_json
from dflash_qualify.harness.targets.fake import FakeScript, FakeTarget, fake_factory
from dflash_qualify.harness.verify import verify

QUICK = Path(protocol.__file__).parent.parent / "protocols" / "exact-bands-quick.toml"


def sequential_protocol(tmp_path: Path, *, max_rounds: int = 600, max_seconds: float = 600.0,
                        measured: int = 3) -> protocol.LoadedProtocol:
    text = QUICK.read_text()
    head, _, tail = text.partition("[measure]")
    body = "\n".join(line for line in tail.splitlines()
                     if not line.startswith(("measured", "sequential", "max_rounds", "max_seconds")))
    path = tmp_path / "seq.toml"
    path.write_text(head + f"[measure]\nmeasured = {measured}\nsequential = true\n"
                    f"max_rounds = {max_rounds}\nmax_seconds = {max_seconds}\n" + body)
    return protocol.load(str(path))


def timing(base_ms: float, seed: int, sd: float = 0.03):
    """prefill_ms of each request: base x lognormal noise (a shared stream across blocks)."""
    rng = np.random.default_rng(seed)
    return lambda n: float(base_ms * math.exp(rng.normal(0.0, sd)))


def run(tmp_path: Path, loaded, scripts: dict, made: list | None = None) -> kinds.Sealed:
    return kinds.qualify(loaded, tmp_path / "ev", invocation="dflash-qualify run test",
                          make_target=fake_factory(scripts, made))


def scripts(cand_ms: float, *, seed: int = 0, cand_response: bytes = b"same answer") -> dict:
    return {"A": FakeScript(prefill_ms=timing(10.0, seed)),
            "cand": FakeScript(prefill_ms=timing(cand_ms, seed + 1), response=cand_response),
            "B": FakeScript(prefill_ms=timing(10.0, seed + 2))}


def gate(d: Path, *args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["gate", str(d), *args], env=env)


def reseal(d: Path, rel: str) -> None:
    """Rewrite the manifest entry of an edited file, as a forger would."""
    data = (d / rel).read_bytes()
    manifest = json.loads((d / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == rel:
            entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (d / "manifest.json").write_text(dumps_json(manifest))


def test_blocks_start_fresh_workers_in_shuffled_order_until_qualified(tmp_path):
    made: list[FakeTarget] = []
    out = run(tmp_path, sequential_protocol(tmp_path), scripts(8.0), made)
    seq = out.stats["sequential"]
    assert out.stats["verdict"]["decision"] == "QUALIFIED" and out.qualified
    assert seq["decided_at"] == len(seq["looks"]) == len(seq["blocks"]) >= 8
    assert len(made) == 3 * seq["decided_at"]                    # fresh workers every block
    assert all(t.torn_down and len(t.requests) == 1 + 3 for t in made)
    looks = [json.loads(x) for x in (out.path / "looks.jsonl").read_text().splitlines()]
    assert [lk["n"] for lk in looks] == list(range(1, seq["decided_at"] + 1))
    assert looks[-1]["stop"] == "decided" and all(lk["stop"] is None for lk in looks[:-1])
    assert len({tuple(lk["order"]) for lk in looks}) > 1          # order shuffled per block
    samples = [json.loads(x) for x in (out.path / "samples.jsonl").read_text().splitlines()]
    assert {s["block"] for s in samples} == set(range(seq["decided_at"]))
    assert verify(out.path).ok
    r = gate(out.path)
    assert r.exit_code == 0 and "QUALIFIED" in r.output
    report = (out.path / "report.md").read_text()
    assert "## Sequential looks" in report and "**Verdict: QUALIFIED**" in report


def test_budget_spent_first_is_inconclusive_exit_4_with_junit_and_step_summary(tmp_path):
    out = run(tmp_path, sequential_protocol(tmp_path, max_rounds=12), scripts(10.0))
    v = out.stats["verdict"]
    assert v["decision"] == "INCONCLUSIVE" and v["reasons"] == ["budget_exhausted"]
    assert len(out.stats["sequential"]["looks"]) == 4              # 4 blocks x 3 rounds = 12
    assert out.stats["sequential"]["projection"] is not None
    assert verify(out.path).ok
    summary = tmp_path / "summary.md"
    junit = tmp_path / "junit.xml"
    r = gate(out.path, "--junit", str(junit), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 4, r.output
    assert "INCONCLUSIVE (budget_exhausted)" in r.output
    xml = junit.read_text()
    assert 'type="budget_exhausted"' in xml and "INCONCLUSIVE" in xml
    assert "<skipped" in xml and 'failures="0"' in xml and 'skipped="1"' in xml  # undecided, not failed
    assert "**Verdict: INCONCLUSIVE**" in summary.read_text()
    assert "blocks would likely decide it" in summary.read_text()


def test_a_slower_candidate_is_not_qualified_exit_1(tmp_path):
    out = run(tmp_path, sequential_protocol(tmp_path), scripts(12.0))
    assert out.stats["verdict"]["decision"] == "NOT QUALIFIED"
    assert out.stats["sequential"]["reason"] == "gain_below_min"
    assert gate(out.path).exit_code == 1


def test_differing_responses_stop_the_run_and_refuse(tmp_path):
    out = run(tmp_path, sequential_protocol(tmp_path), scripts(8.0, cand_response=b"other"))
    looks = [json.loads(x) for x in (out.path / "looks.jsonl").read_text().splitlines()]
    assert len(looks) == 1 and looks[0]["stop"] == "responses_differ"
    assert out.stats["verdict"]["decision"] == "NOT QUALIFIED"
    assert "responses_differ" in out.stats["verdict"]["reasons"]
    assert verify(out.path).ok


def test_verify_rejects_a_recorded_stop_that_does_not_follow(tmp_path):
    out = run(tmp_path, sequential_protocol(tmp_path), scripts(8.0))
    d = out.path
    looks = (d / "looks.jsonl").read_text().splitlines()
    # claim the decision one block early: the rule had not decided there
    early = [json.loads(x) for x in looks[:-1]]
    early[-1].update(decision="QUALIFIED", reason="lower_bound_above_min_gain", stop="decided")
    (d / "looks.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in early))
    reseal(d, "looks.jsonl")
    problems = [str(p) for p in verify(d).problems]
    assert problems and all(p.startswith("looks.jsonl: does not follow from samples.jsonl") for p in problems)
    assert any("stopped as decided" in p for p in problems)


def test_verify_rejects_a_tampered_decision_in_stats(tmp_path):
    out = run(tmp_path, sequential_protocol(tmp_path, max_rounds=12), scripts(10.0))
    d = out.path
    stats = json.loads((d / "stats.json").read_text())
    stats["sequential"]["decision"] = "QUALIFIED"
    stats["verdict"]["decision"] = "QUALIFIED"
    (d / "stats.json").write_text(dumps_json(stats))
    reseal(d, "stats.json")
    problems = [str(p) for p in verify(d).problems]
    assert any(p.startswith("stats.json: does not match statistics recomputed") for p in problems)


def test_verify_rejects_blocks_run_past_the_decision(tmp_path):
    out = run(tmp_path, sequential_protocol(tmp_path), scripts(8.0))
    d = out.path
    samples = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    last = max(s["block"] for s in samples)
    extra = [{**s, "seq": s["seq"] + len(samples), "block": last + 1}
             for s in samples if s["block"] == last]
    (d / "samples.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n"
                                             for x in samples + extra))
    reseal(d, "samples.jsonl")
    problems = [str(p) for p in verify(d).problems]
    assert any("blocks_after_decision" in p or "does not match" in p for p in problems)


def test_sequential_needs_a_budget_and_an_interleaved_schedule(tmp_path):
    base = fixed_n_text(QUICK.read_text())
    text = base.replace("measured = 5", "measured = 5\nsequential = true")
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(Exception, match="measure.max_rounds"):
        protocol.load(str(path))
    path.write_text(text.replace("sequential = true", "sequential = true\nmax_rounds = 30\n"
                                 "max_seconds = 60").replace('schedule = "interleaved"', ""))
    with pytest.raises(Exception, match='"interleaved" with measure.sequential'):
        protocol.load(str(path))
    path.write_text(base.replace("measured = 5", "measured = 5\nmax_rounds = 3"))
    with pytest.raises(Exception, match="measure.sequential = true"):
        protocol.load(str(path))


def test_calibrate_reports_the_sequential_rules_rates_per_true_gain(tmp_path):
    from dflash_qualify.harness.kinds.calibration import calibrate
    loaded = sequential_protocol(tmp_path)
    settings = {"repeats": 12, "simulations": 300, "seed": 1, "n_grid": [3], "effects_pct": [5.0]}
    same = {"A": FakeScript(prefill_ms=timing(10.0, 5)), "cand": FakeScript(prefill_ms=timing(10.0, 6)),
            "B": FakeScript(prefill_ms=timing(10.0, 7))}
    out = calibrate(loaded, tmp_path / "cal", settings, invocation="dflash-qualify calibrate test",
                    make_target=fake_factory(same))
    seq = out.stats["sequential"]
    assert seq["blocks"] == 12
    rates = {x["gain_pct"]: x for x in seq["rates"]}
    assert sorted(rates) == [0.0, 2.0, 5.5, 10.0]
    for x in rates.values():
        assert x["qualified"] + x["not_qualified"] + x["inconclusive"] == 300
    assert rates[0.0]["error"] == "false qualification" and rates[10.0]["error"] == "false refusal"
    assert rates[0.0]["qualified_pct"] <= 2.5 and rates[10.0]["qualified_pct"] >= 95.0
    assert rates[10.0]["median_blocks"] is not None
    assert verify(out.path).ok
    assert "## The sequential rule on this machine" in (out.path / "report.md").read_text()
