"""`dflash-qualify matrix` end to end on the local executor, then `verify` and `report` on the
matrix directory through the kind registry; `--executor ray` without the extra names it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from matrix_helpers import write_matrix

EXE = str(Path(sys.executable).parent / "dflash-qualify")
LIMIT_S = 300  # only stops a hung command; nothing is timed
WITHOUT_RAY = ("import sys; sys.modules['ray'] = None; "
               "from dflash_qualify.harness.cli import main; sys.argv[0] = 'dflash-qualify'; main()")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=LIMIT_S)


@pytest.fixture(scope="module")
def matrix_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("matrix-cli")
    done = cli("matrix", str(write_matrix(tmp / "in")), "--out", str(tmp / "out"))
    assert done.returncode in (0, 1), done.stderr[-3000:]  # qualified or not on this noise
    [path] = [p for p in (tmp / "out").iterdir() if not p.name.endswith(".partial")]
    return path, done


def test_matrix_command_seals_every_cell_and_prints_the_table(matrix_dir):
    path, done = matrix_dir
    assert "| exact-bands-quick--local | exact-bands-quick |" in done.stdout
    assert "| quick-two--local | quick-two |" in done.stdout
    sha = json.loads(cli("report", str(path), "--format", "json").stdout)["manifest_sha256"]
    assert f"Matrix evidence manifest SHA-256: {sha}" in done.stdout
    assert "cell quick-two--local: started on local" in done.stderr  # progress on stderr


def test_verify_and_report_work_on_a_matrix_directory(matrix_dir):
    path, _ = matrix_dir
    done = cli("verify", str(path))
    assert done.returncode == 0 and done.stdout.startswith("OK "), done.stdout
    md = cli("report", str(path))
    assert md.returncode == 0 and md.stdout.startswith("# Matrix two-quick")
    data = json.loads(cli("report", str(path), "--format", "json").stdout)
    assert [c["id"] for c in data["cells"]] == ["exact-bands-quick--local", "quick-two--local"]
    cell = cli("report", str(path / "cells" / "quick-two--local"))  # a cell is a run's evidence
    assert cell.returncode == 0 and "quick-two" in cell.stdout
    gate = cli("gate", str(path))
    assert gate.returncode == 2 and "matrix evidence has no gate verdict" in gate.stderr


def test_executor_ray_without_the_extra_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY, "matrix",
                           str(write_matrix(tmp_path / "in")), "--executor", "ray",
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=LIMIT_S)
    assert done.returncode == 2, done.stderr
    assert "pip install 'dflash-qualify[ray]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # refused before any evidence directory


def test_matrix_user_errors_exit_2_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('schema_version = 1\nkind = "matrix"\nname = "x"\nprotocols = []\n')
    done = cli("matrix", str(bad), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and f"{bad}: protocols: invalid value" in done.stderr
    done = cli("matrix", str(write_matrix(tmp_path / "in")), "--ray-address", "auto")
    assert done.returncode == 2 and "--ray-address" in done.stderr
    assert "Traceback" not in done.stderr
