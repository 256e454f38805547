"""The dflash-qualify command line: the only place that prints or exits."""
import click


@click.group()
def main() -> None:
    """Qualify performance changes that must not change outputs."""
