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
    from ..exactness_verify import is_exactness
    if is_exactness(directory):  # `dflash-qualify exactness` evidence: markdown from exactness.json
        click.echo(render_exactness(directory, fmt))
        return
    click.echo(render(load_verified(directory), fmt), nl=False)


def render_exactness(directory: Path, fmt: str) -> str:
    from ..errors import UsageError
    from ..evidence import read_json
    from ..reports.exactness_md import render as render_md
    from .verify import verify_or_fail
    if fmt not in ("md", "json"):
        raise UsageError("exactness evidence renders as md or json", field="--format", expected="md | json", got=fmt)
    sha = verify_or_fail(directory)
    results = read_json(directory, "exactness.json")
    if fmt == "json":
        import json
        return json.dumps({"manifest_sha256": sha, **results}, indent=2, sort_keys=True)
    return render_md(read_json(directory, "protocol.json"), results) + f"\nEvidence manifest SHA-256: {sha}"
