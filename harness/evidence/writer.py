"""The only writer under an evidence directory: atomic files, secret scrubbing of every byte
written (harness/evidence/redact.py), the INCOMPLETE marker and sealing by manifest.

A directory is written as `<name>.partial/` holding `INCOMPLETE`, and sealed by writing
`manifest.json` last, removing `INCOMPLETE` and renaming to `<name>/`; a crashed run therefore
never looks sealed.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ..errors import UsageError
from .files import (INCOMPLETE, MANIFEST, MANIFEST_SCHEMA, MANIFEST_VERSION, NAME_RE, PARTIAL_SUFFIX,
                    RESERVED, STAMP_FORMAT, check_rel_path, dumps_json, manifest_sha256, sha256_file,
                    tool_version)
from .redact import Redactor


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EvidenceWriter:
    """Writes one evidence directory atomically and seals it with a manifest.

    Every byte it writes passes through its Redactor first: each secret value (see
    harness.evidence.sealing.secrets_of) is replaced by "<redacted>" in text, in JSON strings
    and inside gzip members, so no caller can put a secret into evidence by forgetting to.
    """

    def __init__(self, path: Path, final_path: Path, secrets: Iterable[str] = ()) -> None:
        self.path = path
        self.final_path = final_path
        self.redactor = Redactor(secrets)
        self._sealed = False
        self._incomplete = False
        self._tmp_counter = 0

    @classmethod
    def create(cls, root: Path, name: str, *, now: datetime | None = None,
               secrets: Iterable[str] = ()) -> "EvidenceWriter":
        """Make `<root>/<stamp>-<name>.partial/` (INCOMPLETE = "running"), reserving a free final
        name; `secrets` are scrubbed from every file written into it."""
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise UsageError("invalid evidence name", field="name",
                             expected="letters, digits, '.', '_' or '-'", got=name)
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create evidence root: {exc.strerror}", file=str(root)) from exc
        now = now or datetime.now(timezone.utc)
        if now.tzinfo is None:
            now = now.replace(tzinfo=timezone.utc)
        base = f"{now.astimezone(timezone.utc).strftime(STAMP_FORMAT)}-{name}"
        for n in range(1, 10_000):
            final_name = base if n == 1 else f"{base}-{n}"
            final = root / final_name
            partial = root / (final_name + PARTIAL_SUFFIX)
            if os.path.lexists(final):
                continue
            try:
                os.mkdir(partial)
            except FileExistsError:
                continue
            writer = cls(partial, final, secrets)
            writer.write_text(INCOMPLETE, "running", _internal=True)
            return writer
        raise UsageError("no free evidence directory name", file=str(root / base))

    # -- writing -----------------------------------------------------------------------
    def _target(self, rel: str, internal: bool = False) -> Path:
        if self._sealed:
            raise RuntimeError(f"evidence {self.final_path} is sealed; nothing may be written")
        problem = check_rel_path(rel)
        if problem:
            raise ValueError(f"evidence path {rel!r} {problem}")
        if rel in RESERVED and not internal:
            raise ValueError(f"evidence path {rel!r} is reserved")
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_bytes(self, rel: str, data: bytes, *, _internal: bool = False) -> None:
        """Write `rel` atomically (temp file + fsync + rename), secrets scrubbed."""
        self._write_exact(rel, self.redactor.data(bytes(data)), _internal)

    def _write_exact(self, rel: str, data: bytes, internal: bool) -> None:
        target = self._target(rel, internal)
        self._tmp_counter += 1
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{self._tmp_counter}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:  # e.g. ENOSPC: leave no temp file behind, keep the old target
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def write_text(self, rel: str, text: str, *, _internal: bool = False) -> None:
        """Write UTF-8 text atomically."""
        self.write_bytes(rel, text.encode("utf-8"), _internal=_internal)

    def write_json(self, rel: str, obj: Any) -> None:
        """Write canonical JSON (indent 2, sorted keys, no ASCII escaping, trailing newline);
        secrets are scrubbed from its strings before it is encoded, then from its text."""
        self.write_text(rel, dumps_json(self.redactor.obj(obj)))

    def append_jsonl(self, rel: str, record: dict) -> None:
        """Append one JSON line and flush + fsync, so a crash loses at most this record."""
        target = self._target(rel)
        record = self.redactor.obj(record)
        line = json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
        # unbuffered: a buffered file would retry a failed tail on close, after the truncate
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(self.redactor.raw(line.encode("utf-8")))
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except BaseException:  # e.g. ENOSPC: drop the torn record, keep the earlier ones
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)

    def store_response(self, data: bytes) -> str:
        """Store response bytes once as responses/<sha256>.bin; return the hex digest (of the
        bytes stored: a response that echoed a secret is stored, and named, scrubbed)."""
        data = self.redactor.data(bytes(data))
        digest = hashlib.sha256(data).hexdigest()
        rel = f"responses/{digest}.bin"
        if not (self.path / rel).exists():
            self._write_exact(rel, data, False)
        return digest

    def mark_incomplete(self, reason: str) -> None:
        """Record why this run is not sealed; the directory stays `.partial` for good.

        If the atomic write fails (a full disk has no room for a temp file), the reason is
        written over the existing marker in place, which needs no new blocks for a short text.
        """
        self._incomplete = True
        reason = self.redactor.text(reason)
        try:
            self.write_text(INCOMPLETE, reason, _internal=True)
        except OSError:
            data = reason.encode("utf-8")[:4000]
            with open(self.path / INCOMPLETE, "r+b") as f:
                f.write(data)
                f.truncate(len(data))
                f.flush()
                os.fsync(f.fileno())

    # -- sealing -----------------------------------------------------------------------
    def seal(self) -> tuple[Path, str]:
        """Write manifest.json last, remove INCOMPLETE, rename to the final name; return (path, id)."""
        if self._sealed:
            raise RuntimeError(f"evidence {self.final_path} is already sealed")
        if self._incomplete:
            raise RuntimeError(f"evidence {self.path} was marked incomplete and cannot be sealed")
        files = []
        for dirpath, dirnames, filenames in os.walk(self.path):
            dirnames.sort()
            for fn in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                full = Path(dirpath) / fn
                rel = full.relative_to(self.path).as_posix()
                if rel in RESERVED:
                    continue
                if full.is_symlink() or not full.is_file():
                    raise RuntimeError(f"evidence {self.path}: {rel} is not a regular file")
                size, digest = sha256_file(full)
                files.append({"path": rel, "size": size, "sha256": digest})
        files.sort(key=lambda e: e["path"])
        manifest = {"schema": MANIFEST_SCHEMA, "version": MANIFEST_VERSION,
                    "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    "tool_version": tool_version(), "files": files}
        self._write_exact(MANIFEST, dumps_json(manifest).encode("utf-8"), True)
        os.unlink(self.path / INCOMPLETE)
        _fsync_dir(self.path)
        final = self.final_path
        n = 2
        while os.path.lexists(final):  # someone took the reserved name: never overwrite
            final = self.final_path.with_name(f"{self.final_path.name}-{n}")
            n += 1
        os.rename(self.path, final)
        _fsync_dir(final.parent)
        self.path = self.final_path = final
        self._sealed = True
        return final, manifest_sha256(final)


