"""The typed bracket/compare protocol: frozen dataclasses with one `from_json` (the only check of
protocol.json's shape) and one `to_json` (protocol.json itself).

`protocol.from_document` validates a TOML file and builds a `Protocol` through `from_json`;
`analysis`, calibration and `verify` read a `Protocol`, never a dict. A kind's traits (does it
compare prompt groups one by one, does its gate bound drift) are properties here, so shared code
never asks which kind it holds.

Adding a field: give the dataclass a field with a default (None: absent from older
protocol.json), read it in `from_json` (checking its shape there, with `_bad`), and emit it in
`to_json` only when it is not None, so old evidence still round-trips byte for byte.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from . import bracket_order
from .errors import UsageError

DIRECTIONS = ("higher", "lower")
ROLES = ("reference", "candidate")
DEFAULT_DECIMALS = 3
GATE_KEYS = ("min_gain_pct", "max_drift_pct", "require_identical", "confidence",
             "bootstrap_resamples", "seed")


@dataclass(frozen=True)
class Traits:
    """What a protocol kind means to the analysis and the reports."""

    compares_groups: bool   # every prompt is a group, compared on its own; arms pair by request
    gates_drift: bool       # the verdict bounds bracket drift (reference before vs after)


TRAITS = {"bracket": Traits(compares_groups=False, gates_drift=True),
          "compare": Traits(compares_groups=True, gates_drift=False)}


def traits_of(kind: object) -> Traits:
    """The traits of a protocol (or stats.json) kind; UsageError for a kind this schema lacks."""
    if kind not in TRAITS:
        raise _bad("kind", " or ".join(repr(k) for k in TRAITS), kind)
    return TRAITS[kind]  # type: ignore[index]


def gates_drift(kind: object) -> bool:
    """Whether stats.json of this kind carries a drift-bounding verdict (reports' drift lines)."""
    traits = TRAITS.get(kind) if isinstance(kind, str) else None
    return bool(traits and traits.gates_drift)


def _bad(field_: str, expected: str, got: object, file: str = "protocol.json") -> UsageError:
    return UsageError("invalid value", file=file, field=field_, expected=expected, got=got)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def freeze(value: Any) -> Any:
    """A JSON value made immutable: objects become read-only mappings, arrays tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """freeze's inverse: plain dicts and lists, ready for the JSON writer."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Gate:
    """The verdict's thresholds ([gate])."""

    min_gain_pct: float
    max_drift_pct: float
    require_identical: bool
    confidence: float
    bootstrap_resamples: int
    seed: int

    @classmethod
    def from_json(cls, gate: object, file: str = "protocol.json", prefix: str = "gate") -> "Gate":
        """Check a gate table (every key of GATE_KEYS); UsageError naming file and field."""
        if not isinstance(gate, dict):
            raise _bad(prefix, "a table", type(gate).__name__, file)
        for key in GATE_KEYS:
            if key not in gate:
                raise _bad(f"{prefix}.{key}", "a value", None, file)
        for key in ("min_gain_pct", "max_drift_pct"):
            if not _is_number(gate[key]):
                raise _bad(f"{prefix}.{key}", "a finite number", gate[key], file)
        if not isinstance(gate["require_identical"], bool):
            raise _bad(f"{prefix}.require_identical", "true or false", gate["require_identical"],
                       file)
        if not _is_number(gate["confidence"]) or not 0 < gate["confidence"] < 1:
            raise _bad(f"{prefix}.confidence", "a number in (0, 1)", gate["confidence"], file)
        for key, low in (("bootstrap_resamples", 1), ("seed", 0)):
            v = gate[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise _bad(f"{prefix}.{key}", f"an integer >= {low}", v, file)
        return cls(**{k: gate[k] for k in GATE_KEYS})

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in GATE_KEYS}


@dataclass(frozen=True)
class SchedulePlan:
    """The bracket order ({kind, seed, rounds}; harness.bracket_order)."""

    kind: str
    seed: int | None = None
    rounds: int | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: EMPTY)  # keys older or newer evidence carries, kept as stored

    @classmethod
    def from_json(cls, plan: object) -> "SchedulePlan":
        if not isinstance(plan, dict) or plan.get("kind") not in bracket_order.KINDS:
            raise _bad("schedule_plan", "a table whose kind is one of "
                       + ", ".join(bracket_order.KINDS), plan)
        rest = {k: v for k, v in plan.items() if k not in ("kind", "seed", "rounds")}
        return cls(kind=plan["kind"], seed=plan.get("seed"), rounds=plan.get("rounds"),
                   extra=freeze(rest))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.seed, "rounds": self.rounds, **thaw(self.extra)}


_ARM_KEYS = ("id", "label", "role", "warmups", "measured", "env", "engine", "command", "url",
             "ref", "build")


@dataclass(frozen=True)
class Arm:
    """One arm: its id, label and role, and what it runs (None: absent from protocol.json)."""

    id: str
    label: str
    role: str
    warmups: int | None = None
    measured: int | None = None
    env: Mapping[str, str | None] | None = None     # None value: the variable is unset
    engine: Mapping[str, Any] | None = None
    command: tuple[str, ...] | None = None
    url: str | None = None
    ref: str | None = None                       # [build]: the git ref this arm is built from
    build: Mapping[str, Any] | None = None       # [build]: commit, artifact SHA-256s (builds.py)
    extra: Mapping[str, Any] = field(default_factory=lambda: EMPTY)

    @classmethod
    def from_json(cls, arm: object, i: int) -> "Arm":
        if not isinstance(arm, dict):
            raise _bad(f"arms[{i}]", "a table", type(arm).__name__)
        arm_id = arm.get("id")
        if not isinstance(arm_id, str) or not arm_id:
            raise _bad(f"arms[{i}].id", "a non-empty string", arm_id)
        if arm.get("role") not in ROLES:
            raise _bad(f"arms[{i}].role", "'reference' or 'candidate'", arm.get("role"))
        label = arm.get("label", arm_id)
        if not isinstance(label, str):
            raise _bad(f"arms[{i}].label", "a string", label)
        if arm.get("ref") is not None and not isinstance(arm["ref"], str):
            raise _bad(f"arms[{i}].ref", "a git ref (a string)", arm["ref"])
        build = arm.get("build")
        if build is not None and not (isinstance(build, dict) and isinstance(build.get("commit"), str)
                                      and isinstance(build.get("artifacts"), dict)):
            raise _bad(f"arms[{i}].build", "a build record with commit and artifacts", build)
        return cls(id=arm_id, label=label, role=arm["role"], warmups=arm.get("warmups"),
                   measured=arm.get("measured"), env=freeze(arm.get("env")),
                   engine=freeze(arm.get("engine")), command=freeze(arm.get("command")),
                   url=arm.get("url"), ref=arm.get("ref"), build=freeze(build),
                   extra=freeze({k: v for k, v in arm.items() if k not in _ARM_KEYS}))

    def to_json(self) -> dict[str, Any]:
        out = {k: thaw(getattr(self, k)) for k in _ARM_KEYS}
        return {**{k: v for k, v in out.items() if v is not None}, **thaw(self.extra)}


@dataclass(frozen=True)
class _Stored:
    """Which defaulted keys protocol.json held (so to_json writes back exactly those)."""

    schedule: bool = True
    schedule_plan: bool = True


# protocol.json keys carried as frozen JSON values (validated by protocol.resolve on load)
_PLAIN_KEYS = ("schema_version", "name", "description", "target", "max_tokens", "cache",
               "timeouts", "prompts", "warnings", "exactness", "source", "overrides", "report",
               "build", "sequential")
_TYPED_KEYS = ("kind", "metric", "direction", "arms", "schedule", "groups", "gate",
               "schedule_plan")


@dataclass(frozen=True)
class Protocol:
    """A bracket or compare protocol as protocol.json holds it (docs/evidence-format.md)."""

    kind: str
    metric: str
    direction: str                      # "higher" | "lower": which way is better
    arms: tuple[Arm, ...]
    schedule: tuple[str, ...]           # arm ids in bracket order
    gate: Gate
    schedule_plan: SchedulePlan
    groups: tuple[str, ...] | None = None   # compare: prompt ids; bracket: ()
    decimals: int = DEFAULT_DECIMALS        # report.decimals
    schema_version: int | None = None
    name: str | None = None
    description: str | None = None
    target: Mapping[str, Any] | None = None
    max_tokens: int | None = None
    cache: str | None = None
    timeouts: Mapping[str, Any] | None = None
    prompts: tuple[Mapping[str, Any], ...] | None = None
    warnings: tuple[str, ...] | None = None
    exactness: Mapping[str, Any] | None = None
    source: Mapping[str, Any] | None = None
    overrides: Mapping[str, Any] | None = None
    report: Mapping[str, Any] | None = None
    build: Mapping[str, Any] | None = None   # [build]: repo, command, artifacts (builds.py)
    # [measure] sequential = true: {"max_rounds", "max_seconds"} (harness/sequential.py)
    sequential: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: EMPTY)    # keys another kind adds (e.g. calibration), as stored
    # derived once in from_json: schedule order with every arm, references first to last
    references: tuple[str, ...] = field(default=(), compare=False)
    candidate: str = field(default="", compare=False)
    _stored: _Stored = field(default=_Stored(), compare=False, repr=False)

    # ------------------------------------------------------------------ traits
    @property
    def traits(self) -> Traits:
        return TRAITS[self.kind]

    @property
    def compares_groups(self) -> bool:
        """Every prompt is a group compared on its own, arms paired request by request."""
        return self.traits.compares_groups

    @property
    def gates_drift(self) -> bool:
        """The verdict bounds drift between the first and last reference."""
        return self.traits.gates_drift

    @property
    def analysis_groups(self) -> tuple[str | None, ...]:
        """The groups the analysis compares: the prompt ids, or (None,) for one comparison."""
        return tuple(self.groups or ()) if self.compares_groups else (None,)

    def arm(self, arm_id: str) -> Arm:
        return next(a for a in self.arms if a.id == arm_id)

    @property
    def arm_ids(self) -> tuple[str, ...]:
        return tuple(a.id for a in self.arms)

    # ------------------------------------------------------------------ JSON
    @classmethod
    def from_json(cls, protocol: object) -> "Protocol":
        """Check protocol.json's shape (once) and type it.

        Raises:
            UsageError naming protocol.json, the field, what was expected and what was found.
        """
        if not isinstance(protocol, dict):
            raise _bad("(top level)", "an object", type(protocol).__name__)
        kind = protocol.get("kind")
        if kind not in TRAITS:
            raise _bad("kind", "'bracket' or 'compare'", kind)
        metric = protocol.get("metric")
        if not isinstance(metric, str) or not metric:
            raise _bad("metric", "a metric name", metric)
        direction = protocol.get("direction")
        if direction not in DIRECTIONS:
            raise _bad("direction", "'higher' or 'lower'", direction)
        arms_in = protocol.get("arms")
        if not isinstance(arms_in, list) or not arms_in:
            raise _bad("arms", "a non-empty list", arms_in)
        arms: dict[str, Arm] = {}
        for i, raw in enumerate(arms_in):
            arm = Arm.from_json(raw, i)
            if arm.id in arms:
                raise _bad(f"arms[{i}].id", "a unique arm id", arm.id)
            arms[arm.id] = arm
        schedule = protocol.get("schedule", [a.id for a in arms.values()])
        if not isinstance(schedule, list) or not all(isinstance(s, str) and s in arms
                                                     for s in schedule):
            raise _bad("schedule", f"a list of arm ids from {sorted(arms)}", schedule)
        order = list(dict.fromkeys(schedule + list(arms)))
        references = [a for a in order if arms[a].role == "reference"]
        candidates = [a for a in order if arms[a].role == "candidate"]
        if not references:
            raise _bad("arms", "at least one arm with role 'reference'",
                       [a.role for a in arms.values()])
        if len(candidates) != 1:
            raise _bad("arms", "exactly one arm with role 'candidate'", candidates)
        groups = protocol.get("groups")
        if TRAITS[kind].compares_groups:
            if not isinstance(groups, list) or not groups or not all(isinstance(g, str)
                                                                     for g in groups):
                raise _bad("groups", "a non-empty list of strings", groups)
            if len(set(groups)) != len(groups):
                raise _bad("groups", "unique group names", groups)
        report = protocol.get("report", {})
        if not isinstance(report, dict):
            raise _bad("report", "a table", type(report).__name__)
        decimals = report.get("decimals", DEFAULT_DECIMALS)
        if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= 12:
            raise _bad("report.decimals", "an integer 0..12", decimals)
        seq = protocol.get("sequential")
        if seq is not None and not (
                isinstance(seq, dict) and set(seq) == {"max_rounds", "max_seconds"}
                and kind == "bracket" and len(references) == 2
                and all(_is_number(seq[k]) and seq[k] > 0 for k in seq)):
            raise _bad("sequential", "{max_rounds, max_seconds} > 0 on a bracket with two "
                       "reference arms", seq)
        plan = SchedulePlan.from_json(protocol.get("schedule_plan", bracket_order.DEFAULT))
        gate = Gate.from_json(protocol.get("gate"))
        plain = {k: freeze(protocol[k]) for k in _PLAIN_KEYS if k in protocol}
        extra = {k: v for k, v in protocol.items() if k not in _PLAIN_KEYS + _TYPED_KEYS}
        return cls(kind=kind, metric=metric, direction=direction, arms=tuple(arms.values()),
                   schedule=tuple(schedule), gate=gate, schedule_plan=plan,
                   groups=None if groups is None else freeze(groups), decimals=decimals,
                   extra=freeze(extra), references=tuple(references), candidate=candidates[0],
                   _stored=_Stored("schedule" in protocol, "schedule_plan" in protocol),
                   **plain)

    def to_json(self) -> dict[str, Any]:
        """protocol.json: every key from_json read, as it was (sorted by the JSON writer)."""
        out: dict[str, Any] = {"kind": self.kind, "metric": self.metric,
                               "direction": self.direction,
                               "arms": [a.to_json() for a in self.arms], "gate": self.gate.to_json()}
        if self._stored.schedule:
            out["schedule"] = list(self.schedule)
        if self._stored.schedule_plan:
            out["schedule_plan"] = self.schedule_plan.to_json()
        if self.groups is not None:
            out["groups"] = list(self.groups)
        for key in _PLAIN_KEYS:
            value = getattr(self, key)
            if value is not None:
                out[key] = thaw(value)
        out.update(thaw(self.extra))
        return out


