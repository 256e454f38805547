"""The evidence format's fixed parts: names, the manifest's version, relative-path rules,
hashing and canonical/strict JSON (docs/evidence-format.md, version 1). No IO beyond reading."""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from pathlib import Path

MANIFEST = "manifest.json"
INCOMPLETE = "INCOMPLETE"
PARTIAL_SUFFIX = ".partial"
MANIFEST_SCHEMA = "dflash-qualify.manifest"
# Version history:
#   1: first version: schema, version, created_utc, tool_version, files [{path, size, sha256}]
MANIFEST_VERSION = 1
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
RESERVED = (MANIFEST, INCOMPLETE)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CHUNK = 1 << 20
MARKER_MAX = 4096  # bytes of INCOMPLETE that are read back


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
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def manifest_sha256(evidence_dir: Path) -> str:
    """The evidence id: SHA-256 of manifest.json's bytes."""
    return hashlib.sha256((Path(evidence_dir) / MANIFEST).read_bytes()).hexdigest()


def dumps_json(obj) -> str:
    """Canonical JSON text of evidence files: indent 2, sorted keys, UTF-8, no NaN, newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


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


