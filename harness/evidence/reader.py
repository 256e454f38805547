"""Reading evidence back: strict JSON and JSON-lines files, the INCOMPLETE marker, and the
loaded directory (`Evidence`) that reports and gate read. Never writes."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import EvidenceInvalid, UsageError
from .files import INCOMPLETE, MANIFEST, MARKER_MAX, PARTIAL_SUFFIX, manifest_sha256, parse_json


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
                head = f.read(MARKER_MAX)
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
