"""Click options shared by commands that run protocols (`run`, `calibrate`): one definition each."""
from __future__ import annotations

from typing import Callable, TypeVar

import click

F = TypeVar("F", bound=Callable)

_RUN_OPTIONS = (
    click.option("--out", "out", default="./evidence", show_default=True,
                 type=click.Path(file_okay=False), help="Evidence root directory."),
    click.option("--warmups", type=click.IntRange(0, 100000), default=None,
                 help="Warm-up requests per arm (overrides the protocol; recorded)."),
    click.option("--measured", type=click.IntRange(1, 100000), default=None,
                 help="Measured requests per arm (overrides the protocol; recorded)."),
)


def run_options(f: F) -> F:
    """Adds --out, --warmups and --measured, in that order, to a command."""
    for option in reversed(_RUN_OPTIONS):
        f = option(f)
    return f
