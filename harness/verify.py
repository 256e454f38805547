"""Verify an evidence directory: re-hash every file against the manifest, then recompute its
results through its kind (harness.kinds: the required files and the recompute step).

Never raises on hostile input: every finding is a Problem (path + what), and anything
unexpected becomes one too. Checks follow docs/evidence-format.md and DESIGN.md
("verify re-hashes everything, rejects missing, extra, modified, linked or
path-escaping entries, and recomputes stats from raw samples").
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import kinds
from .evidence import (MANIFEST, MANIFEST_SCHEMA, MANIFEST_VERSION, check_rel_path, dumps_json,
                       incomplete_reason, parse_json, sha256_file)

MANIFEST_KEYS = {"schema", "version", "created_utc", "tool_version", "files"}
MANIFEST_MAX_BYTES = 64 << 20  # ~300k entries; a larger manifest.json is not ours
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_UTC_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


@dataclass(frozen=True)
class Problem:
    """One verification finding: the evidence-relative path and what is wrong with it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class VerifyResult:
    """Outcome of verify(): ok only when there are no problems."""

    path: Path
    manifest_sha: str | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(printable(path), printable(message)))


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROL.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


def printable(text: str) -> str:
    """`text` safe to print on one line: undecodable file-name bytes (surrogate escapes) and
    control or line-break characters are shown as backslash escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.translate(_CONTROL)


def not_evidence(directory: Path) -> str | None:
    """Why `directory` is not an evidence directory at all (one line), or None when it holds a
    manifest.json (then `verify` checks it). Unsealed runs (INCOMPLETE, or DIR.partial beside
    a missing DIR) are named with their reason."""
    directory = Path(directory)
    if os.path.lexists(directory / MANIFEST):
        return None
    partial = directory.parent / (directory.name + ".partial")  # "." has no name: no sibling
    if directory.name and not os.path.lexists(directory) and os.path.isdir(partial):
        why = incomplete_reason(partial) or "incomplete"
        return (f"{printable(str(directory))} is not an evidence directory: it does not exist, but "
                f"{printable(str(partial))} is an unsealed run ({printable(why)}; no manifest.json)")
    if not os.path.isdir(directory):
        return f"{printable(str(directory))}: " + (
            "not a directory" if os.path.lexists(directory) else "does not exist")
    reason = incomplete_reason(directory)
    if reason:
        return (f"{printable(str(directory))} is an unsealed run, not sealed evidence "
                f"({printable(reason)}; no manifest.json)")
    return f"{printable(str(directory))} is not an evidence directory (no manifest.json)"


def verify(evidence_dir: Path) -> VerifyResult:
    """Check one evidence directory; return every problem found (never raises)."""
    evidence_dir = Path(evidence_dir)
    result = VerifyResult(evidence_dir)
    try:
        _verify(evidence_dir, result)
    except Exception as exc:  # noqa: BLE001 - hostile input must become a finding, not a crash
        result.add(".", f"unexpected error while verifying: {type(exc).__name__}: {exc}")
    return result


def _verify(root: Path, result: VerifyResult) -> None:
    if os.path.islink(root):
        result.add(".", "the evidence directory itself is a symbolic link")
        return
    if not os.path.isdir(root):  # os.path: False (not OSError) for names the OS refuses
        result.add(".", "not a directory" if os.path.exists(root) else "does not exist")
        return
    reason = incomplete_reason(root)
    if reason:
        result.add(".", reason)
    on_disk = _scan(root, result)
    manifest_entries = _read_manifest(root, result)
    if manifest_entries is None:
        return
    listed = {}
    for i, entry in enumerate(manifest_entries):
        listed.setdefault(entry["path"], entry)
    for rel, entry in sorted(listed.items()):
        if rel not in on_disk:
            target = root / rel
            if os.path.isdir(target) and not os.path.islink(target):
                result.add(rel, "listed in manifest.json as a file but is a directory")
            elif not os.path.lexists(target):
                result.add(rel, "missing (listed in manifest.json, not on disk)")
            # else: a link or special file, already reported by the scan
            continue
        size = os.lstat(root / rel).st_size
        if size != entry["size"]:  # never hash a file of the wrong size (it may be huge)
            result.add(rel, f"modified: size {size} bytes, manifest says {entry['size']}")
            continue
        size, digest = sha256_file(root / rel)
        if size != entry["size"]:
            result.add(rel, f"modified: size {size} bytes, manifest says {entry['size']}")
        elif digest != entry["sha256"]:
            result.add(rel, f"modified: sha256 {digest}, manifest says {entry['sha256']}")
        elif rel.startswith("responses/") and rel != f"responses/{digest}.bin":
            result.add(rel, f"a stored response must be named by its SHA-256 "
                            f"(responses/{digest}.bin)")
    for rel in sorted(set(on_disk) - set(listed) - {MANIFEST}):
        result.add(rel, "extra file (on disk, not listed in manifest.json)")
    kind = kinds.of_directory(root)  # the registry: its required files and its recompute
    for rel in kind.required:
        if rel not in listed and rel not in on_disk:
            result.add(rel, "required file missing")
    if result.ok:  # recompute from files that are exactly what was sealed, never from others
        kind.recompute(root, result)


def _scan(root: Path, result: VerifyResult) -> set[str]:
    """Every regular file under root (relative posix paths); links and special files are problems."""
    files: set[str] = set()
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = Path(entry.path).relative_to(root).as_posix()
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    target = "?"
                result.add(rel, f"symbolic link (to {target}); evidence must hold regular files only")
            elif stat.S_ISDIR(st.st_mode):
                stack.append(Path(entry.path))
                with os.scandir(entry.path) as sub:
                    if next(sub, None) is None:
                        result.add(rel, "empty directory; evidence holds files only")
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    result.add(rel, f"hard-linked file ({st.st_nlink} links); evidence files must be unshared")
                files.add(rel)
            else:
                result.add(rel, "not a regular file")
    return files


def _read_manifest(root: Path, result: VerifyResult) -> list[dict] | None:
    path = root / MANIFEST
    if not os.path.lexists(path):
        result.add(MANIFEST, "missing: the directory is not sealed")
        return None
    if os.path.islink(path):
        return None  # reported by the scan
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        result.add(MANIFEST, "not a regular file: the directory is not sealed")
        return None
    if st.st_size > MANIFEST_MAX_BYTES:
        result.add(MANIFEST, f"{st.st_size} bytes, more than any manifest this tool writes "
                             f"({MANIFEST_MAX_BYTES})")
        return None
    data = path.read_bytes()
    result.manifest_sha = hashlib.sha256(data).hexdigest()
    try:
        manifest = parse_json(data)
    except ValueError as exc:
        result.add(MANIFEST, f"not valid JSON ({exc})")
        return None
    if not isinstance(manifest, dict):
        result.add(MANIFEST, f"expected a JSON object, got {type(manifest).__name__}")
        return None
    if manifest.get("schema") != MANIFEST_SCHEMA:
        result.add(MANIFEST, f"schema: expected {MANIFEST_SCHEMA!r}, got {manifest.get('schema')!r}")
        return None
    if manifest.get("version") != MANIFEST_VERSION or isinstance(manifest.get("version"), bool):
        result.add(MANIFEST, f"version: expected {MANIFEST_VERSION}, got {manifest.get('version')!r} "
                             "(this tool reads manifest version 1 only)")
        return None
    files = manifest.get("files")
    if not isinstance(files, list):
        result.add(MANIFEST, f"files: expected a list, got {type(files).__name__}")
        return None
    keys = set(manifest)
    if keys != MANIFEST_KEYS:
        result.add(MANIFEST, f"keys: expected exactly {sorted(MANIFEST_KEYS)}, got {sorted(keys)}")
    if not isinstance(manifest.get("created_utc"), str) or \
            not _UTC_RE.fullmatch(manifest.get("created_utc") or ""):
        result.add(MANIFEST, f"created_utc: expected a UTC time like 2026-11-29T11:45:00.000000Z, "
                             f"got {manifest.get('created_utc')!r}")
    if not isinstance(manifest.get("tool_version"), str) or not manifest.get("tool_version"):
        result.add(MANIFEST, f"tool_version: expected a non-empty string, "
                             f"got {manifest.get('tool_version')!r}")
    try:
        canonical = dumps_json(manifest).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escaped in the JSON: no canonical form
        canonical = None
    if data != canonical:
        result.add(MANIFEST, "not in the canonical form the sealer writes (indent 2, sorted keys, "
                             "UTF-8, trailing newline): its bytes were edited")
    good, seen = [], set()
    for i, entry in enumerate(files):
        where = f"files[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"path", "size", "sha256"}:
            result.add(MANIFEST, f"{where}: expected an object with exactly path, size, sha256, got {entry!r}")
            continue
        rel, size, digest = entry["path"], entry["size"], entry["sha256"]
        problem = check_rel_path(rel)
        if problem:
            result.add(MANIFEST, f"{where}: path {rel!r} {problem}")
            continue
        if rel == MANIFEST:
            result.add(MANIFEST, f"{where}: the manifest must not list itself")
            continue
        if rel in seen:
            result.add(MANIFEST, f"{where}: duplicate entry for {rel!r}")
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            result.add(MANIFEST, f"{where}: size of {rel!r}: expected an integer >= 0, got {size!r}")
            continue
        if not isinstance(digest, str) or not _SHA_RE.fullmatch(digest):
            result.add(MANIFEST, f"{where}: sha256 of {rel!r}: expected 64 lowercase hex digits, got {digest!r}")
            continue
        seen.add(rel)
        good.append(entry)
    paths = [e["path"] for e in files if isinstance(e, dict) and isinstance(e.get("path"), str)]
    if paths != sorted(paths):
        result.add(MANIFEST, "files: entries are not sorted by path")
    return good
