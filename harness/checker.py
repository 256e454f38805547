"""Strict checking of parsed TOML tables: one-line UsageErrors naming the file, the key path, what
was expected and what was found. Every protocol schema (and the target options) checks through
`Checker`."""
from __future__ import annotations

import json
import re

from .errors import UsageError


def describe(value: object) -> str:
    """A TOML-flavoured description of a found value, for error messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"string {text!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    return type(value).__name__


class Checker:
    """Walks one protocol document and raises UsageError at the first problem."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, expected: str, value: object = None, *, found: str | None = None):
        what = found if found is not None else describe(value)
        raise UsageError(f"expected {expected}, found {what}", file=self.file, field=path)

    def table(self, doc: dict, path: str, allowed: set[str], required: set[str] = frozenset()):
        for key in doc:
            if key not in allowed:
                where = join_key(path, key)
                hint = ", ".join(sorted(allowed))
                raise UsageError(f"unknown key (allowed here: {hint})", file=self.file, field=where)
        for key in sorted(required):
            if key not in doc:
                where = join_key(path, key)
                raise UsageError("missing required key", file=self.file, field=where)

    def table_array(self, items, path: str) -> list[dict]:
        """A non-empty TOML array of tables ([[path]]): items itself, checked."""
        if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
            self.fail(path, f"a non-empty array of tables ([[{path}]])", items)
        return items

    def sub_table(self, doc: dict, key: str, path: str) -> dict:
        value = doc.get(key, {})
        if not isinstance(value, dict):
            self.fail(path, "a table", value)
        return value

    def string(self, value, path, *, choices=None, pattern=None, nonempty=True) -> str:
        if not isinstance(value, str):
            self.fail(path, "a string" if not choices else one_of(choices), value)
        if choices and value not in choices:
            self.fail(path, one_of(choices), value)
        if nonempty and not value:
            self.fail(path, "a non-empty string", value)
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(path, "an id of letters, digits, '_', '-', '.' (at most 32)", value)
        return value

    def integer(self, value, path, *, lo=None, hi=None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, range_text("an integer", lo, hi), value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.fail(path, range_text("an integer", lo, hi), value)
        return value

    def number(self, value, path, *, lo=None, hi=None, lo_open=False, hi_open=False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, range_text("a number", lo, hi), value)
        bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
        bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
        if bad_lo or bad_hi or value != value:
            lo_s = f"> {lo}" if lo_open else f">= {lo}"
            hi_s = f"< {hi}" if hi_open else f"<= {hi}"
            bounds = " and ".join(b for b, v in ((lo_s, lo), (hi_s, hi)) if v is not None)
            self.fail(path, f"a number {bounds}", value)
        return float(value)

    def boolean(self, value, path) -> bool:
        if not isinstance(value, bool):
            self.fail(path, "a boolean (true or false)", value)
        return value


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def join_key(path: str, key: object) -> str:
    """A key path as TOML writes it: bare keys plain, anything else quoted (one line)."""
    text = str(key)
    part = text if _BARE_KEY.fullmatch(text) else json.dumps(text)  # fullmatch: "$" admits "0\n"
    return f"{path}.{part}" if path else part


def one_of(choices) -> str:
    return "one of " + ", ".join(f'"{c}"' for c in choices)


def range_text(kind: str, lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"{kind} from {lo} to {hi}"
    if lo is not None:
        return f"{kind} >= {lo}"
    if hi is not None:
        return f"{kind} <= {hi}"
    return kind


