"""Pure statistics for qualification: medians, MAD, gain, drift, bootstrap CI, rank tests,
order-statistic CI of a median.

Arrays in, frozen dataclasses out; no IO, no printing, no evidence imports. Every
definition follows DESIGN.md "Statistics" (binding); each function cites its method.
Undefined quantities are None together with a `reason` string, never NaN, because the
results travel into JSON (which has no NaN) and into reviewers' hands.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import binom, mannwhitneyu, median_abs_deviation, wilcoxon

HIGHER = "higher"
LOWER = "lower"
DIRECTIONS = (HIGHER, LOWER)


@dataclass(frozen=True)
class Summary:
    """Location and spread of one set of measured values."""

    n: int
    median: float | None
    mad: float | None
    values: tuple[float, ...]


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap confidence interval of the gain (or None with a reason)."""

    confidence: float
    low: float | None
    high: float | None
    resamples: int
    seed: int
    degenerate: bool          # every resample gave the same gain (no spread in the data)
    reason: str | None        # why low/high are None


@dataclass(frozen=True)
class MedianInterval:
    """Distribution-free confidence interval of a median (or None with a reason)."""

    n: int
    median: float | None
    low: float | None
    high: float | None
    coverage: float | None  # the interval's exact coverage (>= the confidence asked for)
    reason: str | None


@dataclass(frozen=True)
class RankTest:
    """Two-sided Mann-Whitney U test, candidate vs pooled reference (or None with a reason)."""

    u: float | None
    p_value: float | None
    reason: str | None


@dataclass(frozen=True)
class PairedTest:
    """Two-sided Wilcoxon signed-rank test on paired values (or None with a reason)."""

    n: int                      # pairs
    statistic: float | None
    p_value: float | None
    reason: str | None


@dataclass(frozen=True)
class Comparison:
    """Candidate vs pooled reference for one metric: the numbers the verdict rests on."""

    direction: str
    reference: Summary
    candidate: Summary
    gain_pct: float | None
    gain_reason: str | None
    drift_pct: float | None
    drift_reason: str | None
    ci: Interval
    rank_test: RankTest


def _as_array(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-D sequence of numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("values must be finite numbers")
    return arr


def summarize(values: Sequence[float]) -> Summary:
    """Median and raw MAD of measured values.

    Args:
        values: measured values (warm-ups already excluded), finite.
    Returns:
        Summary with the sample median and the unscaled median absolute deviation
        (Hampel 1974; scipy.stats.median_abs_deviation with scale=1). For no values,
        median and mad are None. One value has MAD 0.
    """
    arr = _as_array(values)
    if arr.size == 0:
        return Summary(0, None, None, ())
    median = float(np.median(arr))
    mad = float(median_abs_deviation(arr, scale=1.0))
    return Summary(int(arr.size), median, mad, tuple(float(v) for v in arr))


def gain_pct(candidate_median: float, reference_median: float, direction: str) -> float:
    """Relative improvement of the candidate over the reference, in percent.

    Args:
        candidate_median: candidate's median (> 0).
        reference_median: pooled reference median (> 0).
        direction: "higher" (e.g. tok/s) or "lower" (e.g. ms) is better.
    Returns:
        DESIGN.md: higher-is-better gain % = (cand / ref - 1) * 100; lower-is-better
        "lower time %" = (1 - cand / ref) * 100. Positive always means the candidate is better.
    """
    _check_direction(direction)
    if reference_median <= 0 or candidate_median <= 0:
        raise ValueError("medians must be > 0 for a relative gain")
    ratio = candidate_median / reference_median
    return (ratio - 1.0) * 100.0 if direction == HIGHER else (1.0 - ratio) * 100.0


def drift_pct(median_a: float, median_b: float, pooled_reference_median: float) -> float:
    """Bracket drift: how far the two reference brackets disagree, in percent.

    Args:
        median_a: median of the first reference arm.
        median_b: median of the last reference arm.
        pooled_reference_median: median of all reference samples together (> 0).
    Returns:
        DESIGN.md: |median A - median B| / pooled reference median * 100.
    """
    if pooled_reference_median <= 0:
        raise ValueError("pooled reference median must be > 0")
    return abs(median_a - median_b) / pooled_reference_median * 100.0


def bootstrap_gain_ci(candidate: Sequence[float], reference: Sequence[float], direction: str, *,
                      confidence: float, resamples: int, seed: int) -> Interval:
    """Seeded percentile bootstrap CI of the gain %.

    Args:
        candidate: candidate measured values (> 0).
        reference: pooled reference measured values (> 0).
        direction: "higher" or "lower", as for gain_pct.
        confidence: e.g. 0.95.
        resamples: number of bootstrap resamples B.
        seed: seed of numpy's PCG64 generator, so the interval is reproducible.
    Returns:
        The percentile interval (Efron & Tibshirani 1993, "An Introduction to the
        Bootstrap", ch. 13): candidate and reference are resampled independently with
        replacement, the gain of the two resample medians is computed B times, and the
        (1-c)/2 and (1+c)/2 quantiles (numpy "linear", Hyndman & Fan type 7) bound it.
        Fewer than 2 values on either side gives None with a reason: one value has no
        sampling spread to resample.
    """
    _check_direction(direction)
    cand, ref = _as_array(candidate), _as_array(reference)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if cand.size < 2 or ref.size < 2:
        return Interval(confidence, None, None, resamples, seed, False,
                        f"needs at least 2 measured values on each side "
                        f"(candidate {cand.size}, reference {ref.size})")
    if np.any(cand <= 0) or np.any(ref <= 0):
        raise ValueError("values must be > 0 for a relative gain")
    rng = np.random.default_rng(seed)
    cand_idx = rng.integers(0, cand.size, size=(resamples, cand.size))
    ref_idx = rng.integers(0, ref.size, size=(resamples, ref.size))
    ratio = np.median(cand[cand_idx], axis=1) / np.median(ref[ref_idx], axis=1)
    gains = (ratio - 1.0) * 100.0 if direction == HIGHER else (1.0 - ratio) * 100.0
    alpha = 1.0 - confidence
    low, high = np.quantile(gains, [alpha / 2.0, 1.0 - alpha / 2.0])
    degenerate = bool(np.all(gains == gains[0]))
    return Interval(confidence, float(low), float(high), resamples, seed, degenerate, None)


def median_ci(values: Sequence[float], confidence: float = 0.95) -> MedianInterval:
    """Order-statistic confidence interval of the median, no distribution assumed.

    Args:
        values: independent measured values (e.g. per-round paired ratios).
        confidence: the least coverage wanted, e.g. 0.95.
    Returns:
        [x(r), x(n-r+1)] of the sorted values for the largest r whose exact coverage
        P(r <= B <= n - r), B ~ Binomial(n, 1/2), is at least `confidence` (Conover 1999,
        "Practical Nonparametric Statistics", 3rd ed., section 3.2, the quantile test's
        confidence interval), with that coverage. Too few values for any such r (n < 6 at
        0.95) gives None bounds with a reason; the median is still reported.
    """
    x = np.sort(_as_array(values))
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n = int(x.size)
    if n == 0:
        return MedianInterval(0, None, None, None, None, "no values")
    med = float(np.median(x))
    r, coverage = 0, None  # coverage shrinks as r grows: stop at the first r that falls short
    for k in range(1, n // 2 + 1):
        c = float(binom.cdf(n - k, n, 0.5) - binom.cdf(k - 1, n, 0.5))
        if c < confidence:
            break
        r, coverage = k, c
    if r == 0:
        return MedianInterval(n, med, None, None, None,
                              f"{n} values are too few for a {confidence:.0%} interval of the median")
    return MedianInterval(n, med, float(x[r - 1]), float(x[n - r]), coverage, None)


def rank_test(candidate: Sequence[float], reference: Sequence[float]) -> RankTest:
    """Two-sided Mann-Whitney U test of candidate vs pooled reference.

    Args:
        candidate: candidate measured values.
        reference: pooled reference measured values.
    Returns:
        U statistic of the candidate and the two-sided p-value (Mann & Whitney 1947;
        scipy.stats.mannwhitneyu, method "auto": exact for small samples without ties,
        normal approximation with tie correction otherwise). An empty side gives None.
    """
    cand, ref = _as_array(candidate), _as_array(reference)
    if cand.size == 0 or ref.size == 0:
        return RankTest(None, None, "needs at least 1 measured value on each side")
    result = mannwhitneyu(cand, ref, alternative="two-sided")
    u, p = float(result.statistic), float(result.pvalue)
    if math.isnan(p):
        return RankTest(u, None, "rank test undefined for these values")
    return RankTest(u, p, None)


def paired_test(candidate: Sequence[float], reference: Sequence[float]) -> PairedTest:
    """Two-sided Wilcoxon signed-rank test on candidate - reference pairs.

    Args:
        candidate: the candidate value of each pair.
        reference: the reference value of each pair (same length, same order).
    Returns:
        The signed-rank statistic and two-sided p-value (Wilcoxon 1945, "Individual
        comparisons by ranking methods"; scipy.stats.wilcoxon with zero_method "wilcox":
        zero differences are dropped, method "auto": exact null distribution for small
        samples without ties, normal approximation otherwise). No pairs, or only zero
        differences, gives None with a reason.
    """
    cand, ref = _as_array(candidate), _as_array(reference)
    if cand.size != ref.size:
        raise ValueError(f"paired values differ in length ({cand.size} vs {ref.size})")
    if cand.size == 0:
        return PairedTest(0, None, None, "no pairs")
    if not np.any(cand - ref != 0):
        return PairedTest(int(cand.size), None, None, "every pair difference is zero")
    result = wilcoxon(cand, ref, zero_method="wilcox", alternative="two-sided")
    stat, p = float(result.statistic), float(result.pvalue)
    if math.isnan(p) or math.isnan(stat):
        return PairedTest(int(cand.size), None, None, "signed-rank test undefined for these values")
    return PairedTest(int(cand.size), stat, p, None)


def compare(reference_arms: Sequence[Sequence[float]], candidate: Sequence[float], direction: str, *,
            confidence: float, resamples: int, seed: int) -> Comparison:
    """Everything DESIGN.md reports for one candidate against its reference arm(s).

    Args:
        reference_arms: measured values of each reference arm in schedule order; all are
            pooled, and drift compares the first with the last (needs 2 or more arms).
        candidate: candidate measured values.
        direction: "higher" or "lower".
        confidence, resamples, seed: bootstrap settings (see bootstrap_gain_ci).
    Returns:
        Comparison with summaries, gain %, drift %, CI and rank test; quantities that
        cannot be computed are None with a reason.
    """
    _check_direction(direction)
    pooled_values = [v for arm in reference_arms for v in arm]
    ref = summarize(pooled_values)
    cand = summarize(candidate)
    gain, gain_reason = None, None
    if ref.median is None or cand.median is None:
        gain_reason = "no measured values for the " + ("reference" if ref.median is None else "candidate")
    else:
        gain = gain_pct(cand.median, ref.median, direction)
    drift, drift_reason = None, None
    if len(reference_arms) < 2:
        drift_reason = "needs two reference arms (A and B)"
    else:
        first, last = summarize(reference_arms[0]), summarize(reference_arms[-1])
        if first.median is None or last.median is None or ref.median is None:
            drift_reason = "a reference arm has no measured values"
        else:
            drift = drift_pct(first.median, last.median, ref.median)
    ci = bootstrap_gain_ci(cand.values, ref.values, direction, confidence=confidence,
                           resamples=resamples, seed=seed)
    return Comparison(direction, ref, cand, gain, gain_reason, drift, drift_reason, ci,
                      rank_test(cand.values, ref.values))


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
