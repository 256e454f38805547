"""Sequential verdicts over blocks of fresh processes: per-block statistics, an anytime-valid
confidence sequence for the median paired gain, and the three-way decision at every look.

Pure: arrays in, frozen dataclasses out; no IO, no printing, no evidence imports.

The unit is the block (DESIGN.md "Statistics"): one fresh worker process per arm, a few
interleaved rounds inside. Requests inside one process share that process's speed offset,
so they are not independent; blocks are (close to). Each block gives one number,

    r_b = log(median cand_b) - (log(median A_b) + log(median B_b)) / 2      (higher is better)
    r_b = (log(median A_b) + log(median B_b)) / 2 - log(median cand_b)      (lower is better)

so r_b > 0 always means the candidate was better. Slow drift common to all arms of a block
cancels in r_b, and the arms' order is randomized per block, so position effects do not
accumulate. The paired gain estimated here is the median over blocks of r_b, as a percent:
higher is better: (exp(m) - 1) * 100; lower is better ("lower time %"): (1 - exp(-m)) * 100.

Why a sign-test (quantile) confidence sequence and not a mean-based one: the per-block values
are heavy-tailed on a shared host (a block whose process landed in a slow state moves r_b by
10% and more), and bounded-mean sequences (betting, empirical Bernstein) pay for the range
they must assume, which is far wider than the ~2% noise they must resolve. The median's
sequence needs only that, given the past, each block lands above its median with
probability at most 1/2 and below it with probability at most 1/2: no distribution, no
bound, no variance.

The sequence (one side; the other is its mirror image). For a threshold t, let
S_n(t) = #{b <= n : r_b > t}. If the blocks' median is at most t, each indicator is
Bernoulli(p <= 1/2) given the past, so for every q in [1/2, 1] the likelihood ratio
prod (q / (1/2))^x (( 1 - q) / (1/2))^(1 - x) is a nonnegative supermartingale, and so is
its mixture over q uniform on [1/2, 1] (Robbins 1970, "Statistical methods related to the
law of the iterated logarithm", Ann. Math. Statist. 41; the one-sided conjugate
beta-binomial mixture of Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2), section 3):

    M_n(S) = 2^(n+1) * integral_{1/2}^{1} q^S (1 - q)^(n - S) dq
           = 2^(n+1) * B(S + 1, n - S + 1) * I_{1/2}(n - S + 1, S + 1).

Ville's inequality (Ville 1939) gives P(exists n: M_n >= 1/a) <= a. M_n grows with S, so
the test rejects "median <= t" at look n exactly when S_n(t) >= k_n, the least S with
M_n(S) >= 1/a; inverting over t gives the lower bound L_n = the k_n-th largest of
r_1..r_n (Howard & Ramdas 2022, "Sequential estimation of quantiles with applications to
A/B-testing and best-arm identification", Bernoulli 28(3), the fixed-quantile sequence
from a Bernoulli boundary). The upper bound U_n is the k_n-th smallest. The running
intersection lo_n = max_{s<=n} L_s, hi_n = min_{s<=n} U_s holds for every n at once with
probability >= 1 - 2a, a = (1 - confidence) / 2: the harness may look after every block.

Decision at look n (min_gain g, max_drift D, both in percent, converted to the log scale):
  - NOT QUALIFIED ("references_disagree") when the same sequence on the per-block reference
    drift d_b = log(median A_b) - log(median B_b) lies wholly outside [-D', D']: A and B,
    the same configuration, differ beyond D with confidence. That is the only drift that
    gates: drift common to all arms of a block (a slow machine, a busy neighbour) is what
    the paired design absorbs, so the drift the seed reports is shown, never gated on.
  - QUALIFIED when lo_n > g (identical outputs and passed checks are decided elsewhere);
  - NOT QUALIFIED ("gain_below_min") when hi_n < g;
  - otherwise continue; when the blocks end undecided: INCONCLUSIVE, with the block count at
    which the observed rate would likely cross a boundary.
Error control: under any true median gain <= g, P(ever QUALIFIED) <= a; under a true median
gain >= g with references that agree within D, P(ever NOT QUALIFIED) <= 2a (gain side and
drift side). Both hold under continuous monitoring, for any stopping budget.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy.special import betainc, betaln
from scipy.stats import beta as beta_dist

HIGHER = "higher"
LOWER = "lower"

QUALIFIED = "QUALIFIED"
NOT_QUALIFIED = "NOT QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
CONTINUE = "continue"

# reason codes (stable: they travel into stats.json, JUnit and the step summary)
REASON_QUALIFIED = "lower_bound_above_min_gain"
REASON_BELOW = "gain_below_min"
REASON_DRIFT = "references_disagree"
REASON_BUDGET = "budget_exhausted"

METHOD = ("sign-test confidence sequence for the median of per-block log ratios "
          "(one-sided uniform beta-binomial mixture on [1/2, 1], Ville's inequality; "
          "Howard, Ramdas, McAuliffe & Sekhon 2021; Howard & Ramdas 2022)")

PROJECTION_CAP = 65_536    # blocks: beyond this no budget is "likely to decide"

# decision codes of the vectorised core
_CODE_CONTINUE, _CODE_QUALIFIED, _CODE_BELOW, _CODE_DRIFT = 0, 1, 2, 3


@dataclass(frozen=True)
class BlockStat:
    """One block's arm medians and its two statistics (log scale)."""

    index: int
    reference_a: float     # median of the block's A requests
    candidate: float       # median of the block's candidate requests
    reference_b: float     # median of the block's B requests
    r: float               # log gain of the block (> 0: candidate better)
    drift: float           # log(median A) - log(median B)


@dataclass(frozen=True)
class Look:
    """The state after block n: bounds of the median gain and drift, and the decision."""

    n: int
    gain_pct: float               # median over blocks 1..n of r, as a gain %
    lo_pct: float | None          # running lower bound (None: not yet informative)
    hi_pct: float | None          # running upper bound
    drift_pct: float              # median over blocks of d, as a percent of B
    drift_lo_pct: float | None
    drift_hi_pct: float | None
    above: int                    # blocks with r above min_gain
    below: int                    # blocks with r below min_gain
    needed: int | None            # k_n: how many on one side decide at this look
    decision: str                 # QUALIFIED | NOT QUALIFIED | continue
    reason: str | None


@dataclass(frozen=True)
class Projection:
    """How many blocks would likely decide an undecided sequence (or None with a reason)."""

    blocks: int | None
    decision: str | None          # the decision those blocks would likely give
    reason: str | None


@dataclass(frozen=True)
class SequentialVerdict:
    """The whole sequential verdict: settings, every look, the final decision."""

    method: str
    direction: str
    confidence: float
    min_gain_pct: float
    max_drift_pct: float | None
    blocks: tuple[BlockStat, ...]
    looks: tuple[Look, ...]
    decision: str                 # QUALIFIED | NOT QUALIFIED | INCONCLUSIVE
    reason: str
    decided_at: int | None        # the look that decided (None: INCONCLUSIVE)
    blocks_after_decision: int    # blocks recorded past the deciding look (should be 0)
    projection: Projection | None  # for INCONCLUSIVE only


@dataclass(frozen=True)
class Mismatch:
    """One way a recorded look history disagrees with the one recomputed from samples."""

    look: int | None
    field: str
    recorded: object
    recomputed: object


# ---------------------------------------------------------------------------- scales

def to_log_gain(gain_pct: float, direction: str) -> float:
    """A gain % as the log-ratio threshold r uses (inverse of from_log_gain).

    higher: log(1 + g/100); lower ("lower time %" g): -log(1 - g/100), g < 100.
    """
    _check_direction(direction)
    if direction == HIGHER:
        if gain_pct <= -100:
            raise ValueError(f"a higher-is-better gain must be > -100%, got {gain_pct}")
        return math.log1p(gain_pct / 100.0)
    if gain_pct >= 100:
        raise ValueError(f"a lower time % must be < 100%, got {gain_pct}")
    return -math.log1p(-gain_pct / 100.0)


def from_log_gain(r: float, direction: str) -> float:
    """A log ratio r as the gain % the report speaks (higher: e^r - 1; lower: 1 - e^-r)."""
    _check_direction(direction)
    return math.expm1(r) * 100.0 if direction == HIGHER else -math.expm1(-r) * 100.0


def drift_log(max_drift_pct: float) -> float:
    """A drift limit in percent as a bound on |log(A / B)| (log(1 + D/100))."""
    if max_drift_pct < 0:
        raise ValueError(f"max drift must be >= 0, got {max_drift_pct}")
    return math.log1p(max_drift_pct / 100.0)


# ---------------------------------------------------------------------------- blocks

def block_stat(index: int, reference_a: Sequence[float], candidate: Sequence[float],
               reference_b: Sequence[float], direction: str) -> BlockStat:
    """The block statistics of one block from its measured values (warm-ups excluded).

    Args:
        index: the block's number (0-based, schedule order).
        reference_a, candidate, reference_b: the block's measured values per arm (> 0).
        direction: "higher" or "lower" is better.
    Returns:
        BlockStat with the three sample medians, r (module docstring) and the drift
        d = log(median A) - log(median B).
    """
    _check_direction(direction)
    meds = []
    for name, values in (("A", reference_a), ("candidate", candidate), ("B", reference_b)):
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"block {index}: arm {name} has no measured values")
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"block {index}: arm {name} values must be finite and > 0")
        meds.append(float(np.median(arr)))
    a, c, b = meds
    ref = (math.log(a) + math.log(b)) / 2.0
    r = math.log(c) - ref if direction == HIGHER else ref - math.log(c)
    return BlockStat(index, a, c, b, r, math.log(a) - math.log(b))


# ---------------------------------------------------------------------------- boundary

def log_mixture(n: np.ndarray | int, s: np.ndarray | int) -> np.ndarray:
    """log M_n(S), the one-sided uniform-mixture sign-test martingale (module docstring).

    Args:
        n: looks (blocks so far), >= 1.
        s: successes (blocks on the tested side), 0..n.
    Returns:
        (n + 1) log 2 + log B(S + 1, n - S + 1) + log I_{1/2}(n - S + 1, S + 1).
    """
    n = np.asarray(n, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return ((n + 1.0) * math.log(2.0) + betaln(s + 1.0, n - s + 1.0)
                + np.log(betainc(n - s + 1.0, s + 1.0, 0.5)))


@lru_cache(maxsize=16)
def _critical_table(size: int, alpha: float) -> np.ndarray:
    """k_n for n = 0..size (read-only); see critical_counts."""
    n = np.arange(1, size + 1)
    # M_n grows with S: bisection on S for every n at once; k = n + 1 means "not reachable"
    lo = np.zeros(size, dtype=np.int64)           # log M(lo) < threshold (S = 0 never rejects)
    hi = n + 1                                    # sentinel: S = n + 1 "rejects"
    threshold = math.log(1.0 / alpha)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        ok = np.where(mid <= n, log_mixture(n, np.minimum(mid, n)) >= threshold, True)
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    table = np.concatenate([[0], hi]).astype(np.int64)   # index 0: no look
    table.flags.writeable = False
    return table


def critical_counts(n_max: int, alpha: float) -> np.ndarray:
    """k_n for n = 0..n_max: the least count on one side that rejects at look n.

    Args:
        n_max: the last look.
        alpha: the one-sided error of the boundary, in (0, 1).
    Returns:
        read-only int array of length n_max + 1; k[0] = 0 is a placeholder, k[n] = n + 1
        where no count rejects yet (too few blocks: n < 8 at alpha = 0.025). Computed once
        per alpha for a power-of-two table and sliced.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if n_max < 0:
        raise ValueError(f"n_max must be >= 0, got {n_max}")
    size = 1024
    while size < n_max:
        size *= 2
    return _critical_table(size, float(alpha))[: n_max + 1]


def alpha_of(confidence: float) -> float:
    """The one-sided error a = (1 - confidence) / 2 of each side of the sequence."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return (1.0 - confidence) / 2.0


# ---------------------------------------------------------------------------- decisions

def decide_many(r: np.ndarray, d: np.ndarray | None, *, confidence: float, min_gain_log: float,
                max_drift_log: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The stopping decision of many sequences at once (the core `decide` also runs).

    Args:
        r: (sims, n) block log gains in block order.
        d: (sims, n) block drifts, or None for no drift gate.
        confidence: two-sided level of the sequence.
        min_gain_log: g on the log scale (to_log_gain).
        max_drift_log: D on the log scale (drift_log), or None.
    Returns:
        (code, stop): per sequence the decision code (0 continue = undecided at the end,
        1 QUALIFIED, 2 NOT QUALIFIED gain below, 3 NOT QUALIFIED references disagree) and
        the 1-based look that decided it (0 when undecided). At one look refusal beats
        qualification, and the drift gate beats both.
    """
    r = np.atleast_2d(np.asarray(r, dtype=np.float64))
    sims, n = r.shape
    k = critical_counts(n, alpha_of(confidence))[1:]
    events = [(_CODE_DRIFT, None), (_CODE_BELOW, np.cumsum(r < min_gain_log, axis=1) >= k),
              (_CODE_QUALIFIED, np.cumsum(r > min_gain_log, axis=1) >= k)]
    if d is not None and max_drift_log is not None:
        d = np.atleast_2d(np.asarray(d, dtype=np.float64))
        if d.shape != r.shape:
            raise ValueError(f"drift shape {d.shape} differs from gain shape {r.shape}")
        events[0] = (_CODE_DRIFT, (np.cumsum(d > max_drift_log, axis=1) >= k)
                     | (np.cumsum(d < -max_drift_log, axis=1) >= k))
    first = np.full(sims, n + 1, dtype=np.int64)
    code = np.zeros(sims, dtype=np.int64)
    for c, hit in events:
        if hit is None or n == 0:
            continue
        when = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, n + 1)
        better = when < first   # strictly earlier: an earlier event in `events` wins ties
        first = np.where(better, when, first)
        code = np.where(better, c, code)
    return code, np.where(code == _CODE_CONTINUE, 0, first)


def decide(blocks: Sequence[BlockStat], *, direction: str, confidence: float,
           min_gain_pct: float, max_drift_pct: float | None) -> SequentialVerdict:
    """Every look of one sequential bracket and its verdict, from its blocks alone.

    Args:
        blocks: the block statistics in block order (block_stat).
        direction: "higher" or "lower" is better (must match the blocks').
        confidence: two-sided level of the confidence sequence, e.g. 0.95.
        min_gain_pct: the gate's minimum gain g (percent, the report's gain).
        max_drift_pct: the references' allowed disagreement D (percent), None: no drift gate.
    Returns:
        SequentialVerdict with one Look per block up to the deciding look (then the looks stop:
        the runner adds no block after a decision; any recorded later are counted in
        blocks_after_decision), the decision and its reason, and for INCONCLUSIVE the
        projected block count. A pure function of the blocks and the settings.
    """
    _check_direction(direction)
    alpha = alpha_of(confidence)
    g = to_log_gain(min_gain_pct, direction)
    dl = None if max_drift_pct is None else drift_log(max_drift_pct)
    r = np.array([b.r for b in blocks], dtype=np.float64)
    d = np.array([b.drift for b in blocks], dtype=np.float64)
    n_all = r.size
    k = critical_counts(n_all, alpha)
    looks: list[Look] = []
    lo, hi, dlo, dhi = -math.inf, math.inf, -math.inf, math.inf
    decision, reason, decided_at = INCONCLUSIVE, REASON_BUDGET, None
    code, stop = decide_many(r[None, :], d[None, :] if dl is not None else None,
                             confidence=confidence, min_gain_log=g, max_drift_log=dl)
    last = int(stop[0]) if code[0] != _CODE_CONTINUE else n_all
    for n in range(1, last + 1):
        xs, ds = np.sort(r[:n]), np.sort(d[:n])
        kn = int(k[n])
        if kn <= n:  # the k-th largest / k-th smallest (module docstring)
            lo, hi = max(lo, float(xs[n - kn])), min(hi, float(xs[kn - 1]))
            dlo, dhi = max(dlo, float(ds[n - kn])), min(dhi, float(ds[kn - 1]))
        look_decision, look_reason = CONTINUE, None
        if n == last and code[0] != _CODE_CONTINUE:
            look_decision, look_reason = {
                _CODE_QUALIFIED: (QUALIFIED, REASON_QUALIFIED),
                _CODE_BELOW: (NOT_QUALIFIED, REASON_BELOW),
                _CODE_DRIFT: (NOT_QUALIFIED, REASON_DRIFT)}[int(code[0])]
            decision, reason, decided_at = look_decision, look_reason, n
        looks.append(Look(
            n=n, gain_pct=from_log_gain(float(np.median(r[:n])), direction),
            lo_pct=_pct_or_none(lo, direction), hi_pct=_pct_or_none(hi, direction),
            drift_pct=math.expm1(float(np.median(d[:n]))) * 100.0,
            drift_lo_pct=None if math.isinf(dlo) else math.expm1(dlo) * 100.0,
            drift_hi_pct=None if math.isinf(dhi) else math.expm1(dhi) * 100.0,
            above=int(np.sum(r[:n] > g)), below=int(np.sum(r[:n] < g)),
            needed=kn if kn <= n else None, decision=look_decision, reason=look_reason))
    projection = project(r, confidence=confidence, min_gain_log=g) if decided_at is None else None
    return SequentialVerdict(METHOD, direction, confidence, float(min_gain_pct),
                     None if max_drift_pct is None else float(max_drift_pct),
                     tuple(blocks), tuple(looks), decision, reason, decided_at,
                     n_all - last if decided_at is not None else 0, projection)


def project(r: Sequence[float], *, confidence: float, min_gain_log: float) -> Projection:
    """The block count at which an undecided sequence would likely decide.

    Args:
        r: the block log gains so far.
        confidence: the sequence's level.
        min_gain_log: g on the log scale.
    Returns:
        The least N > n at which the expected count on one side, the observed count plus
        (N - n) times the side's rate estimated as (count + 1/2) / (n + 1) (Krichevsky &
        Trofimov 1981 add-half estimate, so a side never seen keeps a small rate), reaches
        k_N; with the decision it would give. None with a reason when neither side would
        within PROJECTION_CAP blocks (the gain sits at min_gain: no budget decides it).
    """
    x = np.asarray(r, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return Projection(None, None, "no blocks yet")
    k = critical_counts(PROJECTION_CAP, alpha_of(confidence))
    big = np.arange(n + 1, PROJECTION_CAP + 1)
    best: tuple[int, str] | None = None
    for count, decision in ((int(np.sum(x > min_gain_log)), QUALIFIED),
                            (int(np.sum(x < min_gain_log)), NOT_QUALIFIED)):
        rate = (count + 0.5) / (n + 1.0)
        reach = count + (big - n) * rate >= k[big]
        if reach.any():
            at = int(big[int(reach.argmax())])
            if best is None or at < best[0]:
                best = (at, decision)
    if best is None:
        return Projection(None, None, f"the blocks sit at min_gain: neither bound is likely to "
                                      f"cross it within {PROJECTION_CAP} blocks")
    return Projection(best[0], best[1], None)


def proportion_ci(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval of a binomial rate k / n (a verdict rate over brackets).

    Args:
        k: brackets with the outcome; n: brackets run (>= 1).
        confidence: e.g. 0.95.
    Returns:
        (low, high), the Clopper-Pearson interval (Clopper & Pearson 1934, Biometrika 26):
        beta quantiles (a/2; k, n - k + 1) and (1 - a/2; k + 1, n - k); 0 and 1 at the ends.
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    a = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta_dist.ppf(a / 2.0, k, n - k + 1))
    high = 1.0 if k == n else float(beta_dist.ppf(1.0 - a / 2.0, k + 1, n - k))
    return low, high


# ---------------------------------------------------------------------------- calibration

@dataclass(frozen=True)
class EffectRates:
    """How the rule answers simulated brackets with one true gain (calibrate)."""

    gain_pct: float
    simulations: int
    qualified: int
    not_qualified: int
    inconclusive: int
    median_blocks: float | None        # blocks to a verdict, over the decided brackets
    median_seconds: float | None       # median_blocks x seconds per block


def bootstrap_rates(r: Sequence[float], d: Sequence[float], gains_pct: Sequence[float], *,
                    direction: str, confidence: float, min_gain_pct: float,
                    max_drift_pct: float | None, max_blocks: int, seconds_per_block: float | None,
                    simulations: int, seed: int) -> list[EffectRates]:
    """The rule's answers on brackets resampled from real A/A blocks, per true gain.

    Args:
        r, d: the A/A blocks' log gains and drifts (block_stat), one pair per block.
        gains_pct: true gains to inject (in the report's gain %).
        direction, confidence, min_gain_pct, max_drift_pct: as for decide().
        max_blocks: the budget in blocks.
        seconds_per_block: measured wall time of one block (None: no time estimate).
        simulations: brackets per gain; seed: numpy PCG64 seed.
    Returns:
        Per gain: counts of QUALIFIED / NOT QUALIFIED / INCONCLUSIVE and the median blocks
        (and seconds) to a verdict. Each simulated bracket draws max_blocks (r, d) pairs
        with replacement from the A/A blocks (the nonparametric bootstrap of independent
        units: Efron 1979; Davison & Hinkley 1997, ch. 2) and adds the true log gain to r;
        the same draws serve every gain (common random numbers). A/A blocks carry the
        machine's real block-to-block noise; their own small spurious gain is kept, so the
        rates are those of this machine, not of an ideal one.
    """
    rr, dd = np.asarray(r, dtype=np.float64), np.asarray(d, dtype=np.float64)
    if rr.size == 0 or rr.size != dd.size:
        raise ValueError("need one drift per block and at least one block")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, rr.size, size=(simulations, max_blocks))
    out = []
    dl = None if max_drift_pct is None else drift_log(max_drift_pct)
    g = to_log_gain(min_gain_pct, direction)
    for gain in gains_pct:
        code, stop = decide_many(rr[idx] + to_log_gain(gain, direction), dd[idx],
                                 confidence=confidence, min_gain_log=g, max_drift_log=dl)
        decided = stop[stop > 0]
        med = float(np.median(decided)) if decided.size else None
        out.append(EffectRates(float(gain), simulations, int(np.sum(code == _CODE_QUALIFIED)),
                               int(np.sum((code == _CODE_BELOW) | (code == _CODE_DRIFT))),
                               int(np.sum(code == _CODE_CONTINUE)), med,
                               None if med is None or seconds_per_block is None
                               else med * seconds_per_block))
    return out


# ---------------------------------------------------------------------------- records

def gate_settings(protocol: dict) -> dict:
    """decide()'s settings from a resolved protocol: direction and the gate's confidence,
    min_gain_pct and max_drift_pct."""
    gate = protocol["gate"]
    return {"direction": protocol["direction"], "confidence": gate["confidence"],
            "min_gain_pct": gate["min_gain_pct"], "max_drift_pct": gate["max_drift_pct"]}


def blocks_from_records(records: Sequence[dict], *, reference_a: str, candidate: str,
                        reference_b: str, direction: str) -> list[BlockStat]:
    """The block statistics of a sequential bracket's sample records.

    Args:
        records: samples.jsonl records (warm-ups and failed requests are skipped); each
            measured record carries `block`, the block of fresh workers it ran in.
        reference_a, candidate, reference_b: the arm ids.
        direction: "higher" or "lower".
    Returns:
        One BlockStat per block, in block order (a block lacking an arm raises ValueError).
    """
    cells: dict[int, dict[str, list[float]]] = {}
    for rec in sorted(records, key=lambda x: x.get("seq", 0)):
        if rec.get("phase") != "measured" or rec.get("ok", True) is False:
            continue
        block = rec.get("block")
        if not isinstance(block, int) or isinstance(block, bool):
            raise ValueError(f"measured record seq {rec.get('seq')} has no block number")
        cells.setdefault(block, {}).setdefault(rec["arm"], []).append(float(rec["value"]))
    return [block_stat(b, cells[b].get(reference_a, []), cells[b].get(candidate, []),
                       cells[b].get(reference_b, []), direction) for b in sorted(cells)]


def look_json(look: Look) -> dict:
    """A Look as the JSON record looks.jsonl and stats.json carry."""
    return {"n": look.n, "gain_pct": look.gain_pct, "lo_pct": look.lo_pct, "hi_pct": look.hi_pct,
            "drift_pct": look.drift_pct, "drift_lo_pct": look.drift_lo_pct,
            "drift_hi_pct": look.drift_hi_pct, "above": look.above, "below": look.below,
            "needed": look.needed, "decision": look.decision, "reason": look.reason}


def verdict_json(v: SequentialVerdict) -> dict:
    """The whole sequential verdict as stats.json's `sequential` table."""
    return {
        "method": v.method, "direction": v.direction, "confidence": v.confidence,
        "alpha_per_side": alpha_of(v.confidence), "min_gain_pct": v.min_gain_pct,
        "max_drift_pct": v.max_drift_pct,
        "blocks": [{"block": b.index, "reference_a_median": b.reference_a,
                    "candidate_median": b.candidate, "reference_b_median": b.reference_b,
                    "r": b.r, "gain_pct": from_log_gain(b.r, v.direction),
                    "drift_pct": math.expm1(b.drift) * 100.0} for b in v.blocks],
        "looks": [look_json(lk) for lk in v.looks],
        "decision": v.decision, "reason": v.reason, "decided_at": v.decided_at,
        "blocks_after_decision": v.blocks_after_decision,
        "projection": None if v.projection is None else {
            "blocks": v.projection.blocks, "decision": v.projection.decision,
            "reason": v.projection.reason},
    }


# ---------------------------------------------------------------------------- verification

LOOK_FIELDS = ("n", "lo_pct", "hi_pct", "decision", "reason")


def check_recorded(recorded_looks: Sequence[dict], recorded_decision: str,
                   recomputed: SequentialVerdict, *, rel_tol: float = 1e-9) -> list[Mismatch]:
    """Where a recorded look history does not follow from the samples it was recorded with.

    Args:
        recorded_looks: the evidence's looks, dicts with at least LOOK_FIELDS.
        recorded_decision: the evidence's final decision.
        recomputed: decide() on the evidence's raw samples.
        rel_tol: relative tolerance for the recorded bounds (JSON round trips floats exactly;
            the tolerance only absorbs platform libm differences in log/exp).
    Returns:
        Every mismatch (empty when the record follows): the number of looks, each look's
        n, bounds, decision and reason, the final decision, and blocks recorded after the
        deciding look.
    """
    out: list[Mismatch] = []
    if recorded_decision != recomputed.decision:
        out.append(Mismatch(None, "decision", recorded_decision, recomputed.decision))
    if recomputed.blocks_after_decision:
        out.append(Mismatch(recomputed.decided_at, "blocks_after_decision",
                            0, recomputed.blocks_after_decision))
    if len(recorded_looks) != len(recomputed.looks):
        out.append(Mismatch(None, "looks", len(recorded_looks), len(recomputed.looks)))
    for rec, look in zip(recorded_looks, recomputed.looks):
        for name in LOOK_FIELDS:
            got, want = (rec.get(name) if isinstance(rec, dict) else None), getattr(look, name)
            if not _same(got, want, rel_tol):
                out.append(Mismatch(look.n, name, got, want))
    return out


def _same(a: object, b: object, rel_tol: float) -> bool:
    if isinstance(b, float) and isinstance(a, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), b, rel_tol=rel_tol, abs_tol=1e-12)
    return a == b


def _pct_or_none(x: float, direction: str) -> float | None:
    return None if math.isinf(x) else from_log_gain(x, direction)


def _check_direction(direction: str) -> None:
    if direction not in (HIGHER, LOWER):
        raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
