"""`dflash-qualify run`: run a protocol, seal evidence, print the report; exit 0 qualified, 1 not."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .options import run_options
from .. import kinds
from .. import protocol as protocol_mod
from ..runner import Event
from . import verdict_exit_code

UNITS = {"prefill_tok_s": "tok/s", "decode_tok_s": "tok/s", "prefill_ms": "ms", "total_ms": "ms"}


class ProgressView:
    """Arm, request i/N and running median on stderr: a live bar on a TTY, plain lines otherwise."""

    def __init__(self, console: Console, *, sequential: bool = False) -> None:
        self.console = console
        self.sequential = sequential   # one line per block (a look) instead of per request
        self.live = console.is_terminal
        self.progress: Progress | None = None
        self.tasks: dict[str, int] = {}
        self.medians: dict[str, str] = {}

    def __enter__(self) -> "ProgressView":
        if self.live:
            self.progress = Progress(
                TextColumn("[bold]{task.fields[arm]}[/]"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                console=self.console, transient=False)
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def __call__(self, e: Event) -> None:
        unit = UNITS.get(e.metric, "")
        key = e.arm
        if e.kind == "build":   # [build]: one line per ref built or found in the cache
            self.console.print(e.label, highlight=False)
            return
        if e.kind == "look":  # sequential: one line per block (the look), then the next block
            if self.progress is not None:
                if "look" not in self.tasks:
                    self.tasks["look"] = self.progress.add_task("", total=None, arm="blocks",
                                                                status="")
                self.progress.update(self.tasks["look"], completed=e.index, status=e.label)
            else:
                self.console.print(e.label, highlight=False)
            return
        if self.sequential and e.kind == "arm_start":  # every block starts fresh workers
            if self.progress is not None:
                if key in self.tasks:
                    self.progress.update(self.tasks[key], completed=0, total=None,
                                         status="starting worker")
                else:
                    self.tasks[key] = self.progress.add_task("", total=None, arm=e.label,
                                                             status="starting worker")
            return
        if e.kind == "arm_start":
            if self.progress is not None:
                self.tasks[key] = self.progress.add_task("", total=None, arm=e.label,
                                                         status="starting worker")
            else:
                self.console.print(f"arm {e.arm} ({e.label}): starting", highlight=False)
            return
        if e.kind == "arm_end":
            if self.progress is not None and key in self.tasks:
                self.progress.update(self.tasks[key],
                                     status=f"[green]done[/]{self.medians.get(key, '')}")
            return
        group = f" [{e.group}]" if e.group else ""
        median = f"  median {e.median:.4g} {unit}" if e.median is not None else ""
        if median:
            self.medians[key] = median
        status = f"{e.phase}{group} {e.index}/{e.total}  {e.value:.4g} {unit}{median}"
        if self.progress is not None:
            self.progress.update(self.tasks[key], completed=e.index, total=e.total,
                                 status=status)
        else:
            self.console.print(f"arm {e.arm}: {status}", highlight=False)


def _invocation(spec: str | None, out: str, warmups: int | None, measured: int | None) -> str:
    argv = ["dflash-qualify", "run", spec or protocol_mod.DEFAULT_PROTOCOL, "--out", out]
    if warmups is not None:
        argv += ["--warmups", str(warmups)]
    if measured is not None:
        argv += ["--measured", str(measured)]
    return shlex.join(argv)


@click.command("run")
@click.argument("protocol", required=False)
@run_options
def command(protocol: str | None, out: str, warmups: int | None, measured: int | None) -> None:
    """Run PROTOCOL (a file or a bundled name; default exact-bands-aba) and seal evidence.

    Bundled: exact-bands-aba, exact-bands-quick (ds4-tiny), exact-bands-gpu-aba (ds4-gpu on
    cuda), narrow-mmvq-compare, serve-llamacpp-aba, serve-openai-aba and serve-dflash-server-aba
    (HTTP targets against `serve`);
    templates to copy and edit: llama-server-aba, openai-server-aba.

    Exit codes: 0 qualified, 1 not qualified, 2 bad input, 3 run failed or interrupted,
    4 inconclusive (a sequential protocol's budget ran out before it decided).
    """
    loaded = kinds.load(protocol, command="run", warmups=warmups, measured=measured)
    kind = kinds.lookup(loaded.resolved["kind"])
    err = Console(stderr=True, soft_wrap=True)
    invocation = _invocation(protocol, out, warmups, measured)
    target = loaded.resolved.get("target") or {}
    where = f" on {target['device']}" if target.get("device", "cpu") != "cpu" else ""
    engine = target.get("model") or f"{target.get('kind', 'no')} target"
    err.print(f"protocol {loaded.resolved['name']} ({loaded.resolved['kind']}, "
              f"{engine}{where}): evidence under {out}", highlight=False)
    with ProgressView(err, sequential=bool(loaded.resolved.get("sequential"))) as view:
        outcome = kinds.seal(kind, loaded, Path(out), invocation=invocation,
                             options={"on_event": view})
    text = kind.pages["md"](outcome.path, outcome.manifest_sha256)
    click.echo(text.rstrip("\n"))
    if outcome.manifest_sha256 not in text:
        click.echo(f"\nEvidence manifest SHA-256: {outcome.manifest_sha256}")
    err.print(f"evidence: {outcome.path}", highlight=False)
    sys.exit(verdict_exit_code(outcome.results.get("verdict"), outcome.qualified))
