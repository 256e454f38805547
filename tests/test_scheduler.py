"""Band scheduler properties (hypothesis) and C++/Python agreement (acceptance 4)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_qualify.engine import EngineError, _core, schedule, schedule_approximate

ratio_lists = st.lists(st.sampled_from([0, 4, 5, 8, 16, 64]), min_size=1, max_size=6)


def _boundaries(ratios: list[int]) -> list[int]:
    return [r for r in ratios if r > 0]


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 5000), n=st.integers(0, 300), chunk=st.integers(1, 4), ratios=ratio_lists)
def test_schedule_properties(start: int, n: int, chunk: int, ratios: list[int]) -> None:
    widths = schedule(start, n, chunk, ratios)
    assert sum(widths) == n
    assert all(1 <= w <= chunk for w in widths)
    pos = start
    for i, w in enumerate(widths):
        last = i == len(widths) - 1
        for r in _boundaries(ratios):
            # No boundary inside the band: only its last token may close a block.
            assert all((p + 1) % r != 0 for p in range(pos, pos + w - 1)), (pos, w, r)
        if w < chunk:  # downshift only at a boundary or the prompt tail
            at_boundary = any((pos + w) % r == 0 for r in _boundaries(ratios))
            assert at_boundary or last, (pos, w, widths)
        pos += w


@settings(max_examples=200, deadline=None)
@given(start=st.integers(0, 5000), n=st.integers(0, 300), chunk=st.integers(1, 4), ratios=ratio_lists)
def test_schedule_cpp_matches_python(start: int, n: int, chunk: int, ratios: list[int]) -> None:
    assert _core.schedule_bands(start, n, chunk, ratios) == schedule(start, n, chunk, ratios)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 500), width=st.integers(1, 32))
def test_schedule_approximate_matches(n: int, width: int) -> None:
    widths = schedule_approximate(n, width)
    assert sum(widths) == n and all(1 <= w <= width for w in widths)
    assert _core.schedule_approximate(n, width) == widths


def test_schedule_examples() -> None:
    assert schedule(0, 10, 4, [0, 4, 16]) == [4, 4, 2]
    assert schedule(0, 10, 3, [4]) == [3, 1, 3, 1, 2]
    assert schedule(2, 7, 4, [4, 8]) == [2, 4, 1]
    assert schedule(0, 5, 4, [0]) == [4, 1]
    assert schedule(0, 0, 4, [4]) == []


@pytest.mark.parametrize("args", [(-1, 4, 4, [4]), (0, -1, 4, [4]), (0, 4, 0, [4])])
def test_schedule_rejects_bad_arguments(args: tuple) -> None:
    with pytest.raises(EngineError):
        schedule(*args)
