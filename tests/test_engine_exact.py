"""Exactness of prefill bands: q1 vs bands chunk 2/3/4 bitwise (logits, routes, final state),
threads 1 vs 2, and identical generate() responses (acceptance 1)."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_qualify.engine import BOS, Engine, schedule

CHUNKS = (2, 3, 4)


def _prompt(n: int, seed: int = 1) -> list[int]:
    rng = np.random.default_rng(seed)
    return [BOS, *rng.integers(0, 256, size=n - 1).tolist()]


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _run(eng: Engine, toks: list[int], chunk: int):
    sess = eng.session()
    res = sess.prefill(toks, chunk=chunk, bands=chunk > 1)
    return res, sess.state()


def _assert_same(ref, got, label: str) -> None:
    (r_res, r_state), (g_res, g_state) = ref, got
    assert _bits(r_res.logits) == _bits(g_res.logits), f"{label}: logits differ"
    assert _bits(r_res.route_ids) == _bits(g_res.route_ids), f"{label}: route ids differ"
    assert _bits(r_res.route_weights) == _bits(g_res.route_weights), f"{label}: route weights differ"
    assert r_state.keys() == g_state.keys()
    for key in r_state:
        assert _bits(r_state[key]) == _bits(g_state[key]), f"{label}: state {key} differs"


@pytest.fixture(scope="module")
def tiny() -> Engine:
    return Engine("ds4-tiny", seed=0, threads=2)


@pytest.fixture(scope="module")
def tiny_1thread() -> Engine:
    return Engine("ds4-tiny", seed=0, threads=1)


def test_bands_equal_q1_every_length_1_to_64(tiny: Engine) -> None:
    for n in range(1, 65):
        toks = _prompt(n, seed=n)
        ref = _run(tiny, toks, 1)
        assert ref[0].exact and set(ref[0].band_widths) == {1}
        for chunk in CHUNKS:
            got = _run(tiny, toks, chunk)
            assert got[0].exact
            assert got[0].band_widths == schedule(0, n, chunk, tiny.config["ratios"])
            _assert_same(ref, got, f"n={n} chunk={chunk}")


def test_bands_equal_q1_across_many_boundaries(tiny: Engine) -> None:
    # 300 tokens: dozens of boundaries of every ratio (4, 8), compressed rows well past n_swa.
    toks = _prompt(300, seed=7)
    ref = _run(tiny, toks, 1)
    for key, ratio in (("layer1.compressed", 4), ("layer2.compressed", 8)):
        assert ref[1][key].shape[0] == 300 // ratio
    for chunk in CHUNKS:
        got = _run(tiny, toks, chunk)
        assert max(got[0].band_widths) == chunk
        _assert_same(ref, got, f"long chunk={chunk}")


def test_bands_start_mid_block_continue_exactly(tiny: Engine) -> None:
    # A session that prefills in two calls (the second starting off a block boundary) equals one call.
    toks = _prompt(61, seed=3)
    ref = _run(tiny, toks, 1)
    for split in (1, 5, 30):
        for chunk in CHUNKS:
            sess = tiny.session()
            a = sess.prefill(toks[:split], chunk=chunk)
            b = sess.prefill(toks[split:], chunk=chunk)
            assert _bits(np.concatenate([a.logits, b.logits])) == _bits(ref[0].logits)
            state = sess.state()
            for key in ref[1]:
                assert _bits(state[key]) == _bits(ref[1][key]), f"split={split} chunk={chunk} {key}"


def test_threads_1_vs_2_identical(tiny: Engine, tiny_1thread: Engine) -> None:
    for n in (1, 17, 64):
        toks = _prompt(n, seed=100 + n)
        for chunk in (1, 4):
            _assert_same(_run(tiny, toks, chunk), _run(tiny_1thread, toks, chunk), f"threads n={n} chunk={chunk}")


def test_generate_responses_identical(tiny: Engine, tiny_1thread: Engine) -> None:
    prompt = "Exact bands must not change a single bit."
    ref = tiny.generate(prompt, max_tokens=24, chunk=1)
    assert len(set(ref.tokens)) > 1, "greedy generation collapsed to one token"
    for eng in (tiny, tiny_1thread):
        for chunk in (1, *CHUNKS):
            got = eng.generate(prompt, max_tokens=24, chunk=chunk)
            assert got.tokens == ref.tokens and got.text == ref.text
            assert got.timings["exact"]
            assert sum(int(k) * v for k, v in got.timings["band_widths"].items()) == len(ref.prompt_tokens)


def test_logits_finite_and_varied(tiny: Engine) -> None:
    res = tiny.prefill(_prompt(40))
    assert np.isfinite(res.logits).all()
    assert float(res.logits.std()) > 0.1
    assert len(set(res.logits.argmax(axis=1).tolist())) > 3
