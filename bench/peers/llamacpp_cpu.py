"""Peer models for the llama.cpp comparison: random-weight Q8_0 GGUFs sized to ds4-mini.

Written by bench/peers/random_gguf.py (byte vocab). Two kinds, each with a feed-forward width
chosen so that one decode step reads about the counted bytes of a ds4-mini q1 token:
- `dense`: a llama, d_model 1024 and 6 layers like ds4-mini (attention q/k/v/o, gate/up/down,
  output head). Its whole file is what one step reads (~60 MiB), so a host whose last-level
  cache holds it (the Xeon's 300 MiB) serves llama.cpp from cache while ds4-mini streams.
- `moe`: a Qwen2-MoE with ds4-mini's layout (MOE_SHAPE): 6 layers, 8 query heads and one K/V
  head, 16 routed experts of which 2 per token plus a shared expert, an F32 router; the file
  (~270 MiB) is about ds4-mini's 259 MiB, so both sides have the same footprint and the same
  bytes per token.
GPU_SHAPE is the CUDA peer's (bench/peers/llamacpp_cuda.py).

The measurement is bench/peers/llamacpp_bench.py (llama.cpp's llama-bench, built natively by
scripts/build_llamacpp.sh); run() is the suite's peer section over it. Needs the `gguf` package
(extra `peer`); without it the section is skipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from bench.peers.random_gguf import Q8_BLOCK, VOCAB, LlamaShape, MoeShape, write_llama_gguf, write_moe_gguf
D_MODEL, N_LAYERS, N_HEAD = 1024, 6, 8
PEER_KINDS = ("dense", "moe")


@dataclass(frozen=True)
class Shape:
    """The peer llama's dimensions (the feed-forward width is chosen per target bytes)."""

    d_model: int = D_MODEL
    n_layers: int = N_LAYERS
    n_head: int = N_HEAD


CPU_SHAPE = Shape()                   # ds4-mini's d_model and layers
# ds4-mini's MoE layout (engine/config.py): 16 routed experts, top 2, one shared expert, one
# K/V head of 128; the expert width is chosen per target bytes (moe_ffn_width).
MOE_SHAPE = MoeShape(D_MODEL, N_LAYERS, N_HEAD, n_head_kv=1, n_expert=16, n_used=2, ffn=0)
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


def _moe_parts(ffn: int, shape: MoeShape = MOE_SHAPE) -> dict:
    """Bytes of one MoE peer layer's parts as llama.cpp reads them: the attention matrices, the F32
    router rows (routed experts' and the shared expert's gate), one expert (gate/up/down), the head."""
    q8 = Q8_BLOCK / 32
    d = shape.d_model
    kv = d // shape.n_head * shape.n_head_kv
    return {"attn": (2 * d * d + 2 * kv * d) * q8, "router": (shape.n_expert + 1) * d * 4,
            "expert": 3 * d * ffn * q8, "head": VOCAB * d * q8}


def moe_union(ubatch: int, shape: MoeShape = MOE_SHAPE) -> float:
    """Expected distinct routed experts a ubatch of `ubatch` tokens uses in one layer, each token
    choosing n_used of n_expert uniformly and independently: n_expert (1 - (1 - n_used/n_expert)^u).
    Exactly n_used at u = 1. llama.cpp's per-expert matmul (mul_mat_id) skips experts no row uses;
    which experts its random router picks cannot be read from llama-bench, so at u > 1 this
    expectation stands in (if its tokens share experts more than that, its bytes are fewer than
    credited, which only lowers our ratio)."""
    e, k = shape.n_expert, shape.n_used
    return float(k) if ubatch == 1 else e * (1.0 - (1.0 - k / e) ** ubatch)


def moe_peer_bytes(ffn: int, shape: MoeShape = MOE_SHAPE) -> dict:
    """As peer_bytes, for the MoE peer: a decode step reads every layer's attention, router rows,
    shared expert and n_used routed experts, then the head; a prompt ubatch without the last token
    skips the last layer's FFN (router included) and the head."""
    p = _moe_parts(ffn, shape)
    layer_ffn = p["router"] + (1 + shape.n_used) * p["expert"]
    L = shape.n_layers
    return {"decode_step": int(L * (p["attn"] + layer_ffn) + p["head"]),
            "ubatch_no_logits": int(L * p["attn"] + (L - 1) * layer_ffn),
            "last_ubatch_extra": int(layer_ffn + p["head"]),
            "f32_per_step": int(L * p["router"]), "parts": p}


def moe_pp_bytes(ffn: int, prompt: int, ubatch: int, shape: MoeShape = MOE_SHAPE) -> int:
    """Weight bytes llama.cpp reads processing a `prompt`-token prompt in ubatches of `ubatch`
    tokens on the MoE peer: per ubatch all attention and the first L-1 layers' router rows, shared
    expert and moe_union(ubatch) routed experts; the last token's last FFN and the head once."""
    p = _moe_parts(ffn, shape)
    L = shape.n_layers
    per_ubatch = L * p["attn"] + (L - 1) * (p["router"] + (1 + moe_union(ubatch, shape)) * p["expert"])
    last = p["router"] + (1 + shape.n_used) * p["expert"] + p["head"]
    return int(math.ceil(prompt / ubatch) * per_ubatch + last)


def moe_ffn_width(bytes_per_token: float, shape: MoeShape = MOE_SHAPE) -> int:
    """Expert width (multiple of 32) whose decode-step bytes best match the target."""
    return min(range(32, 8192, 32), key=lambda f: abs(moe_peer_bytes(f, shape)["decode_step"] - bytes_per_token))


def build_moe_gguf(path: Path, ffn: int, seed: int = 0, shape: MoeShape = MOE_SHAPE) -> int:
    """Writes the MoE peer (bench/peers/random_gguf.py write_moe_gguf); returns the vocab size."""
    write_moe_gguf(path, MoeShape(shape.d_model, shape.n_layers, shape.n_head, shape.n_head_kv,
                                  shape.n_expert, shape.n_used, ffn),
                   name="dflash-peer-random-moe-q8_0", seed=seed)
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

    r = llamacpp_bench.measure(list(threads), max(repeats, 1), llamacpp_bench.llama_bin(None), ["dense"])
    dense = r["peers"]["dense"]
    rows = []
    for t, samples in dense["per_threads"].items():
        s = samples[-1]
        rows.append({"engine": "llama.cpp (llama-bench)", "threads": int(t), "gbs_1": s["llama_ub1_gbs"],
                     "gbs_4": s["llama_ub4_gbs"], "tok_s_1": s["llama_ub1_tok_s"], "tok_s_4": s["llama_ub4_tok_s"],
                     "ours_over_llamacpp_1": s["ratio_q1_ub1"], "ours_over_llamacpp_4": s["ratio_q4_ub4"]})
        rows.append({"engine": "dflash ds4-mini", "threads": int(t), "gbs_1": s["ours_q1_gbs"],
                     "gbs_4": s["ours_q4_gbs"], "tok_s_1": s["ours_q1_tok_s"], "tok_s_4": s["ours_q4_tok_s"]})
    desc = (f"llama-bench ({r['llama_simd']}), random Q8_0 llama GGUF, ffn {dense['ffn']}; 1 column: our q1 prefill vs "
            f"`-ub 1`, 4 columns: our q4 bands vs `-ub 4`, {llamacpp_bench.PROMPT}-token prompt, bytes as read "
            "(bench/peers/llamacpp_bench.py states the rule)")
    return {"description": desc, "ffn": dense["ffn"], "raw": r, "rows": rows}
