"""The typed exactness protocol: frozen dataclasses with one `from_json` (the only check of an
exactness protocol.json's shape) and one `to_json` (protocol.json itself).

`schema.from_document` validates a TOML file and types it through `from_json`; the trace flow,
the analysis and `verify` read an `ExactnessProtocol`. Adding a field: a dataclass field with
a default (None: absent from older evidence), read and checked in `from_json`, written by
`to_json` only when not None.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import UsageError
from ...protocol_model import EMPTY, freeze, thaw

KIND = "exactness"
LEVELS = ("raw", "digest")
EXPECTS = ("oracle", "bitwise", "differs")


def _bad(field_: str, expected: str, got: object) -> UsageError:
    return UsageError("invalid value", file="protocol.json", field=field_, expected=expected,
                      got=got)


def _table(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise _bad(where, "a table", type(value).__name__)
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(where, "a non-empty string", value)
    return value


def _int(value: object, where: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise _bad(where, f"an integer >= {low}", value)
    return value


def _list(value: object, where: str) -> list:
    if not isinstance(value, list) or not value:
        raise _bad(where, "a non-empty list", value)
    return value


@dataclass(frozen=True)
class TraceArm:
    """The q1 oracle (role reference, expect "oracle") or a candidate traced against it."""

    id: str
    label: str
    role: str
    env: Mapping[str, str | None]
    engine: Mapping[str, Any]
    expect: str                 # "oracle" | "bitwise" | "differs" (a negative control)
    chunk: int | None = None    # candidates: the prefill chunk its engine options give

    @classmethod
    def from_json(cls, arm: object, where: str) -> "TraceArm":
        arm = _table(arm, where)
        expect = arm.get("expect")
        if expect not in EXPECTS:
            raise _bad(f"{where}.expect", " | ".join(EXPECTS), expect)
        chunk = arm.get("chunk")
        return cls(id=_string(arm.get("id"), f"{where}.id"),
                   label=_string(arm.get("label"), f"{where}.label"),
                   role=_string(arm.get("role"), f"{where}.role"),
                   env=freeze(_table(arm.get("env"), f"{where}.env")),
                   engine=freeze(_table(arm.get("engine"), f"{where}.engine")), expect=expect,
                   chunk=None if chunk is None else _int(chunk, f"{where}.chunk", 1))

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "label": self.label, "role": self.role, "env": thaw(self.env),
               "engine": thaw(self.engine), "expect": self.expect}
        if self.chunk is not None:
            out["chunk"] = self.chunk
        return out


@dataclass(frozen=True)
class TraceRequest:
    """One traced request: its prompt text (inlined) and what it repeats or snapshots."""

    id: str
    source: str                 # "text" | "length" (a repeat carries its original's)
    text: str
    bytes: int
    sha256: str
    repeat_of: str | None = None
    snapshot_at: int | None = None
    length: int | None = None

    @classmethod
    def from_json(cls, req: object, where: str) -> "TraceRequest":
        req = _table(req, where)
        text = req.get("text")
        if not isinstance(text, str):
            raise _bad(f"{where}.text", "a string", text)
        repeat_of, snapshot_at, length = (req.get(k) for k in ("repeat_of", "snapshot_at",
                                                               "length"))
        return cls(id=_string(req.get("id"), f"{where}.id"),
                   source=_string(req.get("source"), f"{where}.source"), text=text,
                   bytes=_int(req.get("bytes"), f"{where}.bytes"),
                   sha256=_string(req.get("sha256"), f"{where}.sha256"),
                   repeat_of=None if repeat_of is None else _string(repeat_of, f"{where}.repeat_of"),
                   snapshot_at=None if snapshot_at is None
                   else _int(snapshot_at, f"{where}.snapshot_at", 1),
                   length=None if length is None else _int(length, f"{where}.length", 1))

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "source": self.source, "text": self.text, "bytes": self.bytes,
               "sha256": self.sha256, "repeat_of": self.repeat_of, "snapshot_at": self.snapshot_at}
        if self.length is not None:
            out["length"] = self.length
        return out


_KEYS = ("schema_version", "kind", "name", "description", "target", "trace", "max_tokens",
         "timeouts", "requests", "arms", "warnings", "source")


@dataclass(frozen=True)
class ExactnessProtocol:
    """An exactness protocol as protocol.json holds it (docs/evidence-format.md)."""

    name: str
    target: Mapping[str, Any]           # targets.options to_json (embedded or command)
    level: str                          # trace.level: "raw" | "digest"
    max_tokens: int
    start_s: float                      # timeouts.start_s
    request_s: float                    # timeouts.request_s
    requests: tuple[TraceRequest, ...]
    arms: tuple[TraceArm, ...]          # the oracle first, then the candidates
    schema_version: int | None = None
    description: str | None = None
    warnings: tuple[str, ...] | None = None
    source: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    kind: str = KIND

    @property
    def oracle(self) -> TraceArm:
        return self.arms[0]

    @property
    def candidates(self) -> tuple[TraceArm, ...]:
        return self.arms[1:]

    @classmethod
    def from_json(cls, protocol: object) -> "ExactnessProtocol":
        """Check an exactness protocol.json's shape (once) and type it.

        Raises:
            UsageError naming protocol.json, the field, what was expected and what was found.
        """
        p = _table(protocol, "(top level)")
        if p.get("kind") != KIND:
            raise _bad("kind", repr(KIND), p.get("kind"))
        target = _table(p.get("target"), "target")
        _string(target.get("kind"), "target.kind")
        trace = _table(p.get("trace"), "trace")
        if trace.get("level") not in LEVELS:
            raise _bad("trace.level", " | ".join(LEVELS), trace.get("level"))
        timeouts = _table(p.get("timeouts"), "timeouts")
        for key in ("start_s", "request_s"):
            v = timeouts.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise _bad(f"timeouts.{key}", "a number > 0", v)
        arms = tuple(TraceArm.from_json(a, f"arms[{i}]")
                     for i, a in enumerate(_list(p.get("arms"), "arms")))
        if arms[0].expect != "oracle" or any(a.expect == "oracle" for a in arms[1:]):
            raise _bad("arms", "the oracle first, then candidates", [a.expect for a in arms])
        requests = tuple(TraceRequest.from_json(q, f"requests[{i}]")
                         for i, q in enumerate(_list(p.get("requests"), "requests")))
        warnings = p.get("warnings")
        return cls(name=_string(p.get("name"), "name"), target=freeze(target),
                   level=trace["level"], max_tokens=_int(p.get("max_tokens"), "max_tokens", 1),
                   start_s=timeouts["start_s"], request_s=timeouts["request_s"],
                   requests=requests, arms=arms, schema_version=p.get("schema_version"),
                   description=p.get("description"),
                   warnings=None if warnings is None else freeze(warnings),
                   source=freeze(p.get("source")),
                   extra=freeze({k: v for k, v in p.items() if k not in _KEYS}))

    def to_json(self) -> dict[str, Any]:
        """protocol.json: every key from_json read, as it was (sorted by the JSON writer)."""
        out: dict[str, Any] = {
            "kind": self.kind, "name": self.name, "target": thaw(self.target),
            "trace": {"level": self.level, "max_tokens": self.max_tokens},
            "max_tokens": self.max_tokens,
            "timeouts": {"start_s": self.start_s, "request_s": self.request_s},
            "requests": [q.to_json() for q in self.requests],
            "arms": [a.to_json() for a in self.arms]}
        for key in ("schema_version", "description", "warnings", "source"):
            value = getattr(self, key)
            if value is not None:
                out[key] = thaw(value)
        out.update(thaw(self.extra))
        return out
