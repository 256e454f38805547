"""An evidence writer that keeps what the Runner writes in memory: for benches that run many brackets without evidence directories."""
from __future__ import annotations

import hashlib


class MemoryWriter:
    """What the Runner writes, kept in memory (responses by SHA-256; records and logs dropped:
    the runner keeps its own samples and looks)."""

    def __init__(self) -> None:
        self.path = None
        self.responses: dict[str, bytes] = {}

    def append_jsonl(self, rel: str, record: dict) -> None:
        pass

    def write_text(self, rel: str, text: str) -> None:
        pass

    def store_response(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.responses[sha] = data
        return sha
