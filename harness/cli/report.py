"""`dflash-qualify report DIR --format md|json|csv`: render verified evidence to stdout."""
from __future__ import annotations

from pathlib import Path

import click

from .. import kinds
from ..errors import UsageError
from .verify import verify_or_fail

# every format some kind renders (a kind that lacks the one asked for names its own)
ALL_FORMATS = sorted({fmt for kind in kinds.KINDS.values() for fmt in kind.pages})


@click.command(help="Render a sealed, verified evidence directory as markdown (the PR report), "
                    "JSON (stats + verdict + manifest SHA-256), CSV (every request) or HTML (one "
                    "self-contained file with inline SVG plots).")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(ALL_FORMATS), default="md", show_default=True)
def command(directory: Path, fmt: str) -> None:
    click.echo(render(directory, fmt), nl=False)


def render(directory: Path, fmt: str) -> str:
    """A verified directory's page in `fmt`, through its kind (EvidenceInvalid if it does not
    verify; UsageError if its kind has no such page)."""
    kind = kinds.of_directory(directory)
    page = kind.pages.get(fmt)
    if page is None:
        raise UsageError(f"{kind.what} evidence renders as {' or '.join(kind.pages)}",
                         field="--format", expected=" | ".join(kind.pages), got=fmt)
    return page(directory, verify_or_fail(directory))
