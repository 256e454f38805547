"""The engine's one exception type: bad input or configuration, with a clear message."""
from __future__ import annotations


class EngineError(ValueError):
    """Raised for any invalid argument, environment value, config file or token input."""
