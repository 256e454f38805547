"""`dflash-qualify gate DIR`: the verdict as an exit code, with JUnit XML and a GitHub step summary."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import click

from .. import gate, kinds
from ..errors import UsageError
from ..evidence import load_evidence
from ..verify import verify
from . import verdict_exit_code


def _write(path: Path, text: str, *, append: bool, what: str) -> None:
    try:
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {what}: {exc.strerror}", file=str(path)) from None


def _finite(value: float | None, flag: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise UsageError("not a finite number", field=flag, expected="a finite percentage", got=value)
    return value


@click.command(help="Verify a sealed evidence directory and turn its verdict into an exit code: "
                    "0 qualified, 1 not qualified or invalid, 4 inconclusive (a sequential run's budget ran "
                    "out first). --min-gain/--max-drift override the "
                    "protocol's thresholds. Appends the markdown report to $GITHUB_STEP_SUMMARY when set.")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--min-gain", type=float, default=None, metavar="PCT", help="Minimum gain % (point estimate).")
@click.option("--max-drift", type=float, default=None, metavar="PCT", help="Maximum bracket drift %.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="Write JUnit XML, one testcase per condition.")
def command(directory: Path, min_gain: float | None, max_drift: float | None,
            junit_path: Path | None) -> None:
    _finite(min_gain, "--min-gain")
    _finite(max_drift, "--max-drift")
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    result = verify(directory)
    if not result.ok:
        problems = [str(p) for p in result.problems]
        if junit_path:
            _write(junit_path, gate.invalid_junit(directory.name, problems), append=False, what="JUnit XML")
        if summary_path:
            _write(Path(summary_path), gate.invalid_summary(str(directory), problems), append=True,
                   what="step summary")
        for p in problems:
            click.echo(f"invalid: {p}", err=True)
        click.echo(f"{directory}: evidence invalid, not qualified ({len(problems)} problem(s))")
        sys.exit(1)
    kind = kinds.of_directory(directory)
    if kind.decide is None:
        raise UsageError(f"{kind.what} evidence has no gate verdict (its command's exit code is "
                         f"the verdict)", file=str(directory))
    evidence = load_evidence(directory)
    stats = kind.decide(evidence.stats, min_gain, max_drift)
    verdict = stats["verdict"]
    name = str(evidence.protocol.get("name") or directory.name)
    if junit_path:
        _write(junit_path, gate.junit(name, verdict), append=False, what="JUnit XML")
    if summary_path:
        report = kind.summary(directory, str(evidence.manifest_sha), stats)
        _write(Path(summary_path), report + "\n", append=True, what="step summary")
    click.echo(gate.summary_line(name, verdict))
    for c in verdict["conditions"]:
        if not c["passed"]:
            click.echo(f"  {c['reason']}: {c['message']}")
    click.echo(f"Evidence manifest SHA-256: {evidence.manifest_sha}")
    sys.exit(verdict_exit_code(verdict))
