"""Reporters: one table maps a format name to a function ReportInput -> text (no IO here).

Adding a format is one module with a `render(inp) -> str` and one entry in FORMATS.
"""
from __future__ import annotations

from typing import Callable

from ..errors import UsageError
from . import calibration_md, csv_, html, json_, markdown
from .base import ReportInput
from .markdown import render_markdown


# a run's (bracket, compare) pages: format -> renderer of a ReportInput
FORMATS: dict[str, Callable[[ReportInput], str]] = {
    "md": markdown.render,
    "json": json_.render,
    "csv": csv_.render,
    "html": html.render,   # self-contained, inline SVG plots (matplotlib, imported on use)
}
# calibrate evidence's pages (the same JSON and CSV; its own markdown and HTML)
CALIBRATION_FORMATS: dict[str, Callable[[ReportInput], str]] = {
    **FORMATS,
    "md": calibration_md.render,
    "html": html.render_calibration,
}

__all__ = ["FORMATS", "CALIBRATION_FORMATS", "ReportInput", "render", "render_input",
           "render_markdown"]


def render_input(inp: ReportInput, fmt: str,
                 formats: dict[str, Callable[[ReportInput], str]] = FORMATS) -> str:
    """Render a ReportInput in one of `formats` (UsageError for an unknown format)."""
    try:
        renderer = formats[fmt]
    except KeyError:
        raise UsageError("unknown report format", field="--format",
                         expected=" | ".join(formats), got=fmt) from None
    return renderer(inp)


def render(evidence, fmt: str, formats: dict[str, Callable[[ReportInput], str]] = FORMATS) -> str:
    """Render a loaded evidence directory (harness.evidence.Evidence) in one of `formats`."""
    return render_input(ReportInput(evidence.protocol, evidence.environment, evidence.stats,
                                    evidence.samples, evidence.manifest_sha, evidence.path), fmt,
                        formats)
