"""`dflash-qualify matrix MATRIX.toml`: run protocols x hosts, seal the matrix, print its table.

Exit codes: 0 every cell sealed and qualified, 1 a cell's gate failed, 2 bad input, 3 a cell
failed (its run failed or its node was lost; the rest is sealed) or the matrix was interrupted.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console


def _invocation(matrix: str, executor: str, address: str | None, out: str) -> str:
    argv = ["dflash-qualify", "matrix", matrix, "--executor", executor, "--out", out]
    if address:
        argv += ["--ray-address", address]
    return shlex.join(argv)


@click.command("matrix")
@click.argument("matrix_file", metavar="MATRIX.toml",
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="local: every cell here, one after another (no Ray); "
                                      "ray: each cell one Ray task pinned to its node.")
@click.option("--ray-address", "address", default=None,
              help="Ray cluster to join (auto, HOST:PORT, ray://HOST:PORT); default: start a "
                   "one-node local cluster for this run. Only with --executor ray.")
@click.option("--out", "out", default="./evidence", show_default=True,
              type=click.Path(file_okay=False), help="Evidence root directory.")
def command(matrix_file: Path, executor: str, address: str | None, out: str) -> None:
    """Run every protocol of MATRIX.toml on every selected host and seal one matrix.

    Each cell (one protocol on one host) runs whole on its host and is sealed there; the
    driver re-verifies it and seals the matrix with a manifest over every cell. docs/matrix.md
    explains the file, the Ray cluster and the report.

    Exit codes: 0 every cell qualified, 1 a cell not qualified, 2 bad input, 3 a cell failed.
    """
    from ..errors import UsageError

    if address and executor != "ray":
        raise UsageError("--ray-address is only used by the ray executor", field="--ray-address",
                         expected="--executor ray", got=f"--executor {executor}")
    if not matrix_file.is_file():
        raise UsageError("no such matrix file", file=str(matrix_file))
    err = Console(stderr=True, soft_wrap=True)

    def on_event(name: str, details: dict) -> None:
        if name == "planned":
            gaps = "".join(f"\n  gap: {g}" for g in details["gaps"])
            err.print(f"{details['cells']} cells on {len(details['nodes'])} host(s): "
                      f"{', '.join(details['nodes']) or 'none'}{gaps}", highlight=False)
        elif name == "cell_start":
            err.print(f"cell {details['cell']}: started on {details['node']}", highlight=False)
        elif name == "cell_end":
            what = details["verdict"] if details["status"] == "sealed" else \
                f"FAILED: {details['reason']}"
            err.print(f"cell {details['cell']}: {what}", highlight=False)

    outcome = run_matrix(matrix_file, executor, address, Path(out), on_event=on_event,
                         announce=lambda text: err.print(text, highlight=False))
    text = (outcome.path / "report.md").read_text(encoding="utf-8")
    click.echo(text.rstrip("\n"))
    click.echo(f"\nMatrix evidence manifest SHA-256: {outcome.manifest_sha256}")
    err.print(f"evidence: {outcome.path}", highlight=False)
    cells = outcome.results["cells"]["cells"]
    if any(c["status"] != "sealed" for c in cells):
        sys.exit(3)
    sys.exit(0 if outcome.qualified else 1)


def run_matrix(matrix_file: Path, executor: str, address: str | None, out: Path, *,
               on_event=None, announce=lambda text: None):
    """Load MATRIX.toml and every cell protocol (user errors before anything runs), make the
    executor (the ray extra named if missing), then seal the matrix through the registry.

    Returns the Sealed matrix (results: {"cells": cells.json, "nodes": nodes.json}).
    """
    from .. import kinds
    from ..kinds.matrix.driver import load_protocols
    from ..kinds.matrix.executors import EXECUTORS
    from ..verify import verify

    matrix = kinds.load(str(matrix_file), command="matrix")
    cells = load_protocols(matrix, kinds.KINDS)
    make = EXECUTORS[executor]
    runner = make(address) if executor == "ray" else make()
    announce(f"matrix {matrix.name}: {len(cells)} protocol(s) on the {executor} executor; "
             f"evidence under {out}")
    try:
        return kinds.seal("matrix", matrix, out,
                          invocation=_invocation(str(matrix_file), executor, address, str(out)),
                          options={"executor": runner, "cells": cells, "verify": verify,
                                   "on_event": on_event})
    finally:
        runner.close()
