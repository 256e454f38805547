"""harness.analysis: stats.json content, response identity and the verdict's named reasons."""
from __future__ import annotations

import json

import pytest

import evidence_factory as ef
from dflash_qualify.harness import analysis
from dflash_qualify.harness.errors import UsageError
from test_stats import A, B, CAND

FIXTURE = {"A": A, "cand": CAND, "B": B}


def run(values=FIXTURE, protocol=None, **kw):
    protocol = protocol or ef.bracket_protocol()
    samples, blobs = ef.make_samples(protocol, values, **kw)
    return analysis.compute(protocol, samples, lambda sha: blobs[sha]), samples


def conditions(result):
    return {(c["name"], c["group"]): c for c in result["verdict"]["conditions"]}


def test_bracket_fixture_numbers_and_verdict():
    # gain 20 %, drift 1.97 % (< 2 % max and < 10 % half gain): qualified
    r, _ = run()
    comp = r["comparisons"][0]
    # pooled |x - 10.15|: .35 .15 .15 .05 .05 .05 .05 .15 .25 .35 -> sorted .05 x4, .15 x3 ... -> 0.15
    assert comp["pooled_reference"] == {"n": 10, "median": pytest.approx(10.15), "mad": pytest.approx(0.15)}
    assert comp["gain_pct"] == pytest.approx(20.0)
    assert comp["drift_pct"] == pytest.approx(1.9704433497536946)
    assert comp["drift_arms"] == ["A", "B"]
    assert [a["id"] for a in r["arms"]] == ["A", "cand", "B"]
    assert [a["median"] for a in r["arms"]] == pytest.approx([10.0, 12.18, 10.2])
    assert r["verdict"]["qualified"] is True and r["verdict"]["reasons"] == []
    assert r["responses"]["identical"] is True and r["responses"]["hashed"] == 18  # warm-ups count
    json.dumps(r, allow_nan=False)  # JSON-ready, no NaN


def test_compute_is_deterministic():
    assert run()[0] == run()[0]


def test_thresholds_give_named_reasons():
    r, _ = run(protocol=ef.bracket_protocol(gate={"min_gain_pct": 25.0, "max_drift_pct": 1.0}))
    assert r["verdict"]["qualified"] is False
    assert r["verdict"]["reasons"] == ["gain_below_min", "drift_above_max"]
    c = conditions(r)
    assert c[("gain_meets_min", None)]["message"] == "gain 20.00% is below the minimum 25.00%"
    assert c[("drift_below_max", None)]["message"] == "bracket drift 1.97% is not below the maximum 1.00%"


def test_drift_above_half_gain():
    # cand median 10.35: gain = (10.35 / 10.15 - 1) * 100 = 1.97 %, half = 0.985 % < drift 1.97 %
    values = dict(FIXTURE, cand=[10.35, 10.35, 10.40, 10.30, 10.35])
    r, _ = run(values)
    assert "drift_above_half_gain" in r["verdict"]["reasons"]


def test_ci_includes_zero_and_below_zero():
    r, _ = run(dict(FIXTURE, cand=[10.1, 10.2, 10.15, 10.0, 10.3]))
    assert "ci_includes_zero" in r["verdict"]["reasons"]
    r, _ = run(dict(FIXTURE, cand=[8.0, 8.1, 8.05, 7.9, 8.0]))
    assert "ci_below_zero" in r["verdict"]["reasons"]
    assert "gain_below_min" in r["verdict"]["reasons"]


def test_one_sample_per_arm_gives_ci_unavailable():
    r, _ = run({"A": [10.0], "cand": [12.0], "B": [10.0]})
    comp = r["comparisons"][0]
    assert comp["ci"]["low"] is None and comp["ci"]["reason"].startswith("needs at least 2")
    assert comp["gain_pct"] == pytest.approx(20.0)
    assert "ci_unavailable" in r["verdict"]["reasons"]


def test_mad_zero_identical_samples_degenerate_ci():
    r, _ = run({"A": [10.0] * 3, "cand": [12.0] * 3, "B": [10.0] * 3})
    comp = r["comparisons"][0]
    assert comp["ci"]["degenerate"] is True and comp["ci"]["low"] == pytest.approx(20.0)
    assert all(a["mad"] == 0.0 for a in r["arms"])
    assert r["verdict"]["qualified"] is True


def test_response_mismatch_names_request_and_byte():
    other = ef.RESPONSE[:10] + b"X" + ef.RESPONSE[11:]
    r, samples = run(responses={("B", "measured", 2): other})
    m = r["responses"]["first_mismatch"]
    assert m["request"]["arm"] == "B" and m["request"]["phase"] == "measured" and m["request"]["index"] == 2
    assert m["reference"]["arm"] == "A" and m["reference"]["seq"] == 0
    assert m["first_differing_byte"] == 10
    assert r["verdict"]["reasons"] == ["responses_differ"]
    msg = conditions(r)[("responses_identical", None)]["message"]
    assert "request B measured #2 (seq 15)" in msg and "first differing byte at position 10" in msg


def test_prefix_response_differs_at_its_length():
    r, _ = run(responses={"cand": ef.RESPONSE[:5]})
    m = r["responses"]["first_mismatch"]
    assert m["request"]["arm"] == "cand" and m["request"]["phase"] == "warmup"
    assert m["first_differing_byte"] == 5 and r["responses"]["mismatches"] == 6


def test_cache_hit_and_failed_requests():
    protocol = ef.bracket_protocol()
    samples, blobs = ef.make_samples(protocol, FIXTURE, cache_hits={("cand", "measured", 0): 3})
    samples[-1].update(ok=False, value=None, response_sha256=None, error="timeout")
    r = analysis.compute(protocol, samples, lambda sha: blobs[sha])
    assert r["verdict"]["reasons"] == ["failed_requests", "cache_hit"]
    assert r["arms"][2]["n"] == 4  # the failed request is not a sample


def test_compare_lower_is_better_per_group():
    protocol = ef.compare_protocol()
    values = {"main": {"64": [10.0, 10.2, 9.8], "128": [20.0, 20.0, 20.0]},
              "pr": {"64": [8.0, 8.1, 7.9], "128": [19.0, 19.0, 19.0]}}
    # 64: (1 - 8.0 / 10.0) * 100 = 20 %; 128: (1 - 19 / 20) * 100 = 5 %
    samples, blobs = ef.make_samples(protocol, values, responses={"pr": b"different"})
    r = analysis.compute(protocol, samples, lambda sha: blobs[sha])
    assert [c["group"] for c in r["comparisons"]] == ["64", "128"]
    assert [c["gain_pct"] for c in r["comparisons"]] == pytest.approx([20.0, 5.0])
    assert all(c["drift_pct"] is None for c in r["comparisons"])
    assert r["gain_name"] == "lower time" and r["unit"] == "ms"
    assert r["responses"]["identical"] is False  # reported ...
    assert r["verdict"]["qualified"] is True     # ... but not gated (require_identical false)
    gated = analysis.verdict(r, dict(r["gate"], require_identical=True))
    assert gated["reasons"] == ["responses_differ"]


def test_bad_protocol_and_samples_name_the_field():
    protocol = ef.bracket_protocol()
    samples, blobs = ef.make_samples(protocol, FIXTURE)
    bad = dict(protocol, direction="up")
    with pytest.raises(UsageError, match=r"protocol.json: direction: invalid value \(expected 'higher' or 'lower', got 'up'\)"):
        analysis.compute(bad, samples, blobs.__getitem__)
    samples[3]["value"] = -1
    with pytest.raises(UsageError, match=r"samples.jsonl: record 4: value: .*expected a finite number > 0, got -1"):
        analysis.compute(protocol, samples, blobs.__getitem__)


def test_samples_csv():
    protocol = ef.bracket_protocol()
    samples, _ = ef.make_samples(protocol, {"A": [10.0], "cand": [12.5], "B": [10.0]}, warmups=0)
    text = analysis.samples_csv(samples)
    sha = samples[0]["response_sha256"]
    assert text == f"arm,phase,value,response_sha256\nA,measured,10.0,{sha}\ncand,measured,12.5,{sha}\nB,measured,10.0,{sha}\n"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_values = st.lists(st.floats(min_value=0.001, max_value=1e6, allow_nan=False), min_size=0, max_size=6)


@settings(max_examples=40, deadline=None)
@given(a=_values, c=_values, b=_values, direction=st.sampled_from(["higher", "lower"]))
def test_compute_is_json_safe_for_any_positive_samples(a, c, b, direction):
    protocol = ef.bracket_protocol(direction=direction, gate={"bootstrap_resamples": 50})
    values = {"A": a, "cand": c, "B": b}
    samples, blobs = ef.make_samples(protocol, {k: v or [1.0] for k, v in values.items()}, warmups=0)
    samples = [s for s in samples if values[s["arm"]]]  # arms may have no samples at all
    r = analysis.compute(protocol, samples, lambda sha: blobs[sha])
    json.dumps(r, allow_nan=False)
    assert isinstance(r["verdict"]["qualified"], bool)
    for cond in r["verdict"]["conditions"]:
        assert cond["passed"] or cond["reason"]
