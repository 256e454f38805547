"""`dflash-qualify serve`: the embedded engine over HTTP (llama.cpp and OpenAI APIs)."""
from __future__ import annotations

import asyncio
import logging
import sys

import click

from ..errors import UsageError


@click.command(name="serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to bind; 0 picks a free one (the listening line on stderr names it).")
@click.option("--model", default="ds4-mini", show_default=True,
              help="Built-in config (ds4-mini, ds4-tiny) or a .json/.toml config file.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Weight seed.")
@click.option("--threads", type=click.IntRange(1), default=None, help="Engine threads [default: all CPUs].")
@click.option("--bands/--no-bands", default=None,
              help="Exact prefill bands on/off [default: DFLASH_DS4_EXACT_PREFILL_BANDS, else off].")
@click.option("--chunk", type=int, default=None, help="Maximum band width 1..4 [default: 4 with bands].")
@click.option("--mmvq-max-ncols", type=int, default=None,
              help="Narrow-MMVQ width cap 1..8 [default: LUCE_MMVQ_MAX_NCOLS, else 4].")
@click.option("--prefix-cache-slots", type=click.IntRange(0), default=0, show_default=True,
              help="Prefix cache snapshots; requests with cache_prompt=false bypass it.")
@click.option("--api", "api", type=click.Choice(["dflash", "dflash-server"]), default="dflash",
              show_default=True,
              help="dflash: llama.cpp and OpenAI routes; dflash-server: lucebox dflash_server's "
                   "shape (POST /v1/chat/completions only, timings under usage.timings).")
def command(host: str, port: int, model: str, seed: int, threads: int | None, bands: bool | None,
            chunk: int | None, mmvq_max_ncols: int | None, prefix_cache_slots: int,
            api: str) -> None:
    """Serve the embedded engine: GET /health, POST /completion (llama.cpp), GET /v1/models,
    POST /v1/completions and /v1/chat/completions (OpenAI, with streaming). With
    --api dflash-server: GET /health, GET /v1/models and POST /v1/chat/completions only, in
    lucebox dflash_server's shape (timings under usage.timings).

    Requests are served one at a time; concurrent clients queue. Flags override the
    environment (DFLASH_DS4_EXACT_PREFILL_BANDS, LUCE_MMVQ_MAX_NCOLS). Stops on SIGTERM/SIGINT.
    """
    from dflash_qualify.engine import EngineError
    from dflash_qualify.engine.server import ServerConfig, serve

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[serve] %(message)s")
    config = ServerConfig(model=model, seed=seed, threads=threads, bands=bands, chunk=chunk,
                          mmvq_max_ncols=mmvq_max_ncols, prefix_cache_slots=prefix_cache_slots,
                          host=host, port=port, api=api)

    def listening(bound_host: str, bound_port: int) -> None:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host  # IPv6 literal in a URL
        click.echo(f"dflash-qualify serve: listening on http://{shown}:{bound_port} "
                   f"(model {config.model_name}, loading in the background)", err=True)

    try:
        asyncio.run(serve(config, on_listening=listening))
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    click.echo("dflash-qualify serve: stopped", err=True)
