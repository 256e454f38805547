"""Prefix cache: session snapshots keyed by the SHA-256 of the prompt tokens they hold (LRU).

Only states produced by exact prefill are stored, and they are served only to exact
requests, so a cache hit can never change a response bit.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np


def tokens_key(tokens: list[int]) -> str:
    return hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).hexdigest()


class PrefixCache:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._entries: OrderedDict[str, tuple[tuple[int, ...], bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: list[int]) -> tuple[int, bytes | None]:
        """Longest stored prefix of `tokens` (possibly all of it): (length, snapshot)."""
        best_len, best_key = 0, None
        for key, (toks, _) in self._entries.items():
            n = len(toks)
            if best_len < n <= len(tokens) and tuple(tokens[:n]) == toks:
                best_len, best_key = n, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        return best_len, self._entries[best_key][1]

    def store(self, tokens: list[int], snapshot: bytes) -> None:
        if self.slots <= 0:
            return
        key = tokens_key(tokens)
        self._entries[key] = (tuple(tokens), snapshot)
        self._entries.move_to_end(key)
        while len(self._entries) > self.slots:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
