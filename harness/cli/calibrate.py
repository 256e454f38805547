"""`dflash-qualify calibrate`: A/A brackets -> noise floor, false-qualification rate, power, N.

Exit codes: 0 the gate is sound on this machine (simulated false-qualification rate within
the limit, A/A responses identical), 1 it is not, 2 bad input, 3 the runs failed.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console

from .options import run_options
from .. import protocol as protocol_mod


def _invocation(spec: str | None, out: str, opts: dict) -> str:
    argv = ["dflash-qualify", "calibrate", spec or protocol_mod.DEFAULT_PROTOCOL, "--out", out]
    for key, value in opts.items():
        if value is not None:
            argv += [f"--{key.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(argv)


@click.command("calibrate")
@click.argument("protocol", required=False)
@click.option("--repeats", type=click.IntRange(1, 10000), default=10, show_default=True,
              help="A/A brackets to run.")
@run_options
@click.option("--effect", type=click.FloatRange(0, 1000), default=5.0, show_default=True,
              help="Effect (gain %) the recommended N should detect.")
@click.option("--power", type=click.FloatRange(0, 1), default=0.8, show_default=True,
              help="Power the recommended N should reach at --effect.")
@click.option("--simulations", type=click.IntRange(1, 1000000), default=1000, show_default=True,
              help="Resampled brackets per effect size.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="Seed of the resampling.")
@click.option("--max-false-rate", type=click.FloatRange(0, 100), default=1.0, show_default=True,
              help="Largest acceptable false-qualification rate, in percent.")
def command(protocol: str | None, repeats: int, out: str, warmups: int | None,
            measured: int | None, effect: float, power: float, simulations: int, seed: int,
            max_false_rate: float) -> None:
    """Calibrate PROTOCOL's gate on this machine (a bracket protocol; default exact-bands-aba).

    Runs REPEATS A/A brackets (every arm the protocol's first reference configuration),
    reports the noise floor (spurious gain and drift), then resamples that noise (two-stage
    bootstrap) to estimate the gate's false-qualification rate and its power to detect
    gains of 1, 2, 3, 5 and 10% at the protocol's N, and recommends the N needed for
    --effect at --power. Writes sealed evidence that `verify` re-checks.

    Exit codes: 0 gate sound, 1 not sound, 2 bad input, 3 runs failed or interrupted.
    """
    from .. import kinds
    from ..kinds.calibration import CALIBRATION, calibrate

    loaded = kinds.load(protocol, command="run", warmups=warmups, measured=measured)
    settings = {"repeats": repeats, "simulations": simulations, "seed": seed,
                "target_effect_pct": effect, "target_power": power,
                "max_false_rate_pct": max_false_rate}
    invocation = _invocation(protocol, out, {
        "repeats": repeats, "warmups": warmups, "measured": measured, "effect": effect,
        "power": power, "simulations": simulations, "seed": seed,
        "max_false_rate": max_false_rate})
    err = Console(stderr=True, soft_wrap=True)
    err.print(f"calibrating {loaded.resolved['name']}: {repeats} A/A brackets, evidence under "
              f"{out}", highlight=False)

    def on_repeat(r: int, total: int) -> None:
        err.print(f"A/A repeat {r + 1}/{total}", highlight=False)

    outcome = calibrate(loaded, Path(out), settings, invocation=invocation, on_repeat=on_repeat)
    text = CALIBRATION.pages["md"](outcome.path, outcome.manifest_sha256)
    click.echo(text.rstrip("\n"))
    err.print(f"evidence: {outcome.path}", highlight=False)
    sys.exit(0 if outcome.qualified else 1)
