"""Real third-party servers for tests: llama-server built from source, a tiny random-weight GGUF.

llama-server comes from scripts/build_llamacpp.sh (llama.cpp vendored in the llama-cpp-python
sdist, built natively into a cache outside the repo; a second call builds nothing). When it
is not built yet, tests skip with the command to run, unless DQ_REQUIRE_REAL_SERVERS=1 (CI
sets it after building), which turns a missing build into a failure. DQ_LLAMA_BIN points at
another bin/ folder holding llama-server.

The GGUF is written by bench/peers/random_gguf.py (the `gguf` package, nothing downloaded),
like the peer models but tiny so a server starts in about a second: llama
architecture, d_model 128, 2 layers, 4 heads, feed-forward 256, random Q8_0 weights, a
byte-level vocab (256 GPT-2-spelled bytes, BOS, EOS, one merge). No chat template: commands
pass llama-server's built-in `--chat-template chatml`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bench.peers.random_gguf import LlamaShape, write_llama_gguf

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "scripts" / "build_llamacpp.sh"
REQUIRE_ENV = "DQ_REQUIRE_REAL_SERVERS"
BIN_ENV = "DQ_LLAMA_BIN"

D_MODEL, N_LAYERS, N_HEAD, FFN, CTX = 128, 2, 4, 256, 1024
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


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A tiny random-weight Q8_0 llama GGUF at path (deterministic in seed)."""
    return write_llama_gguf(path, LlamaShape(D_MODEL, N_LAYERS, N_HEAD, FFN, CTX),
                            name="dflash-test-tiny-q8_0", seed=seed, q_gain=QK_GAIN)


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
