"""Band scheduler, mirrored from csrc/model_scheduler.cpp (tests check the two agree)."""
from __future__ import annotations

from collections.abc import Sequence

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
    active = [r for r in ratios if r > 0]
    widths: list[int] = []
    pos, left = start, n_tokens
    while left > 0:
        w = min(chunk, left)
        for r in active:
            w = min(w, r - pos % r)
        w = max(w, 1)
        widths.append(w)
        pos += w
        left -= w
    return widths


def schedule_approximate(n_tokens: int, width: int) -> list[int]:
    """Approximate prefill: fixed steps of `width` tokens (shorter tail); may cross boundaries."""
    if n_tokens < 0 or width < 1:
        raise EngineError(f"schedule_approximate needs n_tokens >= 0 and width >= 1 (got {n_tokens}, {width})")
    full, tail = divmod(n_tokens, width)
    return [width] * full + ([tail] if tail else [])
