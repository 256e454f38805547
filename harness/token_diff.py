"""First differing token: where two generations' token ids part, with both ids and their texts.

Pure: token id lists (and optional per-token texts) in, a JSON-ready dict out. Used by the
response identity check when a target returns token ids (llama.cpp's /completion with
return_tokens; the embedded worker); otherwise a mismatch is located by byte only.
"""
from __future__ import annotations

from typing import Any, Sequence


def _tokens(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                       for t in value):
        return value
    return None


def _texts(value: Any, n: int) -> list[str] | None:
    if isinstance(value, list) and len(value) == n and all(isinstance(t, str) for t in value):
        return value
    return None


def first_token_difference(want: Sequence[int], got: Sequence[int],
                           want_texts: Sequence[str] | None = None,
                           got_texts: Sequence[str] | None = None) -> dict[str, Any] | None:
    """The first index where two token sequences differ (the shorter length if one is a prefix).

    Args:
        want: the reference response's token ids. got: the differing response's.
        want_texts / got_texts: each token's text, aligned with the ids (optional).
    Returns:
        None if the sequences are equal, else {"index", "reference_token", "token",
        "reference_text", "text", "reference_tokens", "tokens"}; a missing side (past the end
        of the shorter sequence) is None.
    """
    if list(want) == list(got):
        return None
    index = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))

    def at(seq: Sequence[Any] | None, i: int) -> Any:
        return seq[i] if seq is not None and i < len(seq) else None

    return {"index": index, "reference_token": at(want, index), "token": at(got, index),
            "reference_text": at(want_texts, index), "text": at(got_texts, index),
            "reference_tokens": len(want), "tokens": len(got)}


def of_samples(reference: dict[str, Any], sample: dict[str, Any]) -> dict[str, Any] | None:
    """first_token_difference of two sample records, or None when either carries no token ids."""
    want, got = _tokens(reference.get("response_tokens")), _tokens(sample.get("response_tokens"))
    if want is None or got is None:
        return None
    return first_token_difference(
        want, got, _texts(reference.get("response_token_texts"), len(want)),
        _texts(sample.get("response_token_texts"), len(got)))


def describe(diff: dict[str, Any]) -> str:
    """'first differing token at index 3: 1234 ' the' (reference 99 ' a')' for reports."""
    def one(token: Any, text: Any) -> str:
        if token is None:
            return "(none: the response ended)"
        return f"{token} {text!r}" if isinstance(text, str) else str(token)

    return (f"first differing token at index {diff['index']}: "
            f"{one(diff['token'], diff['text'])} "
            f"(reference {one(diff['reference_token'], diff['reference_text'])}; "
            f"{diff['tokens']} vs reference {diff['reference_tokens']} tokens)")
