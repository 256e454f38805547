"""`dflash-qualify verify DIR`: re-hash and recompute an evidence directory; print OK or each problem."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import EvidenceInvalid, UsageError
from ..evidence import Evidence, load_evidence
from ..verify import not_evidence, verify


def verify_or_fail(directory: Path) -> str:
    """Verify; return the manifest SHA-256, or EvidenceInvalid (exit 1) naming the first problem."""
    result = verify(directory)
    if not result.ok:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise EvidenceInvalid(f"{directory} failed verification: {result.problems[0]}{more}; "
                              f"run `dflash-qualify verify {directory}` for every problem")
    return str(result.manifest_sha)


def load_verified(directory: Path) -> Evidence:
    """Verify, then load; EvidenceInvalid (exit 1) naming the first problem if it does not verify."""
    verify_or_fail(directory)
    return load_evidence(directory)


@click.command(help="Re-hash every file of an evidence directory against its manifest, reject "
                    "missing, extra, modified, linked or path-escaping entries, and recompute the "
                    "statistics from the raw samples. Exit 0 if it verifies, 1 if not, 2 if DIRECTORY is "
                    "not evidence (no manifest.json).")
@click.argument("directory", type=str)  # checked here: click.Path stats names the OS refuses
def command(directory: str) -> None:
    root = Path(directory)
    problem = not_evidence(root)  # at once, before any scan: not evidence is a user error
    if problem:
        raise UsageError(problem)
    result = verify(root)
    if result.ok:
        click.echo(f"OK {result.manifest_sha}")
        return
    for problem in result.problems:
        click.echo(f"{directory}/{problem}" if problem.path != "." else f"{directory}: {problem.message}")
    click.echo(f"INVALID: {len(result.problems)} problem(s) in {directory}")
    sys.exit(1)
