"""Random-weight Q8_0 GGUF files (the peer models of bench/peers and the tiny model of tests/real_servers.py).

Written with the `gguf` package, nothing downloaded: a dense llama (full-width K/V heads) or a
Qwen2-MoE (routed experts, a shared expert, grouped K/V heads: ds4-mini's kind of model),
random int8 quants with fp16 scales that keep activations O(1) (a gain per matrix kind), norms
of ones, and a minimal byte-level vocab: the 256 byte tokens in GPT-2's byte-to-unicode
spelling, BOS (256), EOS (257) and one merge token (llama.cpp's BPE loader requires merges).
Token ids are fed directly. The bytes depend only on the shape, the gains and the seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

Q8_BLOCK = 34  # bytes per 32 weights: fp16 scale + 32 int8
BOS, EOS = 256, 257
VOCAB = 259    # 256 bytes + BOS + EOS + one merge token


@dataclass(frozen=True)
class LlamaShape:
    """A llama's dimensions."""

    d_model: int
    n_layers: int
    n_head: int
    ffn: int
    ctx: int = 1024


@dataclass(frozen=True)
class MoeShape:
    """A Qwen2-MoE's dimensions: n_expert routed experts (top n_used per token) and one shared
    expert, each a gate/up/down of width ffn; n_head_kv K/V heads of d_model / n_head."""

    d_model: int
    n_layers: int
    n_head: int
    n_head_kv: int
    n_expert: int
    n_used: int
    ffn: int
    ctx: int = 1024


def byte_tokens() -> list[str]:
    """GPT-2's reversible byte -> unicode spelling of the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    spell = dict(zip(bs, (chr(c) for c in cs)))
    return [spell[b] for b in range(256)]


def q8_raw(rng: np.random.Generator, rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
    """Random Q8_0 bytes of a (rows, cols) weight: per 32-block an fp16 scale, then 32 int8 in
    [-127, 127]; gain 1 gives unit-variance outputs for unit-variance inputs."""
    nb = cols // 32
    raw = np.empty((rows, nb, Q8_BLOCK), dtype=np.uint8)
    raw[:, :, 2:] = rng.integers(-127, 128, size=(rows, nb, 32), dtype=np.int8).view(np.uint8)
    scale = np.float16(gain / (73.0 * np.sqrt(cols)))
    raw[:, :, :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    return raw.reshape(rows, nb * Q8_BLOCK)


def write_llama_gguf(path: Path, shape: LlamaShape, *, name: str, seed: int = 0,
                     q_gain: float = 1.0) -> Path:
    """Writes the model to path. q_gain scales the query weights (a sharper attention)."""
    import gguf

    d, ffn = shape.d_model, shape.ffn
    w = gguf.GGUFWriter(str(path), "llama")
    _common_keys(w, name, shape.ctx, d, shape.n_layers, ffn, shape.n_head, shape.n_head)
    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def q(tensor: str, rows: int, cols: int, gain: float = 1.0) -> None:
        w.add_tensor(tensor, q8_raw(rng, rows, cols, gain), raw_dtype=q8)

    def ones(tensor: str) -> None:
        w.add_tensor(tensor, np.ones(d, dtype=np.float32))

    q("token_embd.weight", VOCAB, d)
    for i in range(shape.n_layers):
        ones(f"blk.{i}.attn_norm.weight")
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            q(f"blk.{i}.{t}.weight", d, d, q_gain if t == "attn_q" else 1.0)
        ones(f"blk.{i}.ffn_norm.weight")
        q(f"blk.{i}.ffn_gate.weight", ffn, d)
        q(f"blk.{i}.ffn_up.weight", ffn, d)
        q(f"blk.{i}.ffn_down.weight", d, ffn)
    ones("output_norm.weight")
    q("output.weight", VOCAB, d)
    _finish(w)
    return path


def _common_keys(w, name: str, ctx: int, d: int, n_layers: int, ffn: int, n_head: int, n_head_kv: int) -> None:
    """Model keys every peer shares, and the byte-level vocab of the module header."""
    import gguf

    w.add_name(name)
    w.add_context_length(ctx)
    w.add_embedding_length(d)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(d // n_head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(byte_tokens() + ["<s>", "</s>", "ĠĠ"])
    w.add_token_types([gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 2
                      + [gguf.TokenType.NORMAL])
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_moe_gguf(path: Path, shape: MoeShape, *, name: str, seed: int = 0) -> Path:
    """Writes a Qwen2-MoE (llama.cpp arch `qwen2moe`): per layer q/k/v/o (k, v n_head_kv heads
    wide), an F32 router over the routed experts, the experts' gate/up/down as 3-D Q8_0 tensors,
    the shared expert's gate/up/down and its F32 gate row."""
    import gguf

    d, f, e = shape.d_model, shape.ffn, shape.n_expert
    kv = d // shape.n_head * shape.n_head_kv
    w = gguf.GGUFWriter(str(path), "qwen2moe")
    _common_keys(w, name, shape.ctx, d, shape.n_layers, f, shape.n_head, shape.n_head_kv)
    w.add_expert_count(e)
    w.add_expert_used_count(shape.n_used)
    w.add_expert_feed_forward_length(f)
    w.add_expert_shared_feed_forward_length(f)
    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def q(tensor: str, rows: int, cols: int, experts: int = 0) -> None:
        if experts:
            raw = np.stack([q8_raw(rng, rows, cols) for _ in range(experts)])
        else:
            raw = q8_raw(rng, rows, cols)
        w.add_tensor(tensor, raw, raw_dtype=q8)

    def f32(tensor: str, *shape_: int, value: float | None = None) -> None:
        a = (np.full(shape_, value, dtype=np.float32) if value is not None
             else (rng.standard_normal(shape_) / np.sqrt(shape_[-1])).astype(np.float32))
        w.add_tensor(tensor, a)

    q("token_embd.weight", VOCAB, d)
    for i in range(shape.n_layers):
        f32(f"blk.{i}.attn_norm.weight", d, value=1.0)
        q(f"blk.{i}.attn_q.weight", d, d)
        q(f"blk.{i}.attn_k.weight", kv, d)
        q(f"blk.{i}.attn_v.weight", kv, d)
        q(f"blk.{i}.attn_output.weight", d, d)
        f32(f"blk.{i}.ffn_norm.weight", d, value=1.0)
        f32(f"blk.{i}.ffn_gate_inp.weight", e, d)
        q(f"blk.{i}.ffn_gate_exps.weight", f, d, e)
        q(f"blk.{i}.ffn_up_exps.weight", f, d, e)
        q(f"blk.{i}.ffn_down_exps.weight", d, f, e)
        f32(f"blk.{i}.ffn_gate_inp_shexp.weight", d)
        q(f"blk.{i}.ffn_gate_shexp.weight", f, d)
        q(f"blk.{i}.ffn_up_shexp.weight", f, d)
        q(f"blk.{i}.ffn_down_shexp.weight", d, f)
    f32("output_norm.weight", d, value=1.0)
    q("output.weight", VOCAB, d)
    _finish(w)
    return path
