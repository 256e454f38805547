"""harness.protocol_model: the typed bracket/compare protocol is parsed once, frozen, and its
to_json is protocol.json byte for byte (bundled protocols, examples, sealed fixtures)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dflash_qualify.harness import protocol
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.evidence import dumps_json
from dflash_qualify.harness.protocol_model import Arm, Gate, Protocol, SchedulePlan

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "evidence"
TOML = sorted(str(p) for p in [*ROOT.glob("protocols/*.toml"), *ROOT.glob("examples/*.toml"),
                               *FIXTURES.rglob("*.toml")]
              if protocol.read_document(str(p)).doc.get("kind") in ("bracket", "compare"))
SEALED = sorted(str(p) for p in FIXTURES.glob("*/protocol.json")
                if json.loads(p.read_text()).get("kind") in ("bracket", "compare"))


def test_every_bracket_and_compare_file_is_covered():
    assert len(TOML) >= 10 and len(SEALED) >= 2


@pytest.mark.parametrize("path", TOML)
def test_from_toml_to_json_is_the_resolved_protocol(path):
    loaded = protocol.load(path)
    typed = loaded.protocol
    assert isinstance(typed, Protocol) and protocol.from_toml(path) == typed
    assert dumps_json(typed.to_json()) == dumps_json(protocol.from_document(
        protocol.read_document(path)).resolved)
    # the dict path of today (resolve + overrides) gives the same bytes
    doc = protocol.read_document(path)
    raw = protocol.resolve(doc.doc, file=doc.display, base_dir=doc.path.parent)
    raw.update(source=doc.source(), overrides={})
    assert dumps_json(typed.to_json()) == dumps_json(raw)


@pytest.mark.parametrize("path", SEALED)
def test_sealed_protocol_json_round_trips(path):
    stored = json.loads(Path(path).read_text())
    stored.pop("calibration", None)
    assert dumps_json(Protocol.from_json(stored).to_json()) == dumps_json(stored)
    with_calibration = json.loads(Path(path).read_text())
    assert Protocol.from_json(with_calibration).to_json() == with_calibration


def test_typed_protocol_is_frozen_and_typed():
    typed = protocol.from_toml("narrow-mmvq-compare")
    assert typed.compares_groups and not typed.gates_drift
    assert typed.analysis_groups == typed.groups and isinstance(typed.groups, tuple)
    assert isinstance(typed.arms[0], Arm) and isinstance(typed.gate, Gate)
    assert isinstance(typed.schedule_plan, SchedulePlan) and typed.candidate == "pr"
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.kind = "bracket"  # type: ignore[misc]
    with pytest.raises(TypeError):
        typed.arms[0].env["X"] = "1"  # type: ignore[index]
    bracket = protocol.from_toml("exact-bands-quick")
    assert bracket.gates_drift and bracket.analysis_groups == (None,)
    assert bracket.references == ("A", "B") and bracket.candidate == "cand"


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.update(kind="matrix"), "kind: invalid value (expected 'bracket' or 'compare', got 'matrix')"),
    (lambda p: p.update(direction="up"), "direction: invalid value (expected 'higher' or 'lower', got 'up')"),
    (lambda p: p.update(arms=[]), "arms: invalid value (expected a non-empty list, got [])"),
    (lambda p: p["arms"][1].update(role="x"), "arms[1].role: invalid value (expected 'reference' or 'candidate', got 'x')"),
    (lambda p: p["arms"][1].update(id="A"), "arms[1].id: invalid value (expected a unique arm id, got 'A')"),
    (lambda p: p.update(schedule=["A", "nope"]), "schedule: invalid value (expected a list of arm ids from"),
    (lambda p: p["gate"].update(confidence=1.5), "gate.confidence: invalid value (expected a number in (0, 1), got 1.5)"),
    (lambda p: p.update(schedule_plan={"kind": "zigzag"}), "schedule_plan: invalid value (expected a table whose kind is one of"),
    (lambda p: p.update(report={"decimals": 13}), "report.decimals: invalid value (expected an integer 0..12, got 13)"),
])
def test_from_json_names_file_field_expected_and_got(edit, message):
    stored = protocol.load("exact-bands-quick").resolved
    edit(stored)
    with pytest.raises(UsageError) as err:
        Protocol.from_json(stored)
    assert str(err.value).startswith("protocol.json: " + message)


def test_compare_groups_are_checked():
    stored = protocol.load("narrow-mmvq-compare").resolved
    stored["groups"] = ["a", "a"]
    with pytest.raises(UsageError, match=r"protocol.json: groups: invalid value \(expected unique"):
        Protocol.from_json(stored)


# ---------------------------------------------------------------------- exactness
from dflash_qualify.harness.kinds.exactness import schema as exactness_schema  # noqa: E402
from dflash_qualify.harness.kinds.exactness.model import ExactnessProtocol, TraceArm  # noqa: E402

EXACT_TOML = sorted(str(p) for p in [*ROOT.glob("protocols/*.toml"), *FIXTURES.rglob("*.toml")]
                    if protocol.read_document(str(p)).doc.get("kind") == "exactness")
EXACT_SEALED = sorted(str(p) for p in FIXTURES.glob("exact-*/protocol.json"))


@pytest.mark.parametrize("path", EXACT_TOML)
def test_exactness_from_toml_to_json_is_the_resolved_protocol(path):
    doc = protocol.read_document(path)
    raw = exactness_schema.resolve(doc.doc, file=doc.display)
    raw["source"] = doc.source()
    loaded = exactness_schema.from_document(doc)
    assert isinstance(loaded.protocol, ExactnessProtocol)
    assert isinstance(loaded.protocol.oracle, TraceArm) and loaded.protocol.oracle.expect == "oracle"
    assert dumps_json(loaded.protocol.to_json()) == dumps_json(raw) == dumps_json(loaded.resolved)


@pytest.mark.parametrize("path", EXACT_SEALED)
def test_exactness_sealed_protocol_json_round_trips(path):
    stored = json.loads(Path(path).read_text())
    assert dumps_json(ExactnessProtocol.from_json(stored).to_json()) == dumps_json(stored)


def test_exactness_from_json_names_the_field():
    stored = exactness_schema.load("exact-bands-trace").resolved
    stored["trace"]["level"] = "full"
    with pytest.raises(UsageError, match=r"^protocol.json: trace.level: invalid value \(expected raw \| digest, got 'full'\)"):
        ExactnessProtocol.from_json(stored)
    stored = exactness_schema.load("exact-bands-trace").resolved
    del stored["arms"][1]["env"]
    with pytest.raises(UsageError, match=r"^protocol.json: arms\[1\].env: invalid value \(expected a table"):
        ExactnessProtocol.from_json(stored)


# ---------------------------------------------------------------------- calibration
from dflash_qualify.harness.kinds.calibration.model import (  # noqa: E402
    CalibrationProtocol, CalibrationSettings)


def test_calibration_protocol_json_round_trips_and_names_fields():
    stored = json.loads((FIXTURES / "bracket-calibration" / "protocol.json").read_text())
    typed = CalibrationProtocol.from_json(stored)
    assert isinstance(typed.settings, CalibrationSettings) and isinstance(typed.bracket, Protocol)
    assert isinstance(typed.settings.n_grid, tuple)
    assert dumps_json(typed.to_json()) == dumps_json(stored)
    stored["calibration"]["n_grid"] = [4, 2]
    with pytest.raises(UsageError, match=r"^protocol.json: calibration.n_grid: invalid value"):
        CalibrationProtocol.from_json(stored)
