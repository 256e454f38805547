"""calibrate: A/A protocol, noise floor, simulated false-qualification rate and power, sealed
evidence that verify recomputes, the report, and the CLI (fake targets and one ds4-tiny run)."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dflash_qualify.harness import analysis, protocol, reports
from dflash_qualify.harness.kinds.calibration import analysis as calibration
from dflash_qualify.harness.kinds.calibration import calibrate
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.evidence import dumps_json, load_evidence, sha256_file
from dflash_qualify.harness.targets.fake import FakeScript, fake_factory
from dflash_qualify.harness.verify import verify

EXE = str(Path(sys.executable).parent / "dflash-qualify")
LIMIT_S = 300  # only stops a hung test; nothing is timed
SMALL = {"repeats": 4, "simulations": 60, "seed": 1, "target_effect_pct": 5.0,
         "target_power": 0.8, "max_false_rate_pct": 1.0}


def noisy_factory(spread: float = 0.03, seed: int = 0):
    """Fake targets whose prefill times are 10 ms x (1 +- spread), one shared random stream."""
    rng = np.random.default_rng(seed)
    counter = itertools.count()

    def prefill(_n: int) -> float:
        next(counter)
        return float(10.0 * (1 + rng.uniform(-spread, spread)))

    script = FakeScript(prefill_ms=prefill)
    return fake_factory({"A": script, "cand": script, "B": script})


def test_aa_protocol_runs_the_reference_everywhere():
    loaded = protocol.load("exact-bands-quick")
    aa = calibration.aa_protocol(loaded.resolved, SMALL)
    ref = loaded.resolved["arms"][0]
    assert [a["id"] for a in aa["arms"]] == ["A", "cand", "B"]
    assert all(a["env"] == ref["env"] and a.get("engine", {}) == ref.get("engine", {})
               for a in aa["arms"])
    assert aa["arms"][1]["role"] == "candidate"  # positions keep their roles
    assert aa["calibration"]["source_arms"][1]["engine"] == {"chunk": 4}
    assert aa["name"] == "exact-bands-quick-calibration"


def test_compare_protocols_are_refused():
    with pytest.raises(UsageError, match="bracket protocol"):
        calibration.aa_protocol(protocol.load("narrow-mmvq-compare").resolved, SMALL)


def test_calibrate_seals_and_verifies(tmp_path):
    loaded = protocol.load("exact-bands-quick", warmups=0, measured=4)
    out = calibrate(loaded, tmp_path / "ev", SMALL, invocation="test",
                    make_target=noisy_factory())
    result = verify(out.path)
    assert result.ok, [str(p) for p in result.problems]
    ev = load_evidence(out.path)
    s = ev.stats
    assert s["kind"] == "calibration" and len(s["repeats"]) == 4
    assert {r["repeat"] for r in ev.samples} == {0, 1, 2, 3}
    assert [r["seq"] for r in ev.samples] == list(range(len(ev.samples)))
    assert [p["effect_pct"] for p in s["power"]] == [1.0, 2.0, 3.0, 5.0, 10.0]
    powers = [p["power"] for p in s["power"]]
    assert powers == sorted(powers)  # common random numbers: more effect, never less power
    assert s["false_qualification"]["simulated"]["simulations"] == 60
    assert (out.path / "logs" / "repeat-003" / "B.log").is_file()
    text = reports.render(ev, "md", reports.CALIBRATION_FORMATS)
    assert "Simulated false-qualification rate" in text and "Recommended N" in text
    assert f"Evidence manifest SHA-256: {ev.manifest_sha}" in text
    json.loads(reports.render(ev, "json"))


def test_tampered_calibration_stats_fail_verify(tmp_path):
    loaded = protocol.load("exact-bands-quick", warmups=0, measured=3)
    out = calibrate(loaded, tmp_path / "ev", {**SMALL, "repeats": 2}, invocation="test",
                    make_target=noisy_factory())
    stats_path = out.path / "stats.json"
    doc = json.loads(stats_path.read_text())
    doc["false_qualification"]["simulated"]["rate_pct"] = 0.0001
    stats_path.write_text(dumps_json(doc))
    # re-seal the manifest over the forged file, so only the recomputation can catch it
    manifest = json.loads((out.path / "manifest.json").read_text())
    size, digest = sha256_file(stats_path)
    for entry in manifest["files"]:
        if entry["path"] == "stats.json":
            entry.update(size=size, sha256=digest)
    (out.path / "manifest.json").write_text(dumps_json(manifest))
    messages = [str(p) for p in verify(out.path).problems]
    assert any("false_qualification.simulated.rate_pct" in m for m in messages), messages


def test_power_detects_a_large_effect_on_quiet_noise():
    """Tight A/A noise (0.5%): a 10% effect is always detected and nothing is falsely qualified."""
    loaded = protocol.load("exact-bands-quick", warmups=0, measured=5)
    aa = calibration.aa_protocol(loaded.resolved, {**SMALL, "repeats": 3})
    rng = np.random.default_rng(3)
    samples = []
    for r in range(3):
        for i in range(5):  # exact-bands-quick is interleaved: block i is round i
            for arm in ["A", "cand", "B"]:
                samples.append({"seq": len(samples), "repeat": r, "arm": arm, "phase": "measured",
                                "index": i, "group": None, "block": i, "ok": True,
                                "value": 1000 * (1 + rng.uniform(-0.005, 0.005)),
                                "response_sha256": "0" * 64, "cache_hits": 0})
    s = calibration.compute(aa, samples, lambda sha: b"x")
    assert s["false_qualification"]["simulated"]["qualified"] == 0
    assert s["power"][-1]["power"] == 1.0  # 10%
    assert s["recommendation"]["n"] is not None
    assert s["verdict"]["qualified"] is True


@pytest.mark.parametrize("kind", ["ABA", "ABBA", "interleaved"])
def test_fast_decision_equals_the_full_comparison(kind):
    """_qualifies skips the bootstrap only when another condition already fails."""
    base = protocol.load("exact-bands-quick").resolved
    view = analysis.typed({**base, "schedule_plan": {"kind": kind, "seed": None,
                                                                "rounds": 2 if kind == "ABBA" else 1}})
    rng = np.random.default_rng(0)
    order = {"ABA": ["A", "cand", "B"], "ABBA": ["A", "cand", "B", "B", "cand", "A"],
             "interleaved": ["A", "cand", "B"] * 4}[kind]
    agree = passed = 0
    for trial in range(150):
        level, spread, effect = rng.uniform(0.97, 1.03, 3), rng.uniform(0.001, 0.05), rng.uniform(0, 0.12)
        records = []
        for block, arm in enumerate(order):
            for _ in range(1 if kind == "interleaved" else 3):
                v = 100 * level[block % 3] * (1 + rng.normal(0, spread)) * (1 + effect * (arm == "cand"))
                records.append({"seq": len(records), "arm": arm, "phase": "measured", "group": None,
                                "block": block // 3 if kind == "interleaved" else block,
                                "index": len(records), "value": v, "ok": True})
        fast, full = calibration._qualifies(view, records), calibration._qualifies_full(view, records)
        agree += fast == full
        passed += full
    assert agree == 150
    assert passed > 5  # the comparison exercised qualifying brackets too


def test_gate_on_calibration_evidence(tmp_path):
    loaded = protocol.load("exact-bands-quick", warmups=0, measured=3)
    out = calibrate(loaded, tmp_path / "ev", {**SMALL, "repeats": 2}, invocation="test",
                    make_target=noisy_factory())
    done = subprocess.run([EXE, "gate", str(out.path)], capture_output=True, text=True,
                          timeout=LIMIT_S)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr
    bad = subprocess.run([EXE, "gate", str(out.path), "--min-gain", "3"], capture_output=True,
                         text=True, timeout=LIMIT_S)
    assert bad.returncode == 2 and "calibration evidence" in bad.stderr


def test_cli_calibrate_on_ds4_tiny(tmp_path):
    out = tmp_path / "ev"
    done = subprocess.run([EXE, "calibrate", "exact-bands-quick", "--repeats", "2", "--warmups",
                           "0", "--measured", "3", "--simulations", "30", "--out", str(out)],
                          capture_output=True, text=True, timeout=LIMIT_S)
    assert done.returncode in (0, 1), done.stderr
    assert "Simulated false-qualification rate" in done.stdout
    (d,) = [p for p in out.iterdir() if p.is_dir()]
    ok = subprocess.run([EXE, "verify", str(d)], capture_output=True, text=True, timeout=LIMIT_S)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_cli_calibrate_rejects_compare(tmp_path):
    done = subprocess.run([EXE, "calibrate", "narrow-mmvq-compare", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=LIMIT_S)
    assert done.returncode == 2 and "bracket protocol" in done.stderr
    assert "Traceback" not in done.stderr
