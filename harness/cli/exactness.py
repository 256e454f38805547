"""`dflash-qualify exactness [PROTOCOL] [--out DIR]`: trace the q1 oracle and each candidate,
compare every record bitwise, print verdicts, first divergence and coverage; exit 0 when every
candidate met its expectation with full coverage, 1 when not, 3 when the run failed."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from .. import kinds
from ..reports.exactness_md import render


@click.command(help="Prove tensor-level exactness: trace the q1 oracle and each candidate (default "
                    "bands chunk 2, 3, 4) through the worker, compare route ids/weights, HC streams, "
                    "KV window, compressor state, compressed rows, all-position logits, snapshots and "
                    "committed tokens bit for bit, check coverage, and write sealed evidence. "
                    "PROTOCOL: a kind = \"exactness\" file or bundled name (default exact-bands-trace).")
@click.argument("protocol", required=False)
@click.option("--out", "out", default="./evidence", show_default=True,
              type=click.Path(file_okay=False), help="Evidence root directory.")
def command(protocol: str | None, out: str) -> None:
    loaded = kinds.load(protocol, command="exactness")
    kind = kinds.lookup(loaded.resolved["kind"])
    invocation = shlex.join(["dflash-qualify", "exactness", protocol or kind.default_protocol,
                             "--out", out])
    outcome = kinds.seal(kind, loaded, Path(out), invocation=invocation,
                         options={"progress": lambda msg: click.echo(f"tracing {msg}", err=True)})
    click.echo(render(loaded.resolved, outcome.results))
    click.echo(f"Evidence: {outcome.path}")
    click.echo(f"Evidence manifest SHA-256: {outcome.manifest_sha256}")
    if not outcome.results["passed"]:
        sys.exit(1)
