"""LUCE_MMVQ_MAX_NCOLS: a cap below the band width sends wide bands to MMQ (non-exact, small
differences); unset or >= the width keeps bands bitwise equal to q1 (acceptance 3)."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_qualify.engine import BOS, ENV_BANDS, ENV_MMVQ, Engine

# MMQ reorders each dot product's float accumulation: ~1e-6 relative per matmul, so most
# positions drift by ~1e-6..1e-4 in logits (std ~3). Top-k routing is discontinuous, so a
# near-tie between two experts can flip a route and move that position's logits by O(1);
# hence a bound on the typical (median over positions) drift and a loose bound on the max.
MMQ_MEDIAN_DIFF = 1e-3
MMQ_MAX_ABS_DIFF = 5.0


def _assert_small_nonzero_drift(got: np.ndarray, ref: np.ndarray, median_bound: float = MMQ_MEDIAN_DIFF) -> None:
    per_pos = np.abs(got.astype(np.float64) - ref.astype(np.float64)).max(axis=1)
    assert per_pos.max() > 0.0, "MMQ result is bitwise equal to q1: MMQ was not used"
    assert np.median(per_pos) < median_bound, per_pos
    assert per_pos.max() < MMQ_MAX_ABS_DIFF, per_pos


@pytest.fixture(scope="module")
def tiny() -> Engine:
    return Engine("ds4-tiny", seed=0, threads=2)


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    rng = np.random.default_rng(11)
    return [BOS, *rng.integers(0, 256, size=46).tolist()]  # 47 tokens: chunk 4 ends with a width-3 band


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MMVQ, raising=False)
    monkeypatch.delenv(ENV_BANDS, raising=False)


def _check_mmq_used(res, q1) -> None:
    kernels = dict(zip(res.band_widths, res.kernel_per_step))
    assert kernels.get(3) == "mmq" and kernels.get(4) == "mmq", (res.band_widths, res.kernel_per_step)
    assert all(k == "mmvq" for w, k in zip(res.band_widths, res.kernel_per_step) if w <= 2)
    assert not res.exact
    _assert_small_nonzero_drift(res.logits, q1.logits)


def test_cap_2_by_argument_uses_mmq_and_differs(tiny: Engine, prompt: list[int]) -> None:
    q1 = tiny.prefill(prompt, chunk=1)
    res = tiny.prefill(prompt, chunk=4, mmvq_max_ncols=2)
    assert 3 in res.band_widths and 4 in res.band_widths
    # Width-2 bands stay on narrow MMVQ under a cap of 2 (chunk 2 is still exact).
    two = tiny.prefill(prompt, chunk=2, mmvq_max_ncols=2)
    assert two.exact and two.logits.tobytes() == q1.logits.tobytes()
    _check_mmq_used(res, q1)


def test_cap_2_by_env_uses_mmq_and_differs(tiny: Engine, prompt: list[int],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    q1 = tiny.prefill(prompt, chunk=1)
    monkeypatch.setenv(ENV_MMVQ, "2")
    res = tiny.prefill(prompt, chunk=4)
    _check_mmq_used(res, q1)
    # An explicit argument overrides the environment.
    exact = tiny.prefill(prompt, chunk=4, mmvq_max_ncols=4)
    assert exact.exact and exact.logits.tobytes() == q1.logits.tobytes()


@pytest.mark.parametrize("env", [None, "4", "8"])
def test_unset_or_wide_cap_keeps_bands_exact(tiny: Engine, prompt: list[int], env: str | None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    q1 = tiny.prefill(prompt, chunk=1)
    if env is not None:
        monkeypatch.setenv(ENV_MMVQ, env)
    res = tiny.prefill(prompt, chunk=4)
    assert res.exact and set(res.kernel_per_step) == {"mmvq"}
    assert res.logits.tobytes() == q1.logits.tobytes()
    assert res.route_weights.tobytes() == q1.route_weights.tobytes()


def test_env_bands_switch(tiny: Engine, prompt: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(tiny.prefill(prompt).band_widths) == {1}  # unset: q1
    monkeypatch.setenv(ENV_BANDS, "1")
    on = tiny.prefill(prompt)
    assert max(on.band_widths) == 4  # on: default chunk 4
    assert set(tiny.prefill(prompt, bands=False).band_widths) == {1}  # argument beats env
    monkeypatch.setenv(ENV_BANDS, "0")
    assert set(tiny.prefill(prompt, chunk=4).band_widths) == {1}


def test_approximate_mode_is_labelled_non_exact(tiny: Engine, prompt: list[int]) -> None:
    q1 = tiny.prefill(prompt, chunk=1)
    res = tiny.prefill(prompt, mode="approximate")
    assert not res.exact and res.mode == "approximate" and set(res.kernel_per_step) == {"mmq"}
    assert max(res.band_widths) > 4 and sum(res.band_widths) == len(prompt)
    # A route flipped early feeds later positions through attention: looser typical bound.
    _assert_small_nonzero_drift(res.logits, q1.logits, median_bound=0.5)
    assert res.weight_bytes < q1.weight_bytes
