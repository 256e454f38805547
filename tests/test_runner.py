"""The runner with scripted fake targets: sample records, exactness, failures, interrupts."""
from __future__ import annotations

from evidence_factory import fixed_n_text

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness import kinds, targets
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.errors import RunFailed
from dflash_qualify.harness.evidence import EvidenceWriter
from dflash_qualify.harness.targets.fake import FakeScript, FakeTarget, fake_factory

# q1 arms take 10 ms for 64 tokens, the candidate 5 ms: a clear, noise-free gain
FAST = FakeScript(prefill_ms=[5.0, 5.05, 4.95])
SLOW = FakeScript(prefill_ms=[10.0, 10.05, 9.95])


QUICK_ABA: Path | None = None


@pytest.fixture(autouse=True, scope="module")
def _quick_aba(tmp_path_factory):
    """These tests check the runner's sequential path (one target per arm, A then cand then
    B), so they run exact-bands-quick with its schedule line (interleaved) dropped: ABA."""
    global QUICK_ABA
    text = fixed_n_text((protocol_mod.bundled_dir() / "exact-bands-quick.toml").read_text())
    assert text.count('\nschedule = "interleaved"\n') == 1
    QUICK_ABA = tmp_path_factory.mktemp("protocols") / "exact-bands-quick.toml"
    QUICK_ABA.write_text(text.replace('\nschedule = "interleaved"\n', "\n"))


def quick(**over) -> protocol_mod.LoadedProtocol:
    assert QUICK_ABA is not None
    return protocol_mod.load(str(QUICK_ABA), **over)


def run(tmp_path: Path, scripts: dict, loaded=None, made=None) -> kinds.Sealed:
    loaded = loaded or quick()
    return kinds.qualify(loaded, tmp_path / "ev", invocation="dflash-qualify run test",
                          make_target=fake_factory(scripts, made))


def only_dir(root: Path) -> Path:
    (d,) = list(root.iterdir())
    return d


def read_samples(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "samples.jsonl").read_text().splitlines()]


def test_sample_records_and_sealed_evidence(tmp_path):
    made: list[FakeTarget] = []
    out = run(tmp_path, {"A": SLOW, "cand": FAST, "B": SLOW}, made=made)
    assert out.qualified
    assert out.path.is_dir() and not out.path.name.endswith(".partial")
    assert not (out.path / "INCOMPLETE").exists()
    samples = read_samples(out.path)
    assert len(samples) == 3 * (1 + 5)
    assert [s["seq"] for s in samples] == list(range(18))
    assert [s["arm"] for s in samples] == ["A"] * 6 + ["cand"] * 6 + ["B"] * 6
    assert [s["phase"] for s in samples[:6]] == ["warmup"] + ["measured"] * 5
    assert [s["index"] for s in samples[:6]] == [0, 0, 1, 2, 3, 4]
    first = samples[1]
    # prefill tok/s from the engine's own prefill time
    assert first["value"] == pytest.approx(64 / (first["prefill_ms"] / 1e3))
    assert first["prefill_ms"] == 10.05
    assert first["metric"] == "prefill_tok_s" and first["ok"] is True
    assert first["response_len"] == len(b"same answer")
    assert (out.path / "responses" / f"{first['response_sha256']}.bin").read_bytes() == \
        b"same answer"
    for name in ("protocol.json", "protocol.toml", "environment.json", "samples.csv",
                 "stats.json", "report.md", "manifest.json", "logs/A.log", "logs/cand.log"):
        assert (out.path / name).is_file(), name
    # a fresh target per arm, each prepared and torn down
    assert [t.arm_id for t in made] == ["A", "cand", "B"]
    assert all(t.prepared and t.torn_down for t in made)
    env = json.loads((out.path / "environment.json").read_text())
    assert env["finished_utc"] and env["invocation"] == "dflash-qualify run test"
    assert set(env["arms"]) == {"A", "cand", "B"}


def test_warmups_excluded_from_stats(tmp_path):
    # the warm-up is absurdly slow; if it entered statistics the medians would move
    slow_first = FakeScript(prefill_ms=lambda n: 1000.0 if n == 0 else 10.0)
    out = run(tmp_path, {"A": slow_first, "cand": FAST, "B": slow_first})
    arms = {a["id"]: a for a in out.stats["arms"]}
    assert arms["A"]["n"] == 5 and arms["A"]["median"] == pytest.approx(6400.0)
    assert 64 / 1.0 not in arms["A"]["values"]


def test_warmup_response_enters_the_hash_check(tmp_path):
    differs_in_warmup = FakeScript(prefill_ms=[5.0], response=lambda n: b"same answeR"
                                   if n == 0 else b"same answer")
    out = run(tmp_path, {"A": SLOW, "cand": differs_in_warmup, "B": SLOW})
    assert not out.qualified
    assert any("differ" in r or "identical" in r for r in out.stats["verdict"]["reasons"])


def test_different_response_fails_gate_with_first_differing_position(tmp_path):
    # the candidate's 3rd measured response differs at byte 5 ("same " + "X"...)
    bad = FakeScript(prefill_ms=[5.0], response=lambda n: b"same Xnswer" if n == 3 else
                     b"same answer")
    out = run(tmp_path, {"A": SLOW, "cand": bad, "B": SLOW})
    assert not out.qualified
    assert "responses_differ" in out.stats["verdict"]["reasons"]
    failed = [c["message"] for c in out.stats["verdict"]["conditions"] if not c["passed"]]
    assert any("cand" in m and "5" in m for m in failed), failed
    mismatch = json.dumps(out.stats["responses"])
    assert "cand" in mismatch
    result = CliRunner().invoke(main, ["gate", str(out.path)])
    assert result.exit_code == 1
    assert "cand" in result.output and "5" in result.output


def test_failing_target_leaves_incomplete_evidence_and_no_live_target(tmp_path):
    made: list[FakeTarget] = []
    with pytest.raises(RunFailed) as err:
        run(tmp_path, {"cand": FakeScript(fail_at=2)}, made=made)
    assert "scripted failure" in str(err.value)
    assert err.value.exit_code == 3
    d = only_dir(tmp_path / "ev")
    assert d.name.endswith(".partial") and str(d) in str(err.value)
    assert (d / "INCOMPLETE").read_text().startswith("failed: ")
    assert "scripted failure" in (d / "INCOMPLETE").read_text()
    assert not (d / "manifest.json").exists()
    assert all(t.torn_down for t in made) and [t.arm_id for t in made] == ["A", "cand"]
    assert (d / "logs" / "cand.log").is_file()   # the failed arm's log is kept
    assert len(read_samples(d)) == 6 + 2          # everything before the failure is kept


def test_dying_target_in_prepare(tmp_path):
    with pytest.raises(RunFailed, match="arm B: worker exited"):
        run(tmp_path, {"B": FakeScript(fail_prepare="worker exited before the ready line")})
    assert only_dir(tmp_path / "ev").name.endswith(".partial")


def test_cache_hit_fails_the_run_under_cold_policy(tmp_path):
    with pytest.raises(RunFailed, match=r"request A-3 hit the engine cache .* cache-cold"):
        run(tmp_path, {"A": FakeScript(cache_hit_at=3)})
    d = only_dir(tmp_path / "ev")
    last = read_samples(d)[-1]
    assert last["ok"] is False and last["cache_hits"] == 1


def test_keyboard_interrupt_stops_cleanly(tmp_path):
    made: list[FakeTarget] = []

    def interrupt(n: int) -> None:
        if n == 2:
            raise KeyboardInterrupt

    with pytest.raises(RunFailed, match=r"interrupted \(SIGINT\)"):
        run(tmp_path, {"cand": FakeScript(on_request=interrupt)}, made=made)
    d = only_dir(tmp_path / "ev")
    assert (d / "INCOMPLETE").read_text() == "interrupted: SIGINT"
    assert all(t.torn_down for t in made)


def test_arm_timeout(tmp_path):
    loaded = quick()
    loaded.resolved["timeouts"]["arm_s"] = 1e-9
    with pytest.raises(RunFailed, match=r"arm A: arm timeout of 1e-09 s exceeded"):
        run(tmp_path, {}, loaded=loaded)


def test_compare_interleaves_and_keeps_one_target_per_arm(tmp_path):
    made: list[FakeTarget] = []
    loaded = protocol_mod.load("narrow-mmvq-compare", warmups=1, measured=3)
    loaded.resolved["target"]["model"] = "fake"
    out = run(tmp_path, {"main": SLOW, "pr": FAST}, loaded=loaded, made=made)
    assert [t.arm_id for t in made] == ["main", "pr"]
    samples = read_samples(out.path)
    assert [(s["group"], s["arm"], s["phase"]) for s in samples[:8]] == [
        ("64", "main", "warmup"), ("64", "pr", "warmup"),
        ("64", "main", "measured"), ("64", "pr", "measured"),
        ("64", "main", "measured"), ("64", "pr", "measured"),
        ("64", "main", "measured"), ("64", "pr", "measured")]
    assert {s["group"] for s in samples} == {"64", "128"}
    assert all(s["metric"] == "prefill_ms" for s in samples)
    assert out.qualified  # 5 ms vs 10 ms, identical responses


def test_cli_run_with_fake_targets_exit_codes(tmp_path, monkeypatch):
    monkeypatch.setitem(targets.TARGETS, "embedded", fake_factory({"A": SLOW, "cand": FAST,
                                                                   "B": SLOW}))
    ok = CliRunner().invoke(main, ["run", "exact-bands-quick", "--out", str(tmp_path / "a"),
                                   "--measured", "3"])
    assert ok.exit_code == 0, ok.output
    assert "Evidence manifest SHA-256: " in ok.output
    monkeypatch.setitem(targets.TARGETS, "embedded", fake_factory({"cand": SLOW}))
    flat = CliRunner().invoke(main, ["run", "exact-bands-quick", "--out", str(tmp_path / "b")])
    assert flat.exit_code == 1, flat.output
    monkeypatch.setitem(targets.TARGETS, "embedded", fake_factory({"B": FakeScript(die_at=0)}))
    died = CliRunner().invoke(main, ["run", "exact-bands-quick", "--out", str(tmp_path / "c")])
    assert died.exit_code == 3
    assert "worker exited" in died.output and ".partial" in died.output
    assert "Traceback" not in died.output


def test_overrides_recorded_in_protocol_json(tmp_path):
    out = run(tmp_path, {"cand": FAST}, loaded=quick(warmups=0, measured=2))
    proto = json.loads((out.path / "protocol.json").read_text())
    assert proto["overrides"] == {"warmups": 0, "measured": 2}
    assert len(read_samples(out.path)) == 3 * 2


def test_writer_is_the_only_writer(tmp_path):
    # the runner writes through the EvidenceWriter: nothing lands outside the evidence dir
    run(tmp_path, {"cand": FAST})
    assert [p.name for p in (tmp_path / "ev").iterdir()][0].endswith("-exact-bands-quick")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ev"]
    assert isinstance(EvidenceWriter, type)


def test_arms_running_different_models_are_refused(tmp_path):
    with pytest.raises(RunFailed, match=r"arm cand runs model config other but arm A ran fake: "
                                        r"all arms must run the same model and seed"):
        run(tmp_path, {"cand": FakeScript(config_hash="other")})


def test_out_that_is_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "ev").write_text("not a directory")
    result = CliRunner().invoke(main, ["run", "exact-bands-quick", "--out",
                                       str(tmp_path / "ev")])
    assert result.exit_code == 2 and "is a file" in result.output
    below = CliRunner().invoke(main, ["run", "exact-bands-quick", "--out",
                                      str(tmp_path / "ev" / "sub")])
    assert below.exit_code == 2, below.output
    assert "error: " in below.output and "cannot create evidence root" in below.output
