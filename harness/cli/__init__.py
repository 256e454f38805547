"""The dflash-qualify command line: the only place that prints or exits.

Subcommands live one per module in this package and are imported only when invoked,
so `dflash-qualify --help` stays fast and one broken command cannot break the others.
Exit codes: 0 qualified/ok, 1 gate failed or evidence invalid, 2 usage or input error,
3 run failed or inconclusive.
"""
from __future__ import annotations

import importlib
import sys

import click

from ..errors import QualifyError

# command name -> module in this package exposing a click command named `command`
COMMANDS: dict[str, str] = {
    "run": "run",
    "verify": "verify",
    "report": "report",
    "gate": "gate",
    "analyze": "analyze",
    "engine-info": "engine_info",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module_name = COMMANDS.get(name)
        if module_name is None:
            return None
        module = importlib.import_module(f"{__name__}.{module_name}")
        return module.command

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
