"""The typed calibration protocol: an A/A bracket (protocol_model.Protocol) and its
`calibration` table (CalibrationSettings), each with one `from_json` and one `to_json`.

Adding a setting: a CalibrationSettings field, its default in DEFAULTS, its check in
`from_json`, and its value in `to_json` (stats.json `settings` is to_json's output, so older
evidence without the field must still produce what it stored: give it a default there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import UsageError
from ...protocol_model import Protocol, freeze, thaw

EFFECTS_PCT = (1.0, 2.0, 3.0, 5.0, 10.0)
N_GRID = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 100)
DEFAULTS = {"repeats": 10, "simulations": 1000, "seed": 0, "effects_pct": list(EFFECTS_PCT),
            "target_effect_pct": 5.0, "target_power": 0.8, "max_false_rate_pct": 1.0,
            "n_grid": list(N_GRID)}


def _bad(field: str, expected: str, got: object) -> UsageError:
    return UsageError("invalid value", file="protocol.json", field=field, expected=expected, got=got)


@dataclass(frozen=True)
class CalibrationSettings:
    """How many A/A repeats and simulations, the effects and N grid, the pass threshold."""

    repeats: int
    simulations: int
    seed: int
    effects_pct: tuple[float, ...]
    target_effect_pct: float
    target_power: float
    max_false_rate_pct: float
    n_grid: tuple[int, ...]

    @classmethod
    def from_json(cls, protocol: object) -> "CalibrationSettings":
        """The `calibration` table of a protocol.json, checked (UsageError naming the field)."""
        c = protocol.get("calibration") if isinstance(protocol, dict) else None
        if not isinstance(c, dict):
            raise _bad("calibration", "a table", c)
        for key in DEFAULTS:
            if key not in c:
                raise _bad(f"calibration.{key}", "a value", None)

        def integer(key: str, lo: int) -> int:
            v = c[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise _bad(f"calibration.{key}", f"an integer >= {lo}", v)
            return v

        def number(key: str, lo: float, hi: float, v=None) -> float:
            v = c[key] if v is None else v
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not lo <= v <= hi:
                raise _bad(f"calibration.{key}", f"a number {lo}..{hi}", v)
            return float(v)

        out: dict[str, Any] = {
            "repeats": integer("repeats", 1), "simulations": integer("simulations", 1),
            "seed": integer("seed", 0), "target_effect_pct": number("target_effect_pct", 0, 1000),
            "target_power": number("target_power", 0, 1),
            "max_false_rate_pct": number("max_false_rate_pct", 0, 100)}
        for key in ("effects_pct", "n_grid"):
            if not isinstance(c[key], list) or not c[key]:
                raise _bad(f"calibration.{key}", "a non-empty list", c[key])
        out["effects_pct"] = tuple(number("effects_pct", 0, 1000, v) for v in c["effects_pct"])
        grid = c["n_grid"]
        if not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 100000
                   for n in grid) or grid != sorted(set(grid)):
            raise _bad("calibration.n_grid", "ascending distinct integers 1..100000", grid)
        out["n_grid"] = tuple(grid)
        return cls(**out)

    def to_json(self) -> dict[str, Any]:
        """The settings as stats.json `settings` holds them."""
        return {"repeats": self.repeats, "simulations": self.simulations, "seed": self.seed,
                "target_effect_pct": self.target_effect_pct, "target_power": self.target_power,
                "max_false_rate_pct": self.max_false_rate_pct,
                "effects_pct": list(self.effects_pct), "n_grid": list(self.n_grid)}


@dataclass(frozen=True)
class CalibrationProtocol:
    """calibrate's protocol.json: the A/A bracket, its settings and the table as stored
    (settings plus reference_arm, source_protocol, source_arms)."""

    bracket: Protocol
    settings: CalibrationSettings
    table: Mapping[str, Any]

    @classmethod
    def from_json(cls, protocol: object) -> "CalibrationProtocol":
        settings = CalibrationSettings.from_json(protocol)
        assert isinstance(protocol, dict)  # from_json above named anything else
        plain = {k: v for k, v in protocol.items() if k != "calibration"}
        return cls(bracket=Protocol.from_json(plain), settings=settings,
                   table=freeze(protocol["calibration"]))

    def to_json(self) -> dict[str, Any]:
        return {**self.bracket.to_json(), "calibration": thaw(self.table)}
