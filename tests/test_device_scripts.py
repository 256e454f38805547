"""The device helper scripts' argument checks (scripts/gpu_prepare_trees.sh, gpu_ab_trees.sh):
bad input ends with exit 2 and a line naming it, before anything is copied or built."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_prepare_trees_needs_a_branch():
    r = run("gpu_prepare_trees.sh")
    assert r.returncode == 2 and "usage:" in r.stderr


def test_prepare_trees_names_an_unknown_branch():
    r = run("gpu_prepare_trees.sh", "no-such-branch-anywhere")
    assert r.returncode == 2
    assert "no-such-branch-anywhere is not a branch or commit" in r.stderr


def test_prepare_trees_rejects_a_bad_name():
    r = run("gpu_prepare_trees.sh", "HEAD=bad name")
    assert r.returncode == 2 and "tree name must be" in r.stderr


def test_prepare_trees_rejects_a_name_given_twice():
    r = run("gpu_prepare_trees.sh", "HEAD=same", "HEAD=same")
    assert r.returncode == 2 and "tree name same is given twice" in r.stderr


def test_prepare_trees_copies_nothing_when_a_later_argument_is_bad():
    first = ROOT / ".gpuwt" / "dq-test-never-copied"
    r = run("gpu_prepare_trees.sh", f"HEAD={first.name}", "no-such-branch-anywhere")
    copied = first.exists()
    if copied:  # clean up what a regression would leave in the checkout's ignored folder
        subprocess.run(["rm", "-rf", str(first)], check=True)
    assert r.returncode == 2 and "no-such-branch-anywhere is not a branch" in r.stderr
    assert not copied


def test_prepare_trees_takes_at_most_seven():
    r = run("gpu_prepare_trees.sh", *["HEAD"] * 8)
    assert r.returncode == 2 and "at most 7 branches" in r.stderr


def test_ab_trees_hints_at_carry_for_a_missing_gpuwt_tree(tmp_path):
    r = run("gpu_ab_trees.sh", str(ROOT), ".gpuwt/not-carried-here", env={"OUT": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert ".gpuwt/not-carried-here is not a source tree" in r.stderr
    assert "carry" in r.stderr
