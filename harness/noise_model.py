"""Seeded simulated blocks with known truth for the sequential rule (tests, calibrate, bench).

Pure: settings and a seed in, numpy arrays out; no IO. A value is simulated on the log
scale as the sum of the hierarchy's levels (requests within processes within blocks), the
structure measured on the shared 2-core development VM (docs/verdicts.md):

    log v[sim, block, arm, round] = level(block, round)       machine state: slow drift
                                                              (random walk over blocks plus
                                                              a slow wave) and round noise,
                                                              shared by the arms of a round
                                  + position[arm's slot]      a small order effect inside a
                                                              round (the slots are shuffled
                                                              per block)
                                  + process[sim, block, arm]  the fresh process's lifelong
                                                              offset: N(0, process_sd), and
                                                              with probability slow_p a slow
                                                              state of about slow_pct
                                                              (lognormal size)
                                  + request noise             N(0, request_sd), and with
                                                              probability outlier_p a request
                                                              slowed by a preemption
                                  + effect                    log(1 + gain/100) on the
                                                              candidate (true, known)

Variance components as in a nested random-effects model (Searle, Casella & McCulloch 1992,
"Variance Components", ch. 3); the process level is what made in-process repetition useless
on the VM (a process ~10% slow for its whole life).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ARMS = ("A", "cand", "B")


@dataclass(frozen=True)
class NoiseModel:
    """One machine's noise, on the log scale (sd 0.02 is about 2%)."""

    name: str
    process_sd: float = 0.02
    slow_p: float = 0.10          # chance a fresh process lands in a slow state
    slow_pct: float = 10.0        # typical size of that state (lognormal around it)
    request_sd: float = 0.03
    outlier_p: float = 0.03       # chance one request is preempted
    outlier_pct: float = 30.0
    round_sd: float = 0.03        # machine state per round, shared by the arms
    drift_sd: float = 0.01        # random-walk step per block, shared by the arms
    wave_pct: float = 5.0         # amplitude of a slow wave over the bracket
    position_pct: tuple[float, float, float] = (-1.0, 0.0, 0.5)  # by slot inside a round


SHARED_VM = NoiseModel("shared-vm")
# every process ~10% lognormal off, more slow states and outliers: for validity, not power
HOSTILE = NoiseModel("hostile", process_sd=0.10, slow_p=0.15, slow_pct=20.0, request_sd=0.08,
                     outlier_p=0.10, outlier_pct=50.0, round_sd=0.08, drift_sd=0.03,
                     wave_pct=20.0)
# symmetric noise only (no one-sided slow states): its blocks' median gain is exactly the
# injected gain, so a test at gain == min_gain probes the sequence's error at its boundary
SYMMETRIC = NoiseModel("symmetric", slow_p=0.0, outlier_p=0.0, process_sd=0.03)

MODELS = {m.name: m for m in (SHARED_VM, HOSTILE, SYMMETRIC)}


def simulate_values(model: NoiseModel, *, sims: int, blocks: int, rounds: int, gain_pct: float,
                    reference_gap_pct: float = 0.0, seed: int) -> np.ndarray:
    """Measured values (higher is better, e.g. tok/s) of simulated brackets.

    Args:
        model: the noise model.
        sims: independent brackets.
        blocks: blocks per bracket.
        rounds: measured rounds per block (one request per arm per round).
        gain_pct: the candidate's true gain over the references, in percent.
        reference_gap_pct: B truly slower than A by this much (a broken reference).
        seed: numpy PCG64 seed.
    Returns:
        (sims, blocks, 3, rounds) array of values around 10,000, arms in ARMS order.
    """
    if sims < 1 or blocks < 1 or rounds < 1:
        raise ValueError("sims, blocks and rounds must be >= 1")
    rng = np.random.default_rng(seed)
    shape = (sims, blocks, 3, rounds)
    steps = rng.normal(0.0, model.drift_sd, size=(sims, blocks))
    phase = rng.uniform(0.0, 2.0 * math.pi, size=(sims, 1))
    wave = math.log1p(model.wave_pct / 100.0) * np.sin(
        phase + np.linspace(0.0, 2.0 * math.pi, blocks)[None, :])
    level = (np.cumsum(steps, axis=1) + wave)[:, :, None, None]
    level = level + rng.normal(0.0, model.round_sd, size=(sims, blocks, 1, rounds))
    slots = np.argsort(rng.random((sims, blocks, 3)), axis=2)     # arm -> slot, per block
    position = np.log1p(np.asarray(model.position_pct) / 100.0)[slots][..., None]
    process = rng.normal(0.0, model.process_sd, size=(sims, blocks, 3, 1))
    slow = rng.random((sims, blocks, 3, 1)) < model.slow_p
    slow_size = math.log1p(model.slow_pct / 100.0) * np.exp(
        rng.normal(0.0, 0.3, size=(sims, blocks, 3, 1)))
    process = process - np.where(slow, slow_size, 0.0)
    noise = rng.normal(0.0, model.request_sd, size=shape)
    out = rng.random(shape) < model.outlier_p
    noise = noise - np.where(out, math.log1p(model.outlier_pct / 100.0), 0.0)
    effect = np.zeros((1, 1, 3, 1))
    effect[0, 0, 1, 0] = math.log1p(gain_pct / 100.0)
    effect[0, 0, 2, 0] = -math.log1p(reference_gap_pct / 100.0)
    return 1e4 * np.exp(level + position + process + noise + effect)


def block_logs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """r and d (sequential.py) of every simulated block, higher is better.

    Args:
        values: (sims, blocks, 3, rounds) from simulate_values.
    Returns:
        (r, d), each (sims, blocks): log median cand - mean of log medians A and B, and
        log median A - log median B.
    """
    med = np.log(np.median(values, axis=3))
    a, c, b = med[..., 0], med[..., 1], med[..., 2]
    return c - (a + b) / 2.0, a - b


def simulate_blocks(model: NoiseModel, *, sims: int, blocks: int, rounds: int, gain_pct: float,
                    reference_gap_pct: float = 0.0, seed: int,
                    chunk: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """block_logs(simulate_values(...)) in chunks of `chunk` brackets (bounded memory).

    Chunk j is seeded with numpy SeedSequence(seed).spawn(...)[j], so the result depends on
    (seed, chunk) only. Returns (r, d), each (sims, blocks).
    """
    if sims < 1:
        raise ValueError("sims must be >= 1")
    parts = -(-sims // chunk)
    seeds = np.random.SeedSequence(seed).spawn(parts)
    rs, ds = [], []
    for j in range(parts):
        size = min(chunk, sims - j * chunk)
        sub = int(seeds[j].generate_state(1)[0])
        r, d = block_logs(simulate_values(model, sims=size, blocks=blocks, rounds=rounds,
                                          gain_pct=gain_pct, reference_gap_pct=reference_gap_pct,
                                          seed=sub))
        rs.append(r)
        ds.append(d)
    return np.concatenate(rs), np.concatenate(ds)
