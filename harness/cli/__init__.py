"""The dflash-qualify command line: the only place that prints or exits.

Subcommands live one per module in this package and are imported only when invoked,
so `dflash-qualify --help` stays fast and one broken command cannot break the others.
Exit codes: 0 qualified/ok, 1 not qualified (gate failed) or evidence invalid, 2 usage or
input error, 3 run failed or interrupted, 4 inconclusive (a sequential run's budget ran out
before its stopping rule decided).
"""
from __future__ import annotations

import importlib
import sys

import click

from ..errors import QualifyError

# command name -> (module in this package exposing a click command named `command`, short help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "Run a qualification protocol and write sealed evidence."),
    "compare": ("compare", "Bracket two command lines (reference A / candidate / B), no protocol file."),
    "verify": ("verify", "Re-hash and recompute an evidence directory."),
    "report": ("report", "Render an evidence directory as md, json, csv or html."),
    "gate": ("gate", "Turn an evidence directory's verdict into an exit code."),
    "analyze": ("analyze", "Statistics and report for samples collected elsewhere."),
    "engine-info": ("engine_info", "Engine build flags, SIMD path and model configs."),
    "serve": ("serve", "Serve the embedded engine over HTTP (llama.cpp and OpenAI APIs)."),
    "calibrate": ("calibrate", "A/A brackets: noise floor, false-alarm rate, power, needed N."),
    "exactness": ("exactness", "Tensor-level exactness: q1-oracle trace diff, first divergence, coverage."),
    "matrix": ("matrix", "Protocols x hosts (local or Ray): one sealed cell per pair, one manifest."),
}


# the verdict's answer -> exit code (run and gate exit through verdict_exit_code)
VERDICT_EXIT_CODES = {"QUALIFIED": 0, "NOT QUALIFIED": 1, "INCONCLUSIVE": 4}


def decision_of(verdict: dict | None, qualified: bool | None = None) -> str:
    """QUALIFIED | NOT QUALIFIED | INCONCLUSIVE (evidence before stats version 3, and kinds
    without a three-way verdict: from `qualified`, which only knew two answers)."""
    if isinstance(verdict, dict) and verdict.get("decision") in VERDICT_EXIT_CODES:
        return verdict["decision"]
    ok = verdict["qualified"] if isinstance(verdict, dict) and "qualified" in verdict else qualified
    return "QUALIFIED" if ok else "NOT QUALIFIED"


def verdict_exit_code(verdict: dict | None, qualified: bool | None = None) -> int:
    """The exit code of a verdict: 0 QUALIFIED, 1 NOT QUALIFIED, 4 INCONCLUSIVE."""
    return VERDICT_EXIT_CODES[decision_of(verdict, qualified)]


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        module = importlib.import_module(f"{__name__}.{entry[0]}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Static help text: listing commands must not import every command's dependencies.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):  # one place maps our errors to exit codes
        try:
            return super().invoke(ctx)
        except QualifyError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=LazyGroup)
@click.version_option(package_name="dflash-qualify")
def main() -> None:
    """Qualify performance changes that must not change outputs."""
