"""Matrix protocols (kind = "matrix", schema_version 1): a TOML file parsed into a frozen dataclass.

    schema_version = 1
    kind = "matrix"
    name = "bands-fleet"
    description = "exact bands on every GPU class"
    protocols = ["exact-bands-quick", "my/bracket.toml"]   # bundled names or paths
    hosts = ["gpu-h200", "zone=lab"]   # optional; default: every alive node
    warmups = 1                        # optional: override every cell protocol's arms
    measured = 5                       # optional
    [env]                              # optional: the Ray task's env on every node
    OMP_NUM_THREADS = "1"

A cell is one protocol on one host. `hosts` entries select Ray nodes: an entry `key=value` matches
a node label; a bare entry matches a node label key or a custom resource of that name. The
union of the entries' nodes is the matrix's hosts; an entry no alive node matches becomes a
failed cell per protocol (the verdict table shows the gap). The local executor has one host
(this machine) and ignores `hosts` (recorded in the matrix). Paths in `protocols` are relative
to the matrix file.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ... import protocol as protocol_mod
from ...errors import UsageError

KIND = "matrix"
# Schema history:
#   1: first version: kind, name, description, protocols, hosts, warmups, measured, [env].
SCHEMA_VERSION = 1
KEYS = {"schema_version", "kind", "name", "description", "protocols", "hosts", "warmups",
        "measured", "env"}
REQUIRED = ("schema_version", "kind", "name", "protocols")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,127}(=[A-Za-z0-9_./:-]{0,128})?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_PROTOCOLS = 64


@dataclass(frozen=True)
class HostSelector:
    """One `hosts` entry: a label `key=value`, or a bare name (label key or custom resource)."""

    text: str

    @property
    def key(self) -> str:
        return self.text.split("=", 1)[0]

    @property
    def value(self) -> str | None:
        return self.text.split("=", 1)[1] if "=" in self.text else None

    def matches(self, labels: Mapping[str, str], resources: Mapping[str, float]) -> bool:
        """True when a node with these Ray labels and resources is selected by this entry."""
        if self.value is not None:
            return labels.get(self.key) == self.value
        return self.key in labels or resources.get(self.key, 0) > 0


@dataclass(frozen=True)
class MatrixProtocol:
    """A validated matrix protocol: which protocols run on which hosts."""

    name: str
    description: str
    protocols: tuple[str, ...]             # as written (bundled names or paths)
    protocol_paths: tuple[str, ...]        # each entry resolved: a path, or the bundled name
    hosts: tuple[HostSelector, ...] = ()   # empty: every alive node
    warmups: int | None = None
    measured: int | None = None
    env: tuple[tuple[str, str], ...] = ()   # (NAME, value) sorted: the Ray task's env
    source_file: str = ""
    source_sha256: str = ""
    source_bytes: bytes = b""

    @classmethod
    def from_toml(cls, path: str | Path) -> "MatrixProtocol":
        """Read and validate a matrix file; UsageError (file, field, expected, got) on any problem."""
        path = Path(path)
        if not os.path.isfile(path):
            raise UsageError("no such matrix file", file=str(path))
        return from_document(protocol_mod.read_document(str(path)))

    @classmethod
    def from_doc(cls, doc: dict[str, Any], *, file: str, base_dir: Path,
                 raw: bytes = b"") -> "MatrixProtocol":
        """Validate a parsed TOML document (see the module docstring for the schema)."""
        def bad(fld: str, expected: str, got: object) -> UsageError:
            return UsageError("invalid value", file=file, field=fld, expected=expected, got=got)

        for key in doc:
            if key not in KEYS:
                raise UsageError(f"unknown key (allowed here: {', '.join(sorted(KEYS))})",
                                 file=file, field=key)
        for key in REQUIRED:
            if key not in doc:
                raise UsageError("missing required key", file=file, field=key)
        version = doc["schema_version"]
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise bad("schema_version", f"{SCHEMA_VERSION} (the only version this tool reads)", version)
        if doc["kind"] != KIND:
            raise bad("kind", f'"{KIND}"', doc["kind"])
        name = doc["name"]
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise bad("name", "letters, digits, '_', '-', '.' (at most 64)", name)
        description = doc.get("description", "")
        if not isinstance(description, str):
            raise bad("description", "a string", description)
        entries = doc["protocols"]
        if not isinstance(entries, list) or not entries or len(entries) > MAX_PROTOCOLS:
            raise bad("protocols", f"a list of 1 to {MAX_PROTOCOLS} protocol names or paths", entries)
        paths = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, str) or not entry or "\x00" in entry:
                raise bad(f"protocols[{i}]", "a bundled protocol name or a path", entry)
            paths.append(_resolve_entry(entry, base_dir))
        hosts_doc = doc.get("hosts", [])
        if not isinstance(hosts_doc, list):
            raise bad("hosts", 'a list of node labels ("key=value") or resource names', hosts_doc)
        hosts = []
        for i, entry in enumerate(hosts_doc):
            if not isinstance(entry, str) or not _HOST_RE.fullmatch(entry):
                raise bad(f"hosts[{i}]", 'a node label "key=value", a label key or a custom '
                                         'resource name', entry)
            if entry in {h.text for h in hosts}:
                raise bad(f"hosts[{i}]", "each host selector once", entry)
            hosts.append(HostSelector(entry))
        overrides = {}
        for key, lo in (("warmups", 0), ("measured", 1)):
            value = doc.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not lo <= value <= 100000):
                raise bad(key, f"an integer from {lo} to 100000", value)
            overrides[key] = value
        env_doc = doc.get("env", {})
        if not isinstance(env_doc, dict):
            raise bad("env", "a table of NAME = \"value\"", env_doc)
        env = {}
        for key, value in env_doc.items():
            if not _ENV_NAME_RE.fullmatch(key):
                raise bad(f"env.{key}", "an environment variable name", key)
            if not isinstance(value, str):
                raise bad(f"env.{key}", "a string value", value)
            env[key] = value
        return cls(name=name, description=description, protocols=tuple(entries),
                   protocol_paths=tuple(paths), hosts=tuple(hosts), warmups=overrides["warmups"],
                   measured=overrides["measured"], env=tuple(sorted(env.items())),
                   source_file=file, source_sha256=hashlib.sha256(raw).hexdigest(),
                   source_bytes=raw)

    @property
    def resolved(self) -> dict[str, Any]:
        """protocol.json of the matrix evidence (what the sealing path writes and redacts)."""
        return self.to_json()

    @property
    def protocol(self) -> "MatrixProtocol":
        """The typed protocol (a loaded protocol's `.protocol`): the matrix itself."""
        return self

    @classmethod
    def from_json(cls, resolved: dict[str, Any]) -> "MatrixProtocol":
        """The matrix back from its resolved form (protocol.json, or a Session's protocol);
        to_json's inverse for a matrix from_doc validated (no checks of its own)."""
        source = resolved.get("source") or {}
        return cls(name=resolved["name"], description=resolved.get("description", ""),
                   protocols=tuple(resolved["protocols"]),
                   protocol_paths=tuple(resolved["protocol_paths"]),
                   hosts=tuple(HostSelector(h) for h in resolved.get("hosts") or []),
                   warmups=resolved.get("warmups"), measured=resolved.get("measured"),
                   env=tuple(sorted((resolved.get("env") or {}).items())),
                   source_file=source.get("file", ""), source_sha256=source.get("sha256", ""))

    def to_json(self) -> dict[str, Any]:
        """The resolved matrix protocol (protocol.json of matrix evidence; no source bytes)."""
        return {"schema_version": SCHEMA_VERSION, "kind": KIND, "name": self.name,
                "description": self.description, "protocols": list(self.protocols),
                "protocol_paths": list(self.protocol_paths),
                "hosts": [h.text for h in self.hosts], "warmups": self.warmups,
                "measured": self.measured, "env": dict(self.env),
                "source": {"file": self.source_file, "sha256": self.source_sha256}}


def from_document(document: Any, **overrides: Any) -> MatrixProtocol:
    """The matrix schema for the kind registry: a read protocol document (harness.protocol
    .read_document) validated into a MatrixProtocol. No overrides apply to a matrix."""
    if overrides:
        raise UsageError("a matrix takes no command-line overrides (set warmups / measured in "
                         "the matrix file)", file=document.display, field=", ".join(overrides))
    return MatrixProtocol.from_doc(document.doc, file=document.display,
                                   base_dir=document.path.parent, raw=document.raw)


def _resolve_entry(entry: str, base_dir: Path) -> str:
    """A path-looking entry relative to the matrix file; a bare name stays a bundled name."""
    if entry.endswith(".toml") or "/" in entry:
        p = Path(entry)
        return str(p if p.is_absolute() else base_dir / p)
    return entry

