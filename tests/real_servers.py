"""Real third-party servers for tests: llama-server built from source, a tiny random-weight GGUF.

llama-server comes from scripts/build_llamacpp.sh (llama.cpp vendored in the llama-cpp-python
sdist, built natively into a cache outside the repo; a second call builds nothing). When it
is not built yet, tests skip with the command to run, unless DQ_REQUIRE_REAL_SERVERS=1 (CI
sets it after building), which turns a missing build into a failure. DQ_LLAMA_BIN points at
another bin/ folder holding llama-server.

The GGUF is written with the `gguf` package (nothing is downloaded), like
bench/peers/llamacpp_cpu.py but tiny so a server starts in about a second: llama
architecture, d_model 128, 2 layers, 4 heads, feed-forward 256, random Q8_0 weights, a
byte-level vocab (256 GPT-2-spelled bytes, BOS, EOS, one merge). No chat template: commands
pass llama-server's built-in `--chat-template chatml`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "scripts" / "build_llamacpp.sh"
REQUIRE_ENV = "DQ_REQUIRE_REAL_SERVERS"
BIN_ENV = "DQ_LLAMA_BIN"

Q8_BLOCK = 34                                # bytes per 32 weights: fp16 scale + 32 int8
D_MODEL, N_LAYERS, N_HEAD, FFN, CTX = 128, 2, 4, 256, 1024
BOS, EOS = 256, 257
# sharp attention: queries QK_GAIN x unit variance, so attention weights react to small changes
# in the keys (a -ctk q4_0 K cache then changes the greedy tokens of this tiny model)
QK_GAIN = 8.0


class NotBuilt(Exception):
    """llama-server is not available here (the message says how to get it)."""


def llama_bin(build: bool = False) -> Path:
    """The bin/ folder holding llama-server (and llama-bench).

    Args:
        build: build it when the cache is empty (minutes on 2 cores); otherwise only look.
    Raises:
        NotBuilt: not built (and build is False), or the build failed.
    """
    given = os.environ.get(BIN_ENV)
    if given:
        if not (Path(given) / "llama-server").is_file():
            raise NotBuilt(f"{BIN_ENV}={given} holds no llama-server")
        return Path(given)
    args = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--check"])
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        if build:
            raise NotBuilt(f"scripts/build_llamacpp.sh failed: {proc.stderr[-2000:]}")
        raise NotBuilt("llama-server is not built; run scripts/build_llamacpp.sh (or set "
                       f"{BIN_ENV}); CI sets {REQUIRE_ENV}=1")
    return Path(proc.stdout.strip().splitlines()[-1])


def _byte_tokens() -> list[str]:
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


def _q8_raw(rng: np.random.Generator, rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
    """Random Q8_0 bytes of a (rows, cols) weight: per block an fp16 scale, then 32 int8."""
    nb = cols // 32
    raw = np.empty((rows, nb, Q8_BLOCK), dtype=np.uint8)
    raw[:, :, 2:] = rng.integers(-127, 128, size=(rows, nb, 32), dtype=np.int8).view(np.uint8)
    scale = np.float16(gain / (73.0 * np.sqrt(cols)))  # gain 1: unit-variance outputs
    raw[:, :, :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    return raw.reshape(rows, nb * Q8_BLOCK)


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A tiny random-weight Q8_0 llama GGUF at path (deterministic in seed)."""
    import gguf

    tokens = _byte_tokens() + ["<s>", "</s>", "ĠĠ"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("dflash-test-tiny-q8_0")
    w.add_context_length(CTX)
    w.add_embedding_length(D_MODEL)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(D_MODEL // N_HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 2
                      + [gguf.TokenType.NORMAL])
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def q(name: str, rows: int, cols: int, gain: float = 1.0) -> None:
        w.add_tensor(name, _q8_raw(rng, rows, cols, gain), raw_dtype=q8)

    def ones(name: str) -> None:
        w.add_tensor(name, np.ones(D_MODEL, dtype=np.float32))

    q("token_embd.weight", vocab, D_MODEL)
    for i in range(N_LAYERS):
        ones(f"blk.{i}.attn_norm.weight")
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            q(f"blk.{i}.{t}.weight", D_MODEL, D_MODEL, QK_GAIN if t == "attn_q" else 1.0)
        ones(f"blk.{i}.ffn_norm.weight")
        q(f"blk.{i}.ffn_gate.weight", FFN, D_MODEL)
        q(f"blk.{i}.ffn_up.weight", FFN, D_MODEL)
        q(f"blk.{i}.ffn_down.weight", D_MODEL, FFN)
    ones("output_norm.weight")
    q("output.weight", vocab, D_MODEL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def server_command(bin_dir: Path, model: Path, *extra: str) -> list[str]:
    """A llama-server command template for a target ({host} and {port} filled per arm).

    One slot, one thread, a small context, no warm-up run, so a server starts in about a
    second on a 2-core machine.
    """
    return [str(bin_dir / "llama-server"), "-m", str(model), "--host", "{host}",
            "--port", "{port}", "-c", "512", "-np", "1", "-t", "1", "-tb", "1",
            "--no-warmup", "--chat-template", "chatml", *extra]


def have_gguf() -> bool:
    try:
        import gguf  # noqa: F401
    except ImportError:
        return False
    return shutil.which("bash") is not None
