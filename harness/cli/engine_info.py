"""`dflash-qualify engine-info`: the embedded engine's build flags, SIMD path and model configs."""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..errors import UsageError


@click.command(name="engine-info")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--model", "models", multiple=True, help="Also show this config file (.json/.toml); repeatable.")
def command(as_json: bool, models: tuple[str, ...]) -> None:
    """Engine build flags, detected SIMD path and model configs."""
    from dflash_qualify.engine import (MODEL_CONFIGS, EngineError, build_info, config_hash, load_config,
                                       q8_weight_bytes)

    info = build_info()
    configs = {}
    try:
        for name in [*MODEL_CONFIGS, *models]:
            cfg = load_config(name)
            configs[cfg["name"] if name in MODEL_CONFIGS else name] = {
                **cfg, "q8_weight_bytes": q8_weight_bytes(cfg), "config_hash_seed0": config_hash(cfg, 0)}
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"build": info, "models": configs}, indent=2, sort_keys=True))
        return
    console = Console()
    build = Table(title="DS4-mini engine build", show_header=False)
    for key in ("build_type", "simd_path", "sanitize", "threads", "flags"):
        val = info[key]
        build.add_row(key, " ".join(val) if isinstance(val, list) else str(val))
    cuda = info.get("cuda")
    if isinstance(cuda, dict):  # the GPU backend (Engine(device="cuda")): built? usable here?
        why = cuda.get("unavailable_reason")
        build.add_row("cuda", ("built" if cuda.get("built") else "not built")
                      + (f"; unavailable here: {why}" if why else "; available"))
    feats = [k for k, v in info.get("cpu_features", {}).items() if v is True]
    build.add_row("cpu_features", " ".join(feats))
    console.print(build)
    keys = ("d_model", "n_layers", "n_heads", "head_dim", "rope_dim", "n_swa", "ratios", "n_experts",
            "top_k", "d_ff", "n_hash_layers", "hc_mult", "ctx", "q8_weight_bytes")
    models_t = Table(title="Model configs")
    models_t.add_column("key")
    for name in configs:
        models_t.add_column(name)
    for key in keys:
        row = []
        for cfg in configs.values():
            v = cfg[key]
            row.append(f"{v / 2**20:.1f} MiB" if key == "q8_weight_bytes" else str(v))
        models_t.add_row(key, *row)
    console.print(models_t)
