"""`dflash-qualify analyze SAMPLES.csv`: the same statistics and report for samples collected elsewhere."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from .. import analysis, imported_samples
from ..errors import UsageError
from ..evidence import tool_version
from ..reports import ReportInput, render_input


def _no_bytes(sha: str) -> bytes:
    raise KeyError(sha)  # analyze has hashes only, never response bytes


@click.command(help="Statistics, verdict and report for samples collected elsewhere. CSV columns "
                    "arm,phase,value and optional response_sha256 (phase: warmup or measured). "
                    "References are scheduled first and last around the candidate (A/cand/B). "
                    "Exit 0 when the analysis ran (use `gate` on evidence for a verdict exit code).")
@click.argument("samples_csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--reference", "references", multiple=True, required=True, metavar="ARM",
              help="Reference arm (give twice for an A/B bracket).")
@click.option("--candidate", required=True, metavar="ARM", help="Candidate arm.")
@click.option("--direction", type=click.Choice(["higher", "lower"]), default="higher", show_default=True,
              help="Whether a higher or a lower value is better.")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("--min-gain", type=float, default=analysis.DEFAULT_GATE["min_gain_pct"], show_default=True,
              metavar="PCT")
@click.option("--max-drift", type=float, default=analysis.DEFAULT_GATE["max_drift_pct"], show_default=True,
              metavar="PCT")
@click.option("--seed", type=int, default=analysis.DEFAULT_GATE["seed"], show_default=True,
              help="Bootstrap seed.")
@click.option("--resamples", type=int, default=analysis.DEFAULT_GATE["bootstrap_resamples"],
              show_default=True, help="Bootstrap resamples.")
def command(samples_csv: Path, references: tuple[str, ...], candidate: str, direction: str, fmt: str,
            min_gain: float, max_drift: float, seed: int, resamples: int) -> None:
    file = str(samples_csv)
    try:
        text = samples_csv.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise UsageError("no such file", file=file) from None
    except UnicodeDecodeError as exc:
        raise UsageError("not UTF-8 text", file=file, field=f"byte {exc.start}",
                         expected="a UTF-8 CSV file", got=exc.object[exc.start:exc.start + 1]) from None
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", file=file) from None
    samples, decimals = imported_samples.read_samples_csv(text, file)
    gate = {**analysis.DEFAULT_GATE, "min_gain_pct": min_gain, "max_drift_pct": max_drift,
            "seed": seed, "bootstrap_resamples": resamples}
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", samples_csv.stem).strip("-") or "samples"
    protocol, kept = imported_samples.bracket_protocol(
        samples, name=name, references=list(references), candidate=candidate, direction=direction,
        decimals=decimals, gate=gate, file=file)
    stats = analysis.compute(protocol, kept, _no_bytes)
    argv = ["dflash-qualify", "analyze", file, *[x for r in references for x in ("--reference", r)],
            "--candidate", candidate, "--direction", direction, "--min-gain", f"{min_gain:g}",
            "--max-drift", f"{max_drift:g}", "--seed", str(seed), "--resamples", str(resamples)]
    environment = {"invocation": shlex.join(argv), "tool_version": tool_version()}
    inp = ReportInput(protocol, environment, stats, kept, None, None, in_evidence=False)
    click.echo(render_input(inp, fmt), nl=False)
