"""The TEST ONLY prefill slowdown (DFLASH_DS4_TEST_SLOWDOWN_PCT / test_slowdown_pct): labelled in
build_info, outputs unchanged, malformed values refused. No timing is asserted beyond the spin's
own lower bound (a busy-wait never returns early)."""
from __future__ import annotations

import pytest

from dflash_qualify.engine import Engine, EngineError, build_info
from dflash_qualify.engine.engine import _busy_wait_ns
from dflash_qualify.engine.options import ENV_TEST_SLOWDOWN


def test_busy_wait_spends_at_least_the_asked_time():
    assert _busy_wait_ns(2e5) >= 200_000
    assert _busy_wait_ns(0) >= 0


def test_slowdown_is_labelled_and_leaves_outputs_alone(monkeypatch):
    monkeypatch.delenv(ENV_TEST_SLOWDOWN, raising=False)
    plain = Engine("ds4-tiny", threads=1)
    slow = Engine("ds4-tiny", threads=1, test_slowdown_pct=20)
    assert "test_only" not in plain.build_info()
    assert slow.build_info()["test_only"]["prefill_slowdown_pct"] == 20.0
    assert "TEST ONLY" in slow.build_info()["test_only"]["note"]
    a, b = plain.generate("hello world", max_tokens=4), slow.generate("hello world", max_tokens=4)
    assert a.tokens == b.tokens and a.text == b.text


def test_environment_sets_the_slowdown(monkeypatch):
    monkeypatch.setenv(ENV_TEST_SLOWDOWN, "5")
    assert build_info()["test_only"]["prefill_slowdown_pct"] == 5.0
    assert Engine("ds4-tiny", threads=1).build_info()["test_only"]["prefill_slowdown_pct"] == 5.0
    assert "test_only" not in Engine("ds4-tiny", threads=1, test_slowdown_pct=0).build_info()


@pytest.mark.parametrize("raw", ["fast", "-1", "5000"])
def test_malformed_environment_is_refused(monkeypatch, raw):
    monkeypatch.setenv(ENV_TEST_SLOWDOWN, raw)
    with pytest.raises(EngineError, match=ENV_TEST_SLOWDOWN):
        Engine("ds4-tiny", threads=1)


def test_bad_argument_is_refused():
    with pytest.raises(EngineError, match="test_slowdown_pct"):
        Engine("ds4-tiny", threads=1, test_slowdown_pct=True)
