"""`dflash-qualify report DIR --format md|json|csv`: render verified evidence to stdout."""
from __future__ import annotations

from pathlib import Path

import click

from ..reports import FORMATS, render
from .verify import load_verified


@click.command(help="Render a sealed, verified evidence directory as markdown (the PR report), "
                    "JSON (stats + verdict + manifest SHA-256), CSV (every request) or HTML (one "
                    "self-contained file with inline SVG plots).")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), default="md", show_default=True)
def command(directory: Path, fmt: str) -> None:
    click.echo(render(load_verified(directory), fmt), nl=False)
