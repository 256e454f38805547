"""The sequential rule (harness/sequential.py): its error rates under a look after every block,
on many thousands of seeded simulated brackets with known truth (harness/noise_model.py),
and the pieces verify relies on (recomputation, tamper detection)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import beta as beta_dist

from dflash_qualify.harness import noise_model as nm
from dflash_qualify.harness import sequential as sq

CONFIDENCE = 0.95
ALPHA = sq.alpha_of(CONFIDENCE)   # 0.025 per side
MIN_GAIN = 2.0                    # the bundled protocols' min_gain_pct
MAX_DRIFT = 5.0
BUDGET = 120                      # blocks: ~3 min of real ds4-tiny blocks, far past what
                                  # +5.5% needs on the shared-VM model (median ~25)
ROUNDS = 3
SIMS = 10_000                     # per scenario: a rate of 2.5% has a Monte-Carlo s.e. of 0.16%


def mc_slack(p: float, n: int) -> float:
    """Three Monte-Carlo standard errors of a rate p estimated from n brackets: a simulated
    rate above bound + slack is a real excess, not sampling luck (p < 0.0014 by chance)."""
    return 3.0 * math.sqrt(p * (1.0 - p) / n)


def rates(model: nm.NoiseModel, gain: float, *, sims: int = SIMS, blocks: int = BUDGET,
          seed: int, gap: float = 0.0, min_gain: float = MIN_GAIN) -> dict:
    r, d = nm.simulate_blocks(model, sims=sims, blocks=blocks, rounds=ROUNDS, gain_pct=gain,
                              reference_gap_pct=gap, seed=seed)
    code, stop = sq.decide_many(r, d, confidence=CONFIDENCE,
                                min_gain_log=sq.to_log_gain(min_gain, sq.HIGHER),
                                max_drift_log=sq.drift_log(MAX_DRIFT))
    decided = stop[stop > 0]
    return {"qualified": float(np.mean(code == 1)), "below": float(np.mean(code == 2)),
            "drift": float(np.mean(code == 3)), "inconclusive": float(np.mean(code == 0)),
            "not_qualified": float(np.mean((code == 2) | (code == 3))),
            "median_stop": float(np.median(decided)) if decided.size else None}


# ------------------------------------------------------------------ error rates under looks

@pytest.mark.parametrize("model", [nm.SHARED_VM, nm.HOSTILE], ids=lambda m: m.name)
def test_aa_false_qualification_within_alpha_looking_after_every_block(model, record_property):
    got = rates(model, 0.0, seed=11)
    record_property("aa_false_qualification", got["qualified"])
    print(f"\n{model.name} A/A over {SIMS} brackets x {BUDGET} looks: {got}")
    assert got["qualified"] <= ALPHA


def test_false_qualification_at_the_boundary_stays_within_alpha(record_property):
    # true gain == min_gain with symmetric noise: the largest error the sequence allows
    got = rates(nm.SYMMETRIC, MIN_GAIN, seed=12)
    record_property("boundary_false_qualification", got["qualified"])
    print(f"\nboundary (gain = min_gain) over {SIMS} brackets: {got}")
    assert got["qualified"] <= ALPHA + mc_slack(ALPHA, SIMS)
    assert got["below"] <= ALPHA + mc_slack(ALPHA, SIMS)


def test_sign_boundary_alone_crosses_under_fair_coins_at_most_alpha():
    # Ville's bound on the boundary itself: p = 1/2 indicators, looked at after each one
    rng = np.random.default_rng(5)
    n = 2000
    k = sq.critical_counts(n, ALPHA)[1:]
    crossed = 0
    for _ in range(5):
        hits = np.cumsum(rng.random((4000, n)) < 0.5, axis=1) >= k
        crossed += int(hits.any(axis=1).sum())
    rate = crossed / 20_000
    print(f"\nfair-coin crossing rate over 2000 looks: {rate:.4f}")
    assert rate <= ALPHA + mc_slack(ALPHA, 20_000)


@pytest.mark.parametrize("model", [nm.SHARED_VM, nm.SYMMETRIC], ids=lambda m: m.name)
def test_true_gain_of_5_5_pct_qualifies_within_budget(model, record_property):
    got = rates(model, 5.5, seed=13)
    record_property("qualified_at_5_5", got["qualified"])
    print(f"\n{model.name} +5.5% over {SIMS} brackets: {got}")
    assert got["qualified"] >= 0.95
    assert got["not_qualified"] <= ALPHA


def test_true_gain_of_5_5_pct_is_never_refused_beyond_alpha_even_on_a_hostile_host():
    got = rates(nm.HOSTILE, 5.5, seed=14)
    print(f"\nhostile +5.5%: {got}")
    assert got["not_qualified"] <= ALPHA   # power is low there; refusals stay rare
    assert got["inconclusive"] > got["qualified"]  # too noisy to tell is said as such


def test_gain_at_min_gain_is_mostly_inconclusive_and_rarely_refused():
    got = rates(nm.SYMMETRIC, MIN_GAIN, seed=15, blocks=40)
    print(f"\n+2% (= min_gain), 40 blocks: {got}")
    assert got["inconclusive"] >= 0.9
    assert got["below"] <= ALPHA + mc_slack(ALPHA, SIMS)
    assert got["qualified"] <= ALPHA + mc_slack(ALPHA, SIMS)


def test_no_gain_is_refused_given_blocks_enough():
    got = rates(nm.SHARED_VM, 0.0, seed=16, sims=2000, blocks=400)
    assert got["below"] >= 0.95
    assert got["qualified"] <= ALPHA


def test_references_that_disagree_beyond_max_drift_are_refused_not_credited():
    # B truly 12% slower than A: against their mean a no-gain candidate looks ~6% faster;
    # the drift side of the sequence refuses about three in four such brackets before the
    # gain side qualifies them (a known limit, docs/verdicts.md: the gain is measured against
    # the references' mean, so a reference broken beyond D can still credit the candidate)
    got = rates(nm.SHARED_VM, 0.0, seed=17, sims=2000, gap=12.0)
    print(f"\nA/A with B 12% slow: {got}")
    assert got["drift"] >= 0.7
    assert got["drift"] > 2 * got["qualified"]


def test_drift_the_paired_design_absorbs_never_gates():
    # a strong slow wave and random walk, common to all arms: the seed's drift % is large
    # but the blocks' reference drift is not, so no bracket is refused for drift
    model = nm.NoiseModel("wavy", wave_pct=30.0, drift_sd=0.05)
    values = nm.simulate_values(model, sims=2000, blocks=BUDGET, rounds=ROUNDS, gain_pct=5.5,
                                seed=18)
    seed_drift = np.abs(np.log(np.median(values[:, :, 0], axis=(1, 2)))
                        - np.log(np.median(values[:, :, 2], axis=(1, 2))))
    r, d = nm.block_logs(values)
    code, _ = sq.decide_many(r, d, confidence=CONFIDENCE, min_gain_log=sq.to_log_gain(2, "higher"),
                             max_drift_log=sq.drift_log(MAX_DRIFT))
    assert np.mean(code == 3) <= ALPHA
    assert np.mean(code == 1) >= 0.95
    assert np.median(seed_drift) > 0  # reported, not gated


# ------------------------------------------------------------------ the boundary itself

def test_mixture_matches_numeric_integration():
    for n, s in [(8, 8), (10, 9), (30, 20), (100, 60)]:
        direct = 2.0 ** (n + 1) * quad(lambda q: q ** s * (1 - q) ** (n - s), 0.5, 1.0)[0]
        assert math.exp(float(sq.log_mixture(n, s))) == pytest.approx(direct, rel=1e-9)


def test_critical_counts_are_the_least_rejecting_counts():
    k = sq.critical_counts(300, ALPHA)
    assert k[7] == 8 and k[8] == 8   # n < 8 cannot reject at 0.025: 2^8 / 9 < 40 < 2^9 / 10
    for n in (8, 9, 25, 120, 300):
        assert sq.log_mixture(n, k[n]) >= math.log(1 / ALPHA)
        assert sq.log_mixture(n, k[n] - 1) < math.log(1 / ALPHA)
    ratio = k[1:] / np.arange(1, 301)
    assert np.all(k[8:] <= np.arange(8, 301)) and ratio[-1] < 0.62


def test_mixture_is_a_martingale_under_fair_coins():
    # E[M_{n+1} | S_n] = M_n for p = 1/2 (the mixture of likelihood ratios)
    for n, s in [(5, 2), (20, 15), (50, 10)]:
        now = math.exp(float(sq.log_mixture(n, s)))
        nxt = 0.5 * math.exp(float(sq.log_mixture(n + 1, s + 1))) \
            + 0.5 * math.exp(float(sq.log_mixture(n + 1, s)))
        assert nxt == pytest.approx(now, rel=1e-9)


def test_beta_identity_of_the_mixture():
    # 1 - I_{1/2}(S+1, n-S+1) == I_{1/2}(n-S+1, S+1)
    n, s = 40, 27
    upper = beta_dist.sf(0.5, s + 1, n - s + 1)
    assert upper == pytest.approx(float(np.exp(sq.log_mixture(n, s))) / 2 ** (n + 1)
                                  / math.exp(math.lgamma(s + 1) + math.lgamma(n - s + 1)
                                             - math.lgamma(n + 2)), rel=1e-9)


# ------------------------------------------------------------------ one bracket, every look

def _blocks_from(values: np.ndarray, direction: str = "higher") -> list[sq.BlockStat]:
    return [sq.block_stat(i, v[0], v[1], v[2], direction) for i, v in enumerate(values)]


def test_decide_agrees_with_the_vectorised_core_and_its_bounds():
    values = nm.simulate_values(nm.SHARED_VM, sims=300, blocks=60, rounds=ROUNDS, gain_pct=4.0,
                                seed=21)
    r, d = nm.block_logs(values)
    code, stop = sq.decide_many(r, d, confidence=CONFIDENCE, min_gain_log=sq.to_log_gain(2, "higher"),
                                max_drift_log=sq.drift_log(MAX_DRIFT))
    names = {0: sq.INCONCLUSIVE, 1: sq.QUALIFIED, 2: sq.NOT_QUALIFIED, 3: sq.NOT_QUALIFIED}
    for i in range(300):
        v = sq.decide(_blocks_from(values[i]), direction="higher", confidence=CONFIDENCE,
                      min_gain_pct=2.0, max_drift_pct=MAX_DRIFT)
        assert v.decision == names[int(code[i])]
        assert (v.decided_at or 0) == int(stop[i])
        los = [lk.lo_pct for lk in v.looks if lk.lo_pct is not None]
        his = [lk.hi_pct for lk in v.looks if lk.hi_pct is not None]
        assert los == sorted(los) and his == sorted(his, reverse=True)   # running intersection
        for lk in v.looks[:-1]:
            assert lk.decision == sq.CONTINUE
        if v.decision == sq.QUALIFIED:
            assert v.looks[-1].lo_pct > 2.0 and v.reason == sq.REASON_QUALIFIED
        if v.reason == sq.REASON_BELOW:
            assert v.looks[-1].hi_pct < 2.0
        if v.decision == sq.INCONCLUSIVE:
            assert len(v.looks) == 60 and v.projection is not None


def test_lower_is_better_mirrors_higher_is_better():
    values = nm.simulate_values(nm.SHARED_VM, sims=1, blocks=50, rounds=ROUNDS, gain_pct=6.0,
                                seed=22)[0]
    up = sq.decide(_blocks_from(values, "higher"), direction="higher", confidence=CONFIDENCE,
                   min_gain_pct=2.0, max_drift_pct=MAX_DRIFT)
    times = 1e6 / values  # ms-like: lower is better, the same requests
    down = sq.decide(_blocks_from(times, "lower"), direction="lower", confidence=CONFIDENCE,
                     min_gain_pct=-sq.from_log_gain(-sq.to_log_gain(2.0, "higher"), "lower"),
                     max_drift_pct=MAX_DRIFT)
    assert up.decision == down.decision == sq.QUALIFIED
    assert up.decided_at == down.decided_at
    for a, b in zip(up.looks, down.looks):
        assert a.lo_pct is None or b.lo_pct == pytest.approx(
            sq.from_log_gain(sq.to_log_gain(a.lo_pct, "higher"), "lower"), rel=1e-9)


def test_confidence_and_min_gain_are_inputs():
    values = nm.simulate_values(nm.SYMMETRIC, sims=1, blocks=80, rounds=ROUNDS, gain_pct=5.5,
                                seed=23)[0]
    blocks = _blocks_from(values)
    strict = sq.decide(blocks, direction="higher", confidence=0.999, min_gain_pct=2.0,
                       max_drift_pct=None)
    loose = sq.decide(blocks, direction="higher", confidence=0.8, min_gain_pct=2.0,
                      max_drift_pct=None)
    high_bar = sq.decide(blocks, direction="higher", confidence=0.95, min_gain_pct=20.0,
                         max_drift_pct=None)
    assert loose.decided_at < strict.decided_at
    assert high_bar.decision == sq.NOT_QUALIFIED and high_bar.reason == sq.REASON_BELOW


def test_inconclusive_projects_the_blocks_that_would_likely_decide():
    values = nm.simulate_values(nm.SYMMETRIC, sims=1, blocks=10, rounds=ROUNDS, gain_pct=5.5,
                                seed=24)[0]
    v = sq.decide(_blocks_from(values)[:6], direction="higher", confidence=CONFIDENCE,
                  min_gain_pct=2.0, max_drift_pct=MAX_DRIFT)
    assert v.decision == sq.INCONCLUSIVE and v.reason == sq.REASON_BUDGET   # 6 < 8 blocks
    assert v.projection.blocks is not None and v.projection.blocks >= 8
    assert v.projection.decision == sq.QUALIFIED
    flat = sq.project(np.array([0.05, -0.05] * 20), confidence=CONFIDENCE,
                      min_gain_log=0.0)
    assert flat.blocks is None and "min_gain" in flat.reason


def test_blocks_after_the_decision_are_counted():
    values = nm.simulate_values(nm.SYMMETRIC, sims=1, blocks=80, rounds=ROUNDS, gain_pct=15.0,
                                seed=25)[0]
    v = sq.decide(_blocks_from(values), direction="higher", confidence=CONFIDENCE,
                  min_gain_pct=2.0, max_drift_pct=MAX_DRIFT)
    assert v.decision == sq.QUALIFIED and v.decided_at < 80
    assert v.blocks_after_decision == 80 - v.decided_at
    assert len(v.looks) == v.decided_at


def test_block_stat_rejects_empty_or_nonpositive_arms():
    with pytest.raises(ValueError, match="block 3: arm B has no measured values"):
        sq.block_stat(3, [1.0], [1.0], [], "higher")
    with pytest.raises(ValueError, match="finite and > 0"):
        sq.block_stat(0, [1.0], [0.0], [1.0], "higher")
    with pytest.raises(ValueError, match="direction"):
        sq.block_stat(0, [1.0], [1.0], [1.0], "faster")


# ------------------------------------------------------------------ recomputation for verify

def _recorded(v: sq.SequentialVerdict) -> list[dict]:
    return [{f: getattr(lk, f) for f in sq.LOOK_FIELDS} for lk in v.looks]


def test_a_faithful_record_has_no_mismatch_and_tampering_is_found():
    values = nm.simulate_values(nm.SYMMETRIC, sims=1, blocks=80, rounds=ROUNDS, gain_pct=8.0,
                                seed=26)[0]
    full = sq.decide(_blocks_from(values), direction="higher", confidence=CONFIDENCE,
                     min_gain_pct=2.0, max_drift_pct=MAX_DRIFT)
    blocks = _blocks_from(values)[:full.decided_at]   # the runner stops at the decision
    v = sq.decide(blocks, direction="higher", confidence=CONFIDENCE, min_gain_pct=2.0,
                  max_drift_pct=MAX_DRIFT)
    assert sq.check_recorded(_recorded(v), v.decision, v) == []
    assert [m.field for m in sq.check_recorded(_recorded(full), full.decision, full)] == [
        "blocks_after_decision"]
    # a decision that does not follow
    assert {m.field for m in sq.check_recorded(_recorded(v), sq.INCONCLUSIVE, v)} == {"decision"}
    # a bound edited at one look
    looks = _recorded(v)
    looks[-1]["lo_pct"] = 99.0
    bad = sq.check_recorded(looks, v.decision, v)
    assert [(m.look, m.field) for m in bad] == [(v.decided_at, "lo_pct")]
    # an early stop claimed before the samples allow it
    early = _recorded(v)[:5]
    early[-1]["decision"] = sq.QUALIFIED
    fields = {m.field for m in sq.check_recorded(early, sq.QUALIFIED, v)}
    assert "looks" in fields
    # samples edited after the fact: the recomputed verdict no longer matches the record
    edited = list(blocks)
    edited[0] = sq.block_stat(0, values[0][0], values[0][1] * 0.5, values[0][2], "higher")
    v2 = sq.decide(edited, direction="higher", confidence=CONFIDENCE, min_gain_pct=2.0,
                   max_drift_pct=MAX_DRIFT)
    assert sq.check_recorded(_recorded(v), v.decision, v2) != []


def test_scale_conversions_round_trip():
    for g in (-50.0, -2.0, 0.0, 2.0, 5.5, 80.0):
        for direction in ("higher", "lower"):
            assert sq.from_log_gain(sq.to_log_gain(g, direction), direction) == pytest.approx(g)
    with pytest.raises(ValueError):
        sq.to_log_gain(100.0, "lower")
    with pytest.raises(ValueError):
        sq.alpha_of(1.0)
