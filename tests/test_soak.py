"""A short soak of `dflash-qualify serve` (bench/harness/soak_serve.py runs the 2,000-request one):
no errors, identical responses, RSS growth under 5% after warm-up, no process left."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "soak_serve", Path(__file__).resolve().parent.parent / "bench" / "harness" / "soak_serve.py")
soak_serve = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(soak_serve)

MAX_RSS_GROWTH_PCT = 5.0  # the bound; a leak of ~1 KiB per request would exceed it


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.fixture
def no_leftover(monkeypatch):
    """Records every server the soak starts, to check none outlives it."""
    started = []
    original = soak_serve.Server.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.append(self.proc.pid)

    monkeypatch.setattr(soak_serve.Server, "__init__", record)
    return started


def test_short_soak(tmp_path, no_leftover):
    summary = soak_serve.soak(requests=200, clients=4, warmup=20, model="ds4-tiny", threads=1,
                              max_tokens=8, deadline_s=600, log_dir=tmp_path)
    assert soak_serve.verdict(summary, MAX_RSS_GROWTH_PCT) == [], summary
    assert summary["requests"] == 20 + 2 * 200 and summary["errors"] == 0
    assert summary["identical"] and summary["server_exit_code"] == 0
    assert no_leftover and not any(alive(pid) for pid in no_leftover)
