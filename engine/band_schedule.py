"""Band schedules: the checked Python face of the C++ scheduler (csrc/model_scheduler.cpp).

The schedule itself is computed once, in C++ (`_core.schedule_bands`), the code the engine
runs; this module only validates arguments (bindings hold no math and no validation).
"""
from __future__ import annotations

from collections.abc import Sequence

from . import _core
from .errors import EngineError


def schedule(start: int, n_tokens: int, chunk: int, ratios: Sequence[int]) -> list[int]:
    """Exact band widths for n_tokens starting at absolute position `start`.

    w = min(chunk, tokens_left, min over ratio > 0 of (ratio - pos % ratio)), at least 1, so a
    compressor boundary ((pos + 1) % ratio == 0) can only be the last token of a band.

    Args:
        start: absolute position of the first token (>= 0).
        n_tokens: tokens to schedule (>= 0).
        chunk: maximum band width (>= 1).
        ratios: compressor ratio per layer (0 = no compressor).
    Returns:
        The band widths in order; they sum to n_tokens.
    """
    if start < 0 or n_tokens < 0 or chunk < 1:
        raise EngineError(f"schedule needs start >= 0, n_tokens >= 0, chunk >= 1 (got {start}, {n_tokens}, {chunk})")
    return list(_core.schedule_bands(start, n_tokens, chunk, list(ratios)))


def schedule_approximate(n_tokens: int, width: int) -> list[int]:
    """Approximate prefill: fixed steps of `width` tokens (shorter tail); may cross boundaries."""
    if n_tokens < 0 or width < 1:
        raise EngineError(f"schedule_approximate needs n_tokens >= 0 and width >= 1 (got {n_tokens}, {width})")
    return list(_core.schedule_approximate(n_tokens, width))
