"""The registry of evidence kinds: one table, KINDS, maps each kind's name to its Kind (protocol
schema, run flow, analysis, verify recompute, report pages; harness/kinds/base.py).

Nothing outside this package asks which kind a protocol or an evidence directory is: the CLI,
`verify`, `report` and `gate` look the kind up here and call its fields. A new kind is one
subpackage exposing Kind objects and one `register()` call (the built-in kinds below).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from .. import protocol as protocol_mod
from ..errors import UsageError
from ..evidence import EvidenceWriter, Sealed, read_json, seal as seal_evidence
from .base import Kind, Page

KINDS: dict[str, Kind] = {}

__all__ = ["KINDS", "Kind", "Page", "register", "unregister", "lookup", "for_evidence",
           "for_command", "load", "seal", "qualify", "of_directory", "Sealed"]


def register(kind: Kind) -> Kind:
    """Add a kind to KINDS (its name must be new); returns it."""
    if kind.name in KINDS:
        raise ValueError(f"evidence kind {kind.name!r} is already registered")
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind (tests that registered one of their own)."""
    KINDS.pop(name, None)


def lookup(name: str) -> Kind:
    """The kind registered under `name` (UsageError naming the registered kinds if none)."""
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError("unknown evidence kind", field="kind",
                         expected=" | ".join(KINDS), got=name) from None


def for_command(command: str) -> list[Kind]:
    """The kinds whose protocol files `dflash-qualify <command>` runs, in registration order."""
    return [k for k in KINDS.values() if k.command == command]


def for_evidence(protocol_json: object) -> Kind:
    """The kind of an evidence directory, from its protocol.json (unknown or unreadable: the
    first kind `run` runs, whose own checks then name what is wrong)."""
    if isinstance(protocol_json, dict):
        for kind in KINDS.values():
            if kind.claims is not None and kind.claims(protocol_json):
                return kind
        named = protocol_json.get("kind")
        if isinstance(named, str) and named in KINDS:
            return KINDS[named]
    return for_command("run")[0]


def of_directory(root: Path) -> Kind:
    """The kind of the evidence directory `root` (see for_evidence)."""
    try:
        protocol_json = read_json(root, "protocol.json")
    except Exception:  # noqa: BLE001 - unreadable: verify reports the file itself
        protocol_json = None
    return for_evidence(protocol_json)


def load(spec: str | None, *, command: str, **overrides: Any) -> Any:
    """Load the protocol file (a path or a bundled name) that `dflash-qualify <command>` runs.

    The file is read and parsed once (protocol.read_document); its `kind` picks the Kind whose
    schema resolves it. A kind that another command runs is a usage error naming that command;
    a missing or unknown kind is left to the command's first kind's schema, which names it.
    Returns the loaded protocol (protocol.LoadedProtocol).
    """
    kinds = for_command(command)
    if not kinds:
        raise UsageError(f"no evidence kind is run by `dflash-qualify {command}`")
    document = protocol_mod.read_document(spec or kinds[0].default_protocol)
    named = document.doc.get("kind")
    kind = KINDS.get(named) if isinstance(named, str) else None
    if kind is not None and kind.schema is not None and kind.command not in (None, command):
        article = "an" if kind.name[:1] in "aeiou" else "a"
        raise UsageError(f"{article} {kind.name} protocol: run it with `dflash-qualify "
                         f"{kind.command}`", file=document.display, field="kind")
    if kind is None or kind.schema is None or kind.command != command:
        kind = kinds[0]
    return kind.schema(document, **overrides)


def seal(kind: Kind | str, loaded: Any, out_root: str | Path, *, invocation: str,
         options: Mapping[str, Any] | None = None,
         writer_factory: Callable[..., EvidenceWriter] | None = None) -> Sealed:
    """Run one kind through the one sealing path (harness.evidence.sealing.seal)."""
    kind = lookup(kind) if isinstance(kind, str) else kind
    return seal_evidence(kind, loaded, out_root, invocation=invocation, options=options,
                         registry=KINDS, writer_factory=writer_factory)


def qualify(loaded: Any, out_root: str | Path, *, invocation: str,
            make_target: Callable | None = None, on_event: Callable | None = None,
            writer_factory: Callable[..., EvidenceWriter] | None = None) -> Sealed:
    """`run`: a loaded protocol (bracket or compare) end to end, its evidence sealed.

    Raises:
        RunFailed: a target failed, a timeout, a cache hit under the cold policy, or an
            interrupt; the evidence directory stays <name>.partial with INCOMPLETE saying why.
    """
    return seal(loaded.resolved["kind"], loaded, out_root, invocation=invocation,
                options={"make_target": make_target, "on_event": on_event},
                writer_factory=writer_factory)


def _register_builtin() -> None:
    from .bracket import BRACKET, COMPARE
    from .calibration import CALIBRATION
    from .exactness import EXACTNESS
    for kind in (BRACKET, COMPARE, CALIBRATION, EXACTNESS):
        register(kind)


_register_builtin()
