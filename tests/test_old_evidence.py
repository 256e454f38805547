"""Evidence sealed by an earlier release (tests/fixtures/evidence) still passes `verify`."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "evidence"
SEALED = sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").is_file())


def test_every_kind_and_trace_level_has_a_fixture():
    assert SEALED == ["bracket", "bracket-calibration", "exact-digest", "exact-raw"]


@pytest.mark.parametrize("name", SEALED)
def test_old_evidence_still_verifies(name, tmp_path):
    copy = tmp_path / name  # a copy: verify must not depend on where the directory lies
    shutil.copytree(FIXTURES / name, copy)
    result = CliRunner().invoke(main, ["verify", str(copy)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("OK ")
