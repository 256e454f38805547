"""Field-by-field comparison of a stored JSON result with a recomputed one (what `verify` reports)."""
from __future__ import annotations


def first_difference(stored, fresh, where: str) -> str | None:
    """The first field where two JSON values differ, as 'field: stored X, recomputed Y'."""
    label = where or "(top level)"
    if isinstance(stored, dict) and isinstance(fresh, dict):
        for key in sorted(set(stored) | set(fresh), key=str):
            sub = f"{where}.{key}" if where else str(key)
            if key not in stored:
                return f"{sub}: missing from stats.json"
            if key not in fresh:
                return f"{sub}: not produced by recomputation"
            found = first_difference(stored[key], fresh[key], sub)
            if found:
                return found
        return None
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return f"{label}: stored {len(stored)} items, recomputed {len(fresh)}"
        for i, (a, b) in enumerate(zip(stored, fresh)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    if type(stored) is not type(fresh) or stored != fresh:
        if isinstance(stored, (int, float)) and isinstance(fresh, (int, float)) \
                and not isinstance(stored, bool) and not isinstance(fresh, bool) and stored == fresh:
            return None
        return f"{label}: stored {stored!r}, recomputed {fresh!r}"
    return None
