"""Byte tokenizer (256 byte tokens + BOS + EOS) and validation of token inputs."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import EngineError

BOS = 256
EOS = 257
VOCAB = 258


def tokenize(text: str | bytes) -> list[int]:
    """UTF-8 bytes of `text` as token ids, with BOS prepended."""
    if isinstance(text, str):
        data = text.encode("utf-8")
    elif isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
    else:
        raise EngineError(f"tokenize expects str or bytes, got {type(text).__name__}")
    return [BOS, *data]


def detokenize(tokens: list[int]) -> bytes:
    """Byte tokens back to bytes; BOS/EOS are dropped."""
    return bytes(t for t in tokens if 0 <= t < 256)


def as_token_array(tokens: Any, *, vocab: int = VOCAB, what: str = "tokens") -> np.ndarray:
    """Validate a 1-D sequence of token ids and return it as contiguous int32.

    Accepts a list/tuple of ints or a 1-D numpy integer array; rejects empty input, other
    dtypes or shapes, bools, and ids outside 0..vocab-1.
    """
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise EngineError(f"{what} must be a 1-D array of token ids, got shape {tokens.shape}")
        if tokens.dtype.kind not in "iu":
            raise EngineError(f"{what} must have an integer dtype, got {tokens.dtype}")
        arr = tokens
    elif isinstance(tokens, (list, tuple)):
        for i, t in enumerate(tokens):
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                raise EngineError(f"{what}[{i}] must be an int token id, got {type(t).__name__} {t!r}")
            if not 0 <= t < vocab:  # before int64 conversion: 2**63 would overflow, not be refused
                raise EngineError(f"{what}[{i}] = {t} is out of range: token ids must be 0..{vocab - 1}")
        arr = np.asarray(tokens, dtype=np.int64) if tokens else np.zeros(0, dtype=np.int64)
    else:
        raise EngineError(f"{what} must be a list of ints or a 1-D integer numpy array, got {type(tokens).__name__}")
    if arr.size == 0:
        raise EngineError(f"{what} is empty: at least one token is required")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab:
        bad = lo if lo < 0 else hi
        idx = int(np.argmax(arr == bad))
        raise EngineError(f"{what}[{idx}] = {bad} is out of range: token ids must be 0..{vocab - 1}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def prompt_tokens(prompt: Any, *, vocab: int = VOCAB) -> list[int]:
    """A generate() prompt (str, bytes or token ids) as a validated list of ids."""
    if isinstance(prompt, (str, bytes, bytearray, memoryview)):
        toks = tokenize(prompt)
        if len(toks) == 1:
            raise EngineError("prompt is empty: give at least one byte of text")
        return toks
    return as_token_array(prompt, vocab=vocab, what="prompt").tolist()
