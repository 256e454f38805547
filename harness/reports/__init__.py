"""Reporters: one table maps a format name to a function ReportInput -> text (no IO here).

Adding a format is one module with a `render(inp) -> str` and one entry in FORMATS.
"""
from __future__ import annotations

from typing import Callable

from ..errors import UsageError
from . import calibration_md, csv_, html, json_, markdown
from .base import ReportInput
from .markdown import render_markdown


def _markdown(inp: ReportInput) -> str:
    """Markdown of a run, or of calibrate evidence (stats kind "calibration")."""
    if inp.stats.get("kind") == "calibration":
        return calibration_md.render(inp)
    return markdown.render(inp)


FORMATS: dict[str, Callable[[ReportInput], str]] = {
    "md": _markdown,
    "json": json_.render,
    "csv": csv_.render,
    "html": html.render,   # self-contained, inline SVG plots (matplotlib, imported on use)
}

__all__ = ["FORMATS", "ReportInput", "render", "render_input", "render_markdown"]


def render_input(inp: ReportInput, fmt: str) -> str:
    """Render a ReportInput in one of FORMATS (UsageError for an unknown format)."""
    try:
        renderer = FORMATS[fmt]
    except KeyError:
        raise UsageError("unknown report format", field="--format",
                         expected=" | ".join(FORMATS), got=fmt) from None
    return renderer(inp)


def render(evidence, fmt: str) -> str:
    """Render a loaded evidence directory (harness.evidence.Evidence) as "md", "json" or "csv"."""
    return render_input(ReportInput(evidence.protocol, evidence.environment, evidence.stats,
                                    evidence.samples, evidence.manifest_sha, evidence.path), fmt)
