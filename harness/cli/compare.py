"""`dflash-qualify compare`: an A / candidate / B bracket of two command lines, no protocol file needed."""
from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console

from .. import adhoc, kinds
from .. import protocol as protocol_mod
from .run import ProgressView


@click.command("compare")
@click.option("--target", "target", type=click.Choice(adhoc.TARGETS), required=True,
              help="How to reach the engine: llama.cpp's /completion, an OpenAI-compatible "
                   "server, or a worker-protocol program.")
@click.option("--reference", required=True, metavar="CMD",
              help="Reference command line (shell-quoted; {host} and {port} for servers). "
                   "Runs arms A and B.")
@click.option("--candidate", required=True, metavar="CMD", help="Candidate command line.")
@click.option("--reference-env", multiple=True, metavar="K=V",
              help="Environment of the reference arms (K= unsets K); repeatable.")
@click.option("--candidate-env", multiple=True, metavar="K=V",
              help="Environment of the candidate arm (K= unsets K); repeatable.")
@click.option("--endpoint", type=click.Choice(adhoc.ENDPOINTS), default=None,
              help="openai target: /v1/completions or /v1/chat/completions [default: completions].")
@click.option("--timings", type=click.Choice(["llama-server", "dflash-server", "vllm", "sglang"]),
              default=None, help="openai target: read server-reported timings with this preset "
                                 "[default: client-side TTFT].")
@click.option("--prompt-length", type=click.IntRange(1, 1 << 16), default=None,
              help=f"Prompt bytes cut from the bundled corpus [default: "
                   f"{adhoc.DEFAULTS['prompt_length']}].")
@click.option("--max-tokens", type=click.IntRange(1, 1 << 20), default=None,
              help=f"Tokens generated per request [default: {adhoc.DEFAULTS['max_tokens']}].")
@click.option("--warmups", type=click.IntRange(0, 100000), default=None,
              help=f"Warm-up requests per arm [default: {adhoc.DEFAULTS['warmups']}].")
@click.option("--measured", type=click.IntRange(1, 100000), default=None,
              help=f"Measured requests per arm [default: {adhoc.DEFAULTS['measured']}].")
@click.option("--out", "out", default="./evidence", show_default=True,
              type=click.Path(file_okay=False), help="Evidence root directory.")
def command(target: str, reference: str, candidate: str, reference_env: tuple[str, ...],
            candidate_env: tuple[str, ...], endpoint: str | None, timings: str | None,
            prompt_length: int | None, max_tokens: int | None, warmups: int | None,
            measured: int | None, out: str) -> None:
    """Bracket two command lines: reference A, candidate, reference B, with the bundled defaults.

    \b
    dflash-qualify compare --target llamacpp \\
      --reference 'llama-server -m m.gguf --host {host} --port {port} -ub 1' \\
      --candidate 'llama-server -m m.gguf --host {host} --port {port} -ub 4'

    The generated protocol is kept in the evidence as protocol.toml:
    `dflash-qualify run <evidence>/protocol.toml` reproduces the bracket.
    Exit codes: 0 qualified, 1 gate failed, 2 bad input, 3 run failed or interrupted.
    """
    argv = ["dflash-qualify", "compare", "--target", target, "--reference", reference,
            "--candidate", candidate]
    for flag, values in (("--reference-env", reference_env), ("--candidate-env", candidate_env)):
        for v in values:
            argv += [flag, v]
    for flag, value in (("--endpoint", endpoint), ("--timings", timings),
                        ("--prompt-length", prompt_length), ("--max-tokens", max_tokens),
                        ("--warmups", warmups), ("--measured", measured)):
        if value is not None:
            argv += [flag, str(value)]
    invocation = shlex.join(argv + ["--out", out])
    args = adhoc.CompareArgs(target=target, reference=reference, candidate=candidate,
                             reference_env=reference_env, candidate_env=candidate_env,
                             endpoint=endpoint, timings=timings, prompt_length=prompt_length,
                             max_tokens=max_tokens, warmups=warmups, measured=measured)
    text = adhoc.protocol_toml(args, invocation)
    with tempfile.TemporaryDirectory(prefix="dflash-compare-") as tmp:
        path = Path(tmp) / "compare.toml"
        path.write_text(text, encoding="utf-8")
        loaded = protocol_mod.load(str(path))
    loaded.resolved["source"]["file"] = "dflash-qualify compare (generated; protocol.toml)"
    err = Console(stderr=True, soft_wrap=True)
    err.print(f"compare ({target} target): A = reference, cand = candidate, B = reference; "
              f"evidence under {out}", highlight=False)
    with ProgressView(err) as view:
        outcome = kinds.qualify(loaded, Path(out), invocation=invocation, on_event=view)
    report = kinds.lookup(loaded.resolved["kind"]).pages["md"](outcome.path,
                                                               outcome.manifest_sha256)
    click.echo(report.rstrip("\n"))
    if outcome.manifest_sha256 not in report:
        click.echo(f"\nEvidence manifest SHA-256: {outcome.manifest_sha256}")
    err.print(f"evidence: {outcome.path}", highlight=False)
    err.print(f"reproduce: dflash-qualify run {outcome.path / 'protocol.toml'}", highlight=False)
    sys.exit(0 if outcome.qualified else 1)
