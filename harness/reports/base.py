"""Shared pieces of the reporters: the input they render and number formatting."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReportInput:
    """Everything a reporter may read: the evidence files' content (no IO happens in reporters)."""

    protocol: dict
    environment: dict
    stats: dict
    samples: list
    manifest_sha: str | None
    path: Path | None = None
    in_evidence: bool = True   # False for `analyze`: no evidence directory, no manifest line


def fmt_value(x: float | None, decimals: int) -> str:
    """A measured value or median with `decimals` places, one more when needed to stay exact.

    The median of an even count is the mean of two values and can need one more decimal
    than the inputs (16.695 and 16.698 -> 16.6965); it is shown exactly rather than rounded.
    """
    if x is None:
        return "n/a"
    for d in (decimals, decimals + 1):
        if abs(x - round(x, d)) <= 1e-9 * max(1.0, abs(x)):
            return f"{x:.{d}f}"
    return f"{x:.{decimals}f}"


def fmt_pct(x: float | None) -> str:
    """A percentage with two decimals ("n/a" when undefined)."""
    return "n/a" if x is None else f"{x:.2f}%"


def fmt_p(p: float | None) -> str:
    """A p-value with three significant digits."""
    return "n/a" if p is None else f"{p:.3g}"


def with_unit(text: str, unit: str) -> str:
    return f"{text} {unit}" if unit else text
