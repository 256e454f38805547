"""DS4-mini model configs: the built-in ones, loading/validating config files, the config hash."""
from __future__ import annotations

import hashlib
import json
import math
import tomllib
from pathlib import Path
from typing import Any

from .errors import EngineError

# Every config key, its type, and a check; the C++ core re-checks (csrc/model_config.cpp).
_INT_KEYS = ("vocab", "d_model", "n_layers", "n_heads", "head_dim", "rope_dim", "n_swa", "n_experts",
             "top_k", "d_ff", "n_hash_layers", "hc_mult", "sinkhorn_iters", "ctx")
_FLOAT_KEYS = ("rope_theta", "norm_eps", "routed_scale", "swiglu_limit")
KEYS = ("name", *_INT_KEYS, "ratios", *_FLOAT_KEYS)
MAX_WEIGHT_BYTES = 16 << 30  # refuse configs whose synthetic weights would not fit a test host

MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    # Tests: ~2 MB of Q8_0 weights; compressor ratios cover window-only, overlapping 4 and 8.
    "ds4-tiny": {
        "name": "ds4-tiny", "vocab": 258, "d_model": 128, "n_layers": 4, "n_heads": 4, "head_dim": 32,
        "rope_dim": 16, "n_swa": 16, "n_experts": 8, "top_k": 2, "d_ff": 128, "n_hash_layers": 1,
        "hc_mult": 4, "sinkhorn_iters": 3, "ctx": 512, "ratios": [0, 4, 8, 4],
        "rope_theta": 10000.0, "norm_eps": 1e-6, "routed_scale": 1.5, "swiglu_limit": 7.0,
    },
    # Default: ~270 MB of Q8_0 weights so weight streaming dominates per-token compute.
    "ds4-mini": {
        "name": "ds4-mini", "vocab": 258, "d_model": 1024, "n_layers": 6, "n_heads": 8, "head_dim": 128,
        "rope_dim": 64, "n_swa": 64, "n_experts": 16, "top_k": 2, "d_ff": 768, "n_hash_layers": 1,
        "hc_mult": 4, "sinkhorn_iters": 3, "ctx": 4096, "ratios": [0, 4, 16, 4, 16, 4],
        "rope_theta": 10000.0, "norm_eps": 1e-6, "routed_scale": 1.5, "swiglu_limit": 7.0,
    },
    # GPU (device="cuda"): ~3.7 GiB of Q8_0 weights so weight streaming dominates on an H200
    # (about 0.9 GB streamed per q1 token); same architecture, ratios mix 0, 4 and 16.
    "ds4-gpu": {
        "name": "ds4-gpu", "vocab": 258, "d_model": 4096, "n_layers": 8, "n_heads": 32, "head_dim": 128,
        "rope_dim": 64, "n_swa": 128, "n_experts": 16, "top_k": 2, "d_ff": 2048, "n_hash_layers": 1,
        "hc_mult": 4, "sinkhorn_iters": 3, "ctx": 4096, "ratios": [0, 4, 16, 4, 16, 4, 16, 0],
        "rope_theta": 10000.0, "norm_eps": 1e-6, "routed_scale": 1.5, "swiglu_limit": 7.0,
    },
}


def _fail(source: str, key: str, expected: str, got: Any) -> EngineError:
    return EngineError(f"{source}: key {key!r}: expected {expected}, got {got!r}")


def validate_config(cfg: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Check every key of a config dict; return a normalized copy. Raises EngineError naming
    the source, key, what was expected and what was found."""
    if not isinstance(cfg, dict):
        raise EngineError(f"{source}: expected a table/object of config keys, got {type(cfg).__name__}")
    unknown = sorted(set(cfg) - set(KEYS))
    if unknown:
        raise EngineError(f"{source}: unknown key(s) {unknown}; known keys: {list(KEYS)}")
    missing = [k for k in KEYS if k not in cfg]
    if missing:
        raise EngineError(f"{source}: missing key(s) {missing} (or set 'base' to a built-in config)")
    out: dict[str, Any] = {}
    name = cfg["name"]
    if not isinstance(name, str) or not name:
        raise _fail(source, "name", "a non-empty string", name)
    out["name"] = name
    for k in _INT_KEYS:
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise _fail(source, k, "an integer", v)
        out[k] = v
    for k in _FLOAT_KEYS:
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise _fail(source, k, "a positive finite number", v)
        out[k] = float(v)
    ratios = cfg["ratios"]
    if not isinstance(ratios, list) or any(isinstance(r, bool) or not isinstance(r, int) for r in ratios):
        raise _fail(source, "ratios", "a list of integers", ratios)
    out["ratios"] = list(ratios)

    def need(key: str, ok: bool, expected: str) -> None:
        if not ok:
            raise _fail(source, key, expected, out[key])

    need("vocab", out["vocab"] == 258, "258 (byte tokenizer: 256 bytes + BOS + EOS)")
    for k in ("d_model", "head_dim", "d_ff"):
        need(k, 32 <= out[k] <= 16384 and out[k] % 32 == 0, "a multiple of 32 in 32..16384")
    need("n_layers", 1 <= out["n_layers"] <= 64, "1..64")
    need("n_heads", 1 <= out["n_heads"] <= 64, "1..64")
    need("rope_dim", 2 <= out["rope_dim"] <= out["head_dim"] and out["rope_dim"] % 2 == 0,
         f"an even number in 2..head_dim ({out['head_dim']})")
    need("n_swa", 1 <= out["n_swa"] <= 4096, "1..4096")
    need("n_experts", 1 <= out["n_experts"] <= 256, "1..256")
    need("top_k", 1 <= out["top_k"] <= out["n_experts"], f"1..n_experts ({out['n_experts']})")
    need("n_hash_layers", 0 <= out["n_hash_layers"] <= out["n_layers"], f"0..n_layers ({out['n_layers']})")
    need("hc_mult", 1 <= out["hc_mult"] <= 16, "1..16")
    need("sinkhorn_iters", 0 <= out["sinkhorn_iters"] <= 100, "0..100")
    need("ctx", 1 <= out["ctx"] <= 65536, "1..65536")
    need("ratios", len(out["ratios"]) == out["n_layers"] and all(r == 0 or 4 <= r <= 1024 for r in out["ratios"]),
         f"n_layers ({out['n_layers']}) entries, each 0 or 4..1024")
    weights = q8_weight_bytes(out)
    if weights > MAX_WEIGHT_BYTES:  # every key in range can still multiply out to terabytes
        raise EngineError(f"{source}: the config needs {weights / 2**30:.1f} GiB of Q8_0 weights, more than "
                          f"the {MAX_WEIGHT_BYTES // 2**30} GiB a DS4-mini config may use (d_model, d_ff, "
                          f"n_experts, n_layers, n_heads and head_dim multiply)")
    return out


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise EngineError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        elif path.suffix == ".toml":
            data = tomllib.loads(text.decode("utf-8"))
        else:
            raise EngineError(f"config file {path}: expected a .json or .toml file")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise EngineError(f"config file {path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise EngineError(f"config file {path}: expected an object of config keys, got {type(data).__name__}")
    return data


def load_config(model: str | Path) -> dict[str, Any]:
    """A validated config dict for a built-in name or a .json/.toml file path.

    A file may set "base" to a built-in name and override only some keys; otherwise it must
    set every key. The name defaults to the file stem.
    """
    if isinstance(model, str) and model in MODEL_CONFIGS:
        return validate_config(dict(MODEL_CONFIGS[model]), f"built-in config {model!r}")
    if not isinstance(model, (str, Path)):
        raise EngineError(f"model must be a config name or file path, got {type(model).__name__}")
    path = Path(model)
    if path.suffix not in (".json", ".toml"):
        raise EngineError(f"unknown model {str(model)!r}: known models are {sorted(MODEL_CONFIGS)}, "
                          "or give a path to a .json/.toml config file")
    data = _read_file(path)
    source = f"config file {path}"
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str) or base not in MODEL_CONFIGS:
            raise _fail(source, "base", f"one of {sorted(MODEL_CONFIGS)}", base)
        data = {**MODEL_CONFIGS[base], "name": path.stem, **data}
    data.setdefault("name", path.stem)
    return validate_config(data, source)


def config_hash(cfg: dict[str, Any], seed: int) -> str:
    """SHA-256 of the canonical JSON of the model-defining keys (name excluded) and the seed."""
    body = {k: cfg[k] for k in KEYS if k != "name"}
    text = json.dumps({"config": body, "seed": seed}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def q8_weight_bytes(cfg: dict[str, Any]) -> int:
    """Bytes of all Q8_0 matrices (34 bytes per 32 weights), matching the C++ total."""
    def mat(rows: int, cols: int) -> int:
        return rows * (cols // 32) * 34
    d, hd, f = cfg["d_model"], cfg["head_dim"], cfg["d_ff"]
    qd = cfg["n_heads"] * hd
    per_layer = mat(qd + 3 * hd, d) + mat(d, qd) + (cfg["n_experts"] + 1) * (mat(2 * f, d) + mat(d, f))
    return cfg["n_layers"] * per_layer + mat(cfg["vocab"], d)
