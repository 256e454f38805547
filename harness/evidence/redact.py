"""Secret scrubbing for everything the evidence writer writes: text, JSON and gzip members."""
from __future__ import annotations

import gzip
import io
import zlib
from typing import Any, Iterable

REDACTED = "<redacted>"
_GZIP_MAGIC = b"\x1f\x8b"
MIN_SECRET_LEN = 4  # shorter values would scrub ordinary text (and are no secret worth the name)


class Redactor:
    """Replaces every occurrence of each secret value with "<redacted>".

    Secrets are scrubbed longest first, so a secret that contains another is scrubbed whole.
    Gzip files are scrubbed member by member: decompressed, scrubbed and, only when a secret
    was found, written again as one deterministic member (mtime 0), so a file without secrets
    keeps its exact bytes.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        unique = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LEN}
        self.secrets: tuple[str, ...] = tuple(sorted(unique, key=lambda s: (-len(s), s)))
        self._encoded = tuple(s.encode("utf-8") for s in self.secrets)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for value in self.secrets:
            text = text.replace(value, REDACTED)
        return text

    def obj(self, obj: Any) -> Any:
        """A copy of a JSON-ready object with secrets scrubbed from every string (keys too)."""
        if not self.secrets:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.obj(v) for v in obj]
        return obj

    def raw(self, data: bytes) -> bytes:
        """``data`` with every secret's UTF-8 bytes replaced (no gzip handling)."""
        for value in self._encoded:
            data = data.replace(value, REDACTED.encode())
        return data

    def data(self, data: bytes) -> bytes:
        """Bytes of any file: gzip streams are scrubbed inside their members, others as is."""
        if not self.secrets:
            return data
        if data[:2] == _GZIP_MAGIC:
            inner = _gunzip(data)
            if inner is not None:
                clean = self.raw(inner)
                if clean == inner and self.raw(data) == data:
                    return data
                return gzip.compress(clean, mtime=0)
        return self.raw(data)


def _gunzip(data: bytes) -> bytes | None:
    """Every member of a gzip stream, concatenated; None if it is not valid gzip."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            return f.read()
    except (OSError, EOFError, zlib.error):
        return None
