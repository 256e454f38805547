"""Evidence directories: the only writer under one (atomic files, sealing) and its strict loader.

Format: docs/evidence-format.md (version 1). A directory is written as `<name>.partial/`
holding `INCOMPLETE`, and sealed by writing `manifest.json` last, removing `INCOMPLETE`
and renaming to `<name>/`; a crashed run therefore never looks sealed.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import EvidenceInvalid, UsageError

MANIFEST = "manifest.json"
INCOMPLETE = "INCOMPLETE"
PARTIAL_SUFFIX = ".partial"
MANIFEST_SCHEMA = "dflash-qualify.manifest"
# Version history:
#   1: first version: schema, version, created_utc, tool_version, files [{path, size, sha256}]
MANIFEST_VERSION = 1
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
RESERVED = (MANIFEST, INCOMPLETE)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CHUNK = 1 << 20
_MARKER_MAX = 4096  # bytes of INCOMPLETE that are read back


def tool_version() -> str:
    """The installed dflash-qualify version, or "unknown" outside an install."""
    try:
        from importlib.metadata import version
        return version("dflash-qualify")
    except Exception:  # noqa: BLE001 - metadata missing is not an error here
        return "unknown"


def check_rel_path(rel: object) -> str | None:
    """Why `rel` is not an acceptable evidence-relative path (None if it is)."""
    if not isinstance(rel, str) or not rel:
        return "not a non-empty string"
    if "\\" in rel:
        return "contains a backslash"
    if rel.startswith("/") or re.match(r"^[A-Za-z]:", rel):
        return "is absolute"
    parts = rel.split("/")
    if ".." in parts:
        return "contains '..'"
    if posixpath.normpath(rel) != rel or "." in parts or "" in parts:
        return "is not a normalized path"
    if "\x00" in rel:
        return "contains a NUL byte"
    try:
        os.fsencode(rel)
    except UnicodeError:
        return "is not encodable as a file name (lone surrogate)"
    return None


def sha256_file(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a regular file, read without following a final symlink."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    h, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def manifest_sha256(evidence_dir: Path) -> str:
    """The evidence id: SHA-256 of manifest.json's bytes."""
    return hashlib.sha256((Path(evidence_dir) / MANIFEST).read_bytes()).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dumps_json(obj) -> str:
    """Canonical JSON text of evidence files: indent 2, sorted keys, UTF-8, no NaN, newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


class EvidenceWriter:
    """Writes one evidence directory atomically and seals it with a manifest."""

    def __init__(self, path: Path, final_path: Path) -> None:
        self.path = path
        self.final_path = final_path
        self._sealed = False
        self._incomplete = False
        self._tmp_counter = 0

    @classmethod
    def create(cls, root: Path, name: str, *, now: datetime | None = None) -> "EvidenceWriter":
        """Make `<root>/<stamp>-<name>.partial/` (INCOMPLETE = "running"), reserving a free final name."""
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
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
            writer = cls(partial, final)
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
        """Write `rel` atomically: temp file + fsync + rename."""
        target = self._target(rel, _internal)
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

    def write_json(self, rel: str, obj) -> None:
        """Write canonical JSON (indent 2, sorted keys, no ASCII escaping, trailing newline)."""
        self.write_text(rel, dumps_json(obj))

    def append_jsonl(self, rel: str, record: dict) -> None:
        """Append one JSON line and flush + fsync, so a crash loses at most this record."""
        target = self._target(rel)
        line = json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
        # unbuffered: a buffered file would retry a failed tail on close, after the truncate
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(line.encode("utf-8"))
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
        """Store response bytes once as responses/<sha256>.bin; return the hex digest."""
        digest = hashlib.sha256(data).hexdigest()
        rel = f"responses/{digest}.bin"
        if not (self.path / rel).exists():
            self.write_bytes(rel, data)
        return digest

    def mark_incomplete(self, reason: str) -> None:
        """Record why this run is not sealed; the directory stays `.partial` for good.

        If the atomic write fails (a full disk has no room for a temp file), the reason is
        written over the existing marker in place, which needs no new blocks for a short text.
        """
        self._incomplete = True
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
        self.write_text(MANIFEST, dumps_json(manifest), _internal=True)
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


# -- loading ---------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def parse_json(text: str | bytes):
    """Strict JSON: duplicate keys and NaN/Infinity are errors (ValueError)."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def read_json(evidence_dir: Path, rel: str):
    """Parse one JSON file of an evidence directory; EvidenceInvalid naming the file on failure."""
    path = Path(evidence_dir) / rel
    try:
        return parse_json(path.read_bytes())
    except FileNotFoundError:
        raise EvidenceInvalid(f"{path}: required file missing") from None
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise EvidenceInvalid(f"{path}: not valid JSON ({exc})") from None


def read_jsonl(evidence_dir: Path, rel: str) -> list[dict]:
    """Parse a JSON-lines file; every non-empty line must be a JSON object."""
    path = Path(evidence_dir) / rel
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise EvidenceInvalid(f"{path}: required file missing") from None
    except (OSError, ValueError) as exc:
        raise EvidenceInvalid(f"{path}: unreadable ({exc})") from None
    records = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except ValueError as exc:
            raise EvidenceInvalid(f"{path}: line {lineno}: not valid JSON ({exc})") from None
        if not isinstance(record, dict):
            raise EvidenceInvalid(f"{path}: line {lineno}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records


@dataclass(frozen=True)
class Evidence:
    """A loaded evidence directory: what reports and gate read."""

    path: Path
    protocol: dict
    environment: dict
    samples: list
    stats: dict
    manifest: dict | None
    manifest_sha: str | None

    def response_bytes(self, sha256: str) -> bytes:
        """Stored bytes of a response by its SHA-256 (KeyError if not stored or not a hash)."""
        if not re.fullmatch(r"[0-9a-f]{64}", str(sha256)):
            raise KeyError(sha256)
        try:
            return (self.path / "responses" / f"{sha256}.bin").read_bytes()
        except OSError:
            raise KeyError(sha256) from None


def incomplete_reason(evidence_dir: Path) -> str | None:
    """Why a directory is unsealed ("incomplete: <INCOMPLETE text>"), or None if it looks sealed."""
    evidence_dir = Path(evidence_dir)
    marker = evidence_dir / INCOMPLETE
    if os.path.lexists(marker):
        try:  # the first few KiB only: a hostile marker may be huge
            with open(marker, "rb") as f:
                head = f.read(_MARKER_MAX)
            text = head.decode("utf-8", errors="replace").strip() or "no reason recorded"
        except OSError:
            text = "INCOMPLETE unreadable"
        return f"incomplete: {text}"
    if evidence_dir.name.endswith(PARTIAL_SUFFIX):
        return "incomplete: directory name ends in .partial (never sealed)"
    return None


def load_evidence(evidence_dir: Path, *, require_sealed: bool = True) -> Evidence:
    """Load protocol, environment, samples, stats and the manifest id of an evidence directory.

    Does not re-hash (that is verify's job). Raises UsageError if the path is not a
    directory; EvidenceInvalid (naming the file) if it is unsealed or a file is malformed.
    """
    evidence_dir = Path(evidence_dir)
    if not os.path.isdir(evidence_dir):  # False, not OSError, for names the OS refuses
        raise UsageError("not an evidence directory", file=str(evidence_dir),
                         expected="a directory", got="missing" if not os.path.exists(evidence_dir) else "a file")
    manifest, sha = None, None
    if require_sealed:
        reason = incomplete_reason(evidence_dir)
        if reason:
            raise EvidenceInvalid(f"{evidence_dir}: {reason}")
        manifest = read_json(evidence_dir, MANIFEST)
        sha = manifest_sha256(evidence_dir)
    protocol = read_json(evidence_dir, "protocol.json")
    environment = read_json(evidence_dir, "environment.json")
    stats = read_json(evidence_dir, "stats.json")
    for rel, obj in (("protocol.json", protocol), ("environment.json", environment),
                     ("stats.json", stats), (MANIFEST, manifest if require_sealed else {})):
        if not isinstance(obj, dict):
            raise EvidenceInvalid(f"{evidence_dir / rel}: expected a JSON object, got {type(obj).__name__}")
    samples = read_jsonl(evidence_dir, "samples.jsonl")
    return Evidence(evidence_dir, protocol, environment, samples, stats, manifest, sha)
