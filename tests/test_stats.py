"""harness.stats against hand-computed fixtures (every expected number is worked out in a comment)."""
from __future__ import annotations

import math

import pytest

from dflash_qualify.harness import stats

# The bracket fixture used throughout (also reproduced by `analyze` in test_analyze_cli.py):
# A    = 10.0 10.2 9.8 10.0 10.4  sorted 9.8 10.0 10.0 10.2 10.4 -> median 10.0
#        |x - 10.0| = 0 .2 .2 0 .4 sorted 0 0 .2 .2 .4           -> MAD 0.2
# B    = 10.1 10.3 10.1 10.5 10.2 sorted 10.1 10.1 10.2 10.3 10.5 -> median 10.2
#        |x - 10.2| = .1 .1 .1 .3 0 sorted 0 .1 .1 .1 .3          -> MAD 0.1
# pooled A+B sorted 9.8 10.0 10.0 10.1 10.1 | 10.2 10.2 10.3 10.4 10.5 -> median (10.1+10.2)/2 = 10.15
# cand = 12.18 12.0 12.3 12.18 12.5 sorted 12.0 12.18 12.18 12.3 12.5 -> median 12.18
#        |x - 12.18| = 0 .18 .12 0 .32 sorted 0 0 .12 .18 .32     -> MAD 0.12
# gain  = (12.18 / 10.15 - 1) * 100 = (1.2 - 1) * 100 = 20.0 %
# drift = |10.0 - 10.2| / 10.15 * 100 = 0.2 / 10.15 * 100 = 1.97044...%
A = [10.0, 10.2, 9.8, 10.0, 10.4]
B = [10.1, 10.3, 10.1, 10.5, 10.2]
CAND = [12.18, 12.0, 12.3, 12.18, 12.5]


@pytest.mark.parametrize("values, median, mad", [
    ([3.0, 1.0, 2.0], 2.0, 1.0),            # odd: median 2; |d| = 1 1 0 -> sorted 0 1 1 -> 1
    ([1.0, 2.0, 3.0, 4.0], 2.5, 1.0),       # even: (2+3)/2; |d| = 1.5 .5 .5 1.5 -> (0.5+1.5)/2 = 1
    ([5.0, 5.0, 5.0, 7.0], 5.0, 0.0),       # ties: median 5; |d| = 0 0 0 2 -> median 0
    ([4.0, 4.0, 4.0], 4.0, 0.0),            # identical: MAD 0
    ([7.5], 7.5, 0.0),                      # one sample
    (A, 10.0, 0.2), (B, 10.2, 0.1), (CAND, 12.18, 0.12),
])
def test_summarize_hand_computed(values, median, mad):
    s = stats.summarize(values)
    assert s.n == len(values)
    assert s.median == pytest.approx(median, abs=1e-12)
    assert s.mad == pytest.approx(mad, abs=1e-12)
    assert s.values == tuple(values)


def test_summarize_empty_is_none_not_nan():
    s = stats.summarize([])
    assert (s.n, s.median, s.mad) == (0, None, None)


def test_summarize_rejects_non_finite():
    with pytest.raises(ValueError, match="finite"):
        stats.summarize([1.0, math.nan])


def test_gain_higher_and_lower_is_better():
    assert stats.gain_pct(12.18, 10.15, "higher") == pytest.approx(20.0)
    # lower is better: ms 8.12 vs 10.15 -> (1 - 8.12 / 10.15) * 100 = (1 - 0.8) * 100 = 20 %
    assert stats.gain_pct(8.12, 10.15, "lower") == pytest.approx(20.0)
    # a slower candidate is a negative number in both directions
    assert stats.gain_pct(9.0, 10.0, "higher") == pytest.approx(-10.0)
    assert stats.gain_pct(11.0, 10.0, "lower") == pytest.approx(-10.0)
    with pytest.raises(ValueError, match="direction"):
        stats.gain_pct(1.0, 1.0, "sideways")


def test_drift_hand_computed():
    assert stats.drift_pct(10.0, 10.2, 10.15) == pytest.approx(0.2 / 10.15 * 100)
    assert stats.drift_pct(10.2, 10.0, 10.15) == pytest.approx(1.9704433497536946)


def test_compare_bracket_fixture():
    c = stats.compare([A, B], CAND, "higher", confidence=0.95, resamples=2000, seed=0)
    assert c.reference.n == 10 and c.reference.median == pytest.approx(10.15)
    assert c.candidate.median == pytest.approx(12.18)
    assert c.gain_pct == pytest.approx(20.0)
    assert c.drift_pct == pytest.approx(1.9704433497536946)
    assert c.ci.low is not None and c.ci.low <= c.gain_pct <= c.ci.high
    assert c.ci.low > 0  # candidate values are all above every reference value
    # every candidate value exceeds every reference value: U = 5 * 10 = 50
    assert c.rank_test.u == 50.0 and c.rank_test.p_value < 0.01


def test_compare_single_reference_has_no_drift():
    c = stats.compare([A], CAND, "higher", confidence=0.95, resamples=100, seed=0)
    assert c.drift_pct is None and "two reference arms" in c.drift_reason
    assert c.reference.median == 10.0


def test_bootstrap_is_seeded_and_reproducible():
    kw = dict(confidence=0.95, resamples=500)
    one = stats.bootstrap_gain_ci(CAND, A + B, "higher", seed=7, **kw)
    two = stats.bootstrap_gain_ci(CAND, A + B, "higher", seed=7, **kw)
    other = stats.bootstrap_gain_ci(CAND, A + B, "higher", seed=8, **kw)
    assert one == two
    assert (one.low, one.high) != (other.low, other.high)


def test_bootstrap_identical_samples_is_degenerate_not_nan():
    # cand all 2, ref all 1: every resample median ratio is 2 -> gain 100 % exactly
    ci = stats.bootstrap_gain_ci([2.0, 2.0, 2.0], [1.0, 1.0], "higher", confidence=0.95, resamples=200, seed=0)
    assert (ci.low, ci.high, ci.degenerate, ci.reason) == (100.0, 100.0, True, None)


def test_bootstrap_one_sample_gives_reason():
    ci = stats.bootstrap_gain_ci([2.0], [1.0, 1.1], "higher", confidence=0.95, resamples=200, seed=0)
    assert ci.low is None and ci.high is None
    assert ci.reason == "needs at least 2 measured values on each side (candidate 1, reference 2)"


def test_rank_test_hand_computed():
    # cand 4 5 6 vs ref 1 2 3: every pair favours cand, U = 9; exact two-sided
    # p = 2 * P(U = 9) = 2 * 1 / C(6, 3) = 2 / 20 = 0.1
    r = stats.rank_test([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])
    assert r.u == 9.0 and r.p_value == pytest.approx(0.1)


def test_rank_test_all_tied_and_empty():
    assert stats.rank_test([1.0, 1.0], [1.0, 1.0]).p_value == pytest.approx(1.0)
    empty = stats.rank_test([], [1.0])
    assert empty.p_value is None and "at least 1" in empty.reason


def test_median_ci_order_statistics_and_exact_coverage():
    """n = 9 at 95%: [x(2), x(8)] with coverage 1 - 2 * (1 + 9) / 512 (Binomial(9, 1/2))."""
    ci = stats.median_ci([9, 1, 8, 2, 7, 3, 6, 4, 5], 0.95)
    assert (ci.n, ci.median, ci.low, ci.high) == (9, 5.0, 2.0, 8.0)
    assert ci.coverage == pytest.approx(1 - 2 * 10 / 512)
    assert ci.reason is None
    ci = stats.median_ci(range(1, 21), 0.95)  # n = 20: [x(6), x(15)], coverage 0.9586
    assert (ci.low, ci.high) == (6.0, 15.0) and ci.coverage == pytest.approx(0.958611, abs=1e-6)


def test_median_ci_too_few_values_keeps_the_median_and_says_why():
    ci = stats.median_ci([3.0, 1.0, 2.0, 5.0, 4.0], 0.95)  # best possible coverage 1 - 2/32
    assert ci.median == 3.0 and ci.low is None and ci.high is None and ci.coverage is None
    assert "too few" in ci.reason
    assert stats.median_ci([], 0.95).reason == "no values"
    with pytest.raises(ValueError, match="confidence"):
        stats.median_ci([1.0, 2.0], 1.5)
