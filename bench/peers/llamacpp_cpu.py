"""Peer model for the llama.cpp comparison: a random-weight Q8_0 llama GGUF sized to ds4-mini.

The GGUF is written locally with the `gguf` package (nothing is downloaded): llama architecture,
d_model 1024 like ds4-mini, 6 layers, full-width K/V heads, a feed-forward width chosen so that
the Q8_0 matmul bytes per token (attention q/k/v/o, gate/up/down, output head) match the counted
bytes per token of a ds4-mini q1 step; random int8 quants with scales that keep activations O(1);
a minimal byte-level vocab (256 byte tokens in GPT-2's byte-to-unicode spelling, BOS, EOS, and
one merge, since llama.cpp's BPE loader requires merges). Token ids are fed directly.

The measurement is bench/peers/llamacpp_bench.py (llama.cpp's llama-bench, built natively by
scripts/build_llamacpp.sh); run() is the suite's peer section over it. Needs the `gguf` package
(extra `peer`); without it the section is skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

Q8_BLOCK = 34  # bytes per 32 weights: fp16 scale + 32 int8
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


def _byte_tokens() -> list[str]:
    """GPT-2's reversible byte -> unicode spelling of the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    spell = dict(zip(bs, (chr(c) for c in cs)))
    return [spell[b] for b in range(256)]


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


def _q8_raw(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q8_0 bytes of a (rows, cols) weight: per block fp16 scale, then 32 int8 in [-127, 127]."""
    nb = cols // 32
    raw = np.empty((rows, nb, Q8_BLOCK), dtype=np.uint8)
    raw[:, :, 2:] = rng.integers(-127, 128, size=(rows, nb, 32), dtype=np.int8).view(np.uint8)
    scale = np.float16(1.0 / (73.0 * np.sqrt(cols)))  # unit-variance outputs for unit inputs
    raw[:, :, :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    return raw.reshape(rows, nb * Q8_BLOCK)


def build_gguf(path: Path, ffn: int, seed: int = 0, shape: Shape = CPU_SHAPE) -> int:
    """Writes the model; returns the vocab size."""
    import gguf

    d_model, n_layers, n_head = shape.d_model, shape.n_layers, shape.n_head

    tokens = _byte_tokens() + ["<s>", "</s>", "ĠĠ"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("dflash-peer-random-q8_0")
    w.add_context_length(1024)
    w.add_embedding_length(d_model)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(d_model // n_head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL])
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def q(name: str, rows: int, cols: int) -> None:
        w.add_tensor(name, _q8_raw(rng, rows, cols), raw_dtype=q8)

    def ones(name: str) -> None:
        w.add_tensor(name, np.ones(d_model, dtype=np.float32))

    q("token_embd.weight", vocab, d_model)
    for i in range(n_layers):
        ones(f"blk.{i}.attn_norm.weight")
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            q(f"blk.{i}.{t}.weight", d_model, d_model)
        ones(f"blk.{i}.ffn_norm.weight")
        q(f"blk.{i}.ffn_gate.weight", ffn, d_model)
        q(f"blk.{i}.ffn_up.weight", ffn, d_model)
        q(f"blk.{i}.ffn_down.weight", d_model, ffn)
    ones("output_norm.weight")
    q("output.weight", vocab, d_model)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return vocab


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
