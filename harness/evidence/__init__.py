"""Evidence directories: the format (files), the only writer under one (writer, redact), the one
sealing path of every kind (sealing) and the strict reader (reader). Format: docs/evidence-format.md.
"""
from __future__ import annotations

from .difference import first_difference
from .files import (INCOMPLETE, MANIFEST, MANIFEST_SCHEMA, MANIFEST_VERSION, PARTIAL_SUFFIX, RESERVED,
                    STAMP_FORMAT, check_rel_path, dumps_json, manifest_sha256, parse_json, sha256_file,
                    tool_version)
from .reader import Evidence, incomplete_reason, load_evidence, read_json, read_jsonl
from .redact import REDACTED, Redactor
from .sealing import Interrupted, Sealed, Session, seal, secrets_of, signals_ignored, signals_raise
from .writer import EvidenceWriter

__all__ = ["INCOMPLETE", "MANIFEST", "MANIFEST_SCHEMA", "MANIFEST_VERSION", "PARTIAL_SUFFIX",
           "RESERVED", "STAMP_FORMAT", "REDACTED", "Evidence", "EvidenceWriter", "Interrupted",
           "Redactor", "Sealed", "Session", "check_rel_path", "dumps_json", "first_difference",
           "incomplete_reason", "load_evidence", "manifest_sha256", "parse_json", "read_json",
           "read_jsonl", "seal", "secrets_of", "sha256_file", "signals_ignored", "signals_raise",
           "tool_version"]
