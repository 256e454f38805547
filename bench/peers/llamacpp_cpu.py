"""Peer model for the llama.cpp comparison: a random-weight Q8_0 llama GGUF sized to ds4-mini.

The GGUF is written by bench/peers/random_gguf.py (random Q8_0 llama, byte vocab): d_model
1024 like ds4-mini, 6 layers, a feed-forward width chosen so that the Q8_0 matmul bytes per
token (attention q/k/v/o, gate/up/down, output head) match the counted bytes per token of a
ds4-mini q1 step. GPU_SHAPE is the CUDA peer's (bench/peers/llamacpp_cuda.py).

The measurement is bench/peers/llamacpp_bench.py (llama.cpp's llama-bench, built natively by
scripts/build_llamacpp.sh); run() is the suite's peer section over it. Needs the `gguf` package
(extra `peer`); without it the section is skipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from bench.peers.random_gguf import Q8_BLOCK, VOCAB, LlamaShape, write_llama_gguf
D_MODEL, N_LAYERS, N_HEAD = 1024, 6, 8


@dataclass(frozen=True)
class Shape:
    """The peer llama's dimensions (the feed-forward width is chosen per target bytes)."""

    d_model: int = D_MODEL
    n_layers: int = N_LAYERS
    n_head: int = N_HEAD


CPU_SHAPE = Shape()                   # ds4-mini's d_model and layers
GPU_SHAPE = Shape(4096, 4, 32)        # about ds4-gpu's bytes per token with a wide d_model
PROMPT = 128
DECODE_STEPS = 32


def _missing() -> str | None:
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        return f"the optional extra `peer` is not installed ({exc.name} missing): pip install -e '.[peer]'"
    return None


def ffn_width(bytes_per_token: float, vocab: int, shape: Shape = CPU_SHAPE) -> int:
    """Feed-forward width (multiple of 32) whose matmul bytes per token best match the target."""
    d = shape.d_model
    per_weight = Q8_BLOCK / 32
    attn = 4 * d * d
    target_params = bytes_per_token / per_weight - vocab * d
    f = (target_params / shape.n_layers - attn) / (3 * d)
    return max(32, int(round(f / 32)) * 32)


def matmul_bytes(ffn: int, vocab: int, shape: Shape = CPU_SHAPE) -> int:
    d = shape.d_model
    params = shape.n_layers * (4 * d * d + 3 * d * ffn) + vocab * d
    return params // 32 * Q8_BLOCK


def peer_bytes(ffn: int, shape: Shape = CPU_SHAPE) -> dict:
    """Weight bytes llama.cpp reads from the peer model: per decode step (every matmul weight;
    token_embd is a row lookup), per prompt ubatch without the last token (no logits: it skips
    the last layer's FFN and the output head), and the extra of the ubatch holding it."""
    q8 = Q8_BLOCK / 32
    d = shape.d_model
    attn = 4 * d * d * q8
    ffn_b = 3 * d * ffn * q8
    head = VOCAB * d * q8
    return {"decode_step": int(shape.n_layers * (attn + ffn_b) + head),
            "ubatch_no_logits": int(shape.n_layers * attn + (shape.n_layers - 1) * ffn_b),
            "last_ubatch_extra": int(ffn_b + head)}


def pp_bytes(b: dict, prompt: int, ubatch: int) -> int:
    """Weight bytes of processing a `prompt`-token prompt in ubatches of `ubatch` tokens."""
    return math.ceil(prompt / ubatch) * b["ubatch_no_logits"] + b["last_ubatch_extra"]


def build_gguf(path: Path, ffn: int, seed: int = 0, shape: Shape = CPU_SHAPE) -> int:
    """Writes the peer model (bench/peers/random_gguf.py); returns the vocab size."""
    write_llama_gguf(path, LlamaShape(shape.d_model, shape.n_layers, shape.n_head, ffn),
                     name="dflash-peer-random-q8_0", seed=seed)
    return VOCAB


def run(suite_out: dict, threads: list[int], quick: bool = False, repeats: int = 1) -> dict:
    """Peer section of the suite: bench/peers/llamacpp_bench.py (llama-bench, interleaved with
    our q1 and q4 on ds4-mini) for one round per thread count."""
    why = _missing()
    if why:
        print(f"peer: skipped: {why}")
        return {"skipped": why}
    if quick or suite_out.get("model") != "ds4-mini":
        return {"skipped": "quick run (the peer is sized to ds4-mini)"}
    from . import llamacpp_bench

    r = llamacpp_bench.measure(list(threads), max(repeats, 1), llamacpp_bench.llama_bin(None))
    rows = []
    for t, samples in r["per_threads"].items():
        s = samples[-1]
        rows.append({"engine": "llama.cpp (llama-bench)", "threads": int(t), "gbs_1": s["llama_ub1_gbs"],
                     "gbs_4": s["llama_ub4_gbs"], "tok_s_1": s["llama_ub1_tok_s"], "tok_s_4": s["llama_ub4_tok_s"],
                     "ours_over_llamacpp_1": s["ratio_q1_ub1"], "ours_over_llamacpp_4": s["ratio_q4_ub4"]})
        rows.append({"engine": "dflash ds4-mini", "threads": int(t), "gbs_1": s["ours_q1_gbs"],
                     "gbs_4": s["ours_q4_gbs"], "tok_s_1": s["ours_q1_tok_s"], "tok_s_4": s["ours_q4_tok_s"]})
    desc = (f"llama-bench ({r['llama_simd']}), random Q8_0 llama GGUF, ffn {r['ffn']}; 1 column: our q1 prefill vs "
            f"`-ub 1`, 4 columns: our q4 bands vs `-ub 4`, {llamacpp_bench.PROMPT}-token prompt, bytes as read "
            "(bench/peers/llamacpp_bench.py states the rule)")
    return {"description": desc, "ffn": r["ffn"], "raw": r, "rows": rows}
