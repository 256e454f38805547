"""Resolution of prefill options: per-call args > constructor args > environment > defaults.

Environment parity with the upstream engine (DESIGN.md): DFLASH_DS4_EXACT_PREFILL_BANDS=1/0
turns exact bands on/off; LUCE_MMVQ_MAX_NCOLS=N caps the narrow-MMVQ width (1..8).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .errors import EngineError

ENV_BANDS = "DFLASH_DS4_EXACT_PREFILL_BANDS"
ENV_MMVQ = "LUCE_MMVQ_MAX_NCOLS"
ENV_TEST_SLOWDOWN = "DFLASH_DS4_TEST_SLOWDOWN_PCT"  # TEST ONLY: inflate prefill time by N %
MAX_TEST_SLOWDOWN_PCT = 1000.0
MAX_CHUNK = 4
MAX_MMVQ_NCOLS = 8
DEFAULT_MMVQ_NCOLS = 4
DEFAULT_BAND_CHUNK = 4
APPROX_WIDTH = 32  # approximate prefill step width (fixed steps through MMQ)
MODES = ("exact", "approximate")


def env_bands() -> bool | None:
    """DFLASH_DS4_EXACT_PREFILL_BANDS as a bool, None if unset; anything but "1"/"0" is an error."""
    raw = os.environ.get(ENV_BANDS)
    if raw is None:
        return None
    val = raw.strip()
    if val not in ("0", "1"):
        raise EngineError(f"environment variable {ENV_BANDS}={raw!r} is malformed: expected \"1\" or \"0\"")
    return val == "1"


def env_mmvq_max_ncols() -> int | None:
    """LUCE_MMVQ_MAX_NCOLS as an int 1..8, None if unset; malformed values are an error."""
    raw = os.environ.get(ENV_MMVQ)
    if raw is None:
        return None
    try:
        val = int(raw.strip(), 10)
    except ValueError:
        val = None
    if val is None or not 1 <= val <= MAX_MMVQ_NCOLS:
        raise EngineError(f"environment variable {ENV_MMVQ}={raw!r} is malformed: "
                          f"expected an integer 1..{MAX_MMVQ_NCOLS}")
    return val


def check_test_slowdown(pct: Any) -> float | None:
    """TEST ONLY prefill slowdown in percent (0..1000), None if not given."""
    if pct is None:
        return None
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= MAX_TEST_SLOWDOWN_PCT:
        raise EngineError(f"test_slowdown_pct must be a number 0..{MAX_TEST_SLOWDOWN_PCT:g}, got {pct!r}")
    return float(pct)


def env_test_slowdown_pct() -> float | None:
    """DFLASH_DS4_TEST_SLOWDOWN_PCT as a float 0..1000, None if unset or empty; malformed is an error."""
    raw = os.environ.get(ENV_TEST_SLOWDOWN)
    if raw is None or not raw.strip():
        return None
    try:
        val = float(raw.strip())
    except ValueError:
        val = -1.0
    if not 0 <= val <= MAX_TEST_SLOWDOWN_PCT:
        raise EngineError(f"environment variable {ENV_TEST_SLOWDOWN}={raw!r} is malformed: "
                          f"expected a number 0..{MAX_TEST_SLOWDOWN_PCT:g}")
    return val


def check_chunk(chunk: Any) -> int | None:
    if chunk is None:
        return None
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= MAX_CHUNK:
        raise EngineError(f"chunk must be an integer 1..{MAX_CHUNK}, got {chunk!r}")
    return chunk


def check_bands(bands: Any) -> bool | None:
    if bands is None or isinstance(bands, bool):
        return bands
    raise EngineError(f"bands must be True, False or None, got {bands!r}")


def check_mmvq(n: Any) -> int | None:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_MMVQ_NCOLS:
        raise EngineError(f"mmvq_max_ncols must be an integer 1..{MAX_MMVQ_NCOLS}, got {n!r}")
    return n


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise EngineError(f"mode must be one of {list(MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class PrefillPlan:
    """Effective prefill options after resolution."""

    bands: bool
    chunk: int           # max band width actually used (1 when bands are off)
    mmvq_max_ncols: int
    mode: str            # "exact" or "approximate"

    @property
    def approximate(self) -> bool:
        return self.mode == "approximate"


def resolve(*, call: dict[str, Any], ctor: dict[str, Any]) -> PrefillPlan:
    """Merge per-call and constructor options with the environment.

    bands: call > ctor > env DFLASH_DS4_EXACT_PREFILL_BANDS > (on exactly when chunk > 1).
    chunk: call > ctor > (4 when bands are on, else 1); 1..4. Bands off means chunk 1.
    mmvq_max_ncols: call > ctor > env LUCE_MMVQ_MAX_NCOLS > 4.
    """
    mode = check_mode(call.get("mode", "exact"))
    chunk = check_chunk(call.get("chunk"))
    if chunk is None:
        chunk = check_chunk(ctor.get("chunk"))
    bands = check_bands(call.get("bands"))
    if bands is None:
        bands = check_bands(ctor.get("bands"))
    env_b = env_bands()  # always parsed, so a malformed value is reported even when overridden
    if bands is None:
        bands = env_b
    if bands is None:
        bands = chunk is not None and chunk > 1
    if chunk is None:
        chunk = DEFAULT_BAND_CHUNK if bands else 1
    mmvq = check_mmvq(call.get("mmvq_max_ncols"))
    if mmvq is None:
        mmvq = check_mmvq(ctor.get("mmvq_max_ncols"))
    env_m = env_mmvq_max_ncols()
    if mmvq is None:
        mmvq = env_m if env_m is not None else DEFAULT_MMVQ_NCOLS
    return PrefillPlan(bands=bands, chunk=chunk if bands else 1, mmvq_max_ncols=mmvq, mode=mode)
