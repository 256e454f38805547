"""Repeated requests, snapshot/restore mid-prompt, and the prefix cache give identical results."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_qualify.engine import BOS, EOS, Engine, detokenize, tokenize


@pytest.fixture(scope="module")
def tiny() -> Engine:
    return Engine("ds4-tiny", seed=0, threads=2)


def _prompt(n: int) -> list[int]:
    rng = np.random.default_rng(5)
    return [BOS, *rng.integers(0, 256, size=n - 1).tolist()]


def test_tokenizer_roundtrip() -> None:
    assert tokenize("hé") == [BOS, 104, 195, 169]
    assert detokenize([BOS, 104, 105, EOS]) == b"hi"


def test_repeated_request_identical(tiny: Engine) -> None:
    toks = _prompt(37)
    a, b = tiny.prefill(toks, chunk=3), tiny.prefill(toks, chunk=3)
    assert a.logits.tobytes() == b.logits.tobytes()
    assert a.weight_bytes == b.weight_bytes and a.band_widths == b.band_widths
    g1, g2 = tiny.generate("repeat me", max_tokens=12), tiny.generate("repeat me", max_tokens=12)
    assert g1.tokens == g2.tokens and g1.text == g2.text


def test_snapshot_mid_prompt_then_continue(tiny: Engine) -> None:
    toks = _prompt(50)
    whole = tiny.session()
    ref = whole.prefill(toks, chunk=4)
    ref_next = [whole.decode_step() for _ in range(5)]
    for split in (7, 24, 33):
        first = tiny.session()
        head = first.prefill(toks[:split], chunk=2)
        snap = first.snapshot()
        resumed = tiny.session()
        resumed.restore(snap)
        assert resumed.pos == split
        tail = resumed.prefill(toks[split:], chunk=4)
        assert np.concatenate([head.logits, tail.logits]).tobytes() == ref.logits.tobytes()
        assert [resumed.decode_step() for _ in range(5)] == ref_next
        state, ref_state = resumed.state(), whole.state()
        # `whole` decoded 5 tokens too, so states match key for key.
        for key in ref_state:
            assert state[key].tobytes() == ref_state[key].tobytes(), key


def test_snapshot_restore_is_repeatable(tiny: Engine) -> None:
    sess = tiny.session()
    sess.prefill(_prompt(20))
    snap = sess.snapshot()
    outs = []
    for _ in range(2):
        s = tiny.session()
        s.restore(snap)
        outs.append(s.decode(8)["tokens"])
    assert outs[0] == outs[1]


def test_prefix_cache_hit_same_response() -> None:
    eng = Engine("ds4-tiny", seed=0, threads=2, prefix_cache_slots=4)
    plain = Engine("ds4-tiny", seed=0, threads=2)
    prompt = "The prefix cache must not change the answer."
    cold = eng.generate(prompt, max_tokens=10, chunk=4)
    assert cold.timings["cache_hits"] == 0
    warm = eng.generate(prompt, max_tokens=10, chunk=1)
    assert warm.timings["cache_hits"] == len(warm.prompt_tokens)
    assert warm.timings["prefill_ns"] == 0 and warm.timings["weight_bytes_prefill"] == 0
    assert warm.tokens == cold.tokens == plain.generate(prompt, max_tokens=10).tokens
    longer = prompt + " And a suffix."
    ext = eng.generate(longer, max_tokens=10, chunk=4)
    assert ext.timings["cache_hits"] == len(cold.prompt_tokens)
    assert ext.tokens == plain.generate(longer, max_tokens=10).tokens
    # Approximate requests bypass the cache (their states are not exact).
    assert eng.generate(prompt, max_tokens=4, mode="approximate").timings["cache_hits"] == 0


def test_generate_timings_shape(tiny: Engine) -> None:
    g = tiny.generate([BOS, 72, 105], max_tokens=5, chunk=2)
    t = g.timings
    assert set(t) >= {"prompt_tokens", "generated_tokens", "prefill_ns", "decode_ns", "band_widths",
                      "weight_bytes_prefill", "weight_bytes_decode", "cache_hits", "mode", "exact"}
    assert t["prompt_tokens"] == 3 and t["generated_tokens"] == len(g.tokens) <= 5
    assert t["band_widths"] == {"1": 1, "2": 1, "3": 0, "4": 0}
    assert t["prefill_ns"] > 0 and t["weight_bytes_prefill"] > 0
    assert g.text == detokenize(g.tokens)
    assert tiny.generate("hi", max_tokens=0).tokens == []


def test_weight_bytes_counted_per_call(tiny: Engine) -> None:
    cfg = tiny.config
    d, f, hd = cfg["d_model"], cfg["d_ff"], cfg["head_dim"]

    def mat(rows: int, cols: int) -> int:
        return rows * cols // 32 * 34
    dense = mat(cfg["n_heads"] * hd + 3 * hd, d) + mat(d, cfg["n_heads"] * hd) + mat(2 * f, d) + mat(d, f)
    expert = mat(2 * f, d) + mat(d, f)
    res = tiny.prefill([BOS])  # one q1 step: per layer dense + top_k experts, then the LM head
    assert res.weight_bytes == cfg["n_layers"] * (dense + cfg["top_k"] * expert) + mat(258, d)
    # A band reads each dense matrix once and each distinct expert once.
    toks = _prompt(4)
    band = tiny.prefill(toks, chunk=4)
    assert band.band_widths == [4]
    distinct = sum(len(np.unique(band.route_ids[layer])) for layer in range(cfg["n_layers"]))
    assert band.weight_bytes == cfg["n_layers"] * dense + distinct * expert + mat(258, d)


def test_f32_weight_rows_counted_once_per_step(tiny: Engine) -> None:
    cfg = tiny.config
    d, hc = cfg["d_model"], cfg["hc_mult"]
    # per layer: two HC dyn projections (2 hc + hc^2 rows each) and the router (one row per expert)
    per_step = cfg["n_layers"] * (2 * (2 * hc + hc * hc) + cfg["n_experts"]) * d * 4
    one = tiny.prefill([BOS])
    assert one.f32_weight_bytes == per_step
    assert one.weights_read_bytes == one.weight_bytes + per_step
    toks = _prompt(8)
    assert tiny.prefill(toks, chunk=1).f32_weight_bytes == 8 * per_step  # q1: eight steps
    band = tiny.prefill(toks, chunk=4)  # two bands: the rows are read once per step, whatever its width
    assert band.band_widths == [4, 4] and band.f32_weight_bytes == 2 * per_step
