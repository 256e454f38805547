"""Shared pytest fixtures: the evidence factory (tests/evidence_factory.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # make `import evidence_factory` work under any import mode
    sys.path.insert(0, _HERE)

import evidence_factory as _factory  # noqa: E402


@pytest.fixture
def evidence_factory():
    """The evidence_factory module: build(tmp_path / "ev", values, ...) -> sealed evidence dir."""
    return _factory
