"""The peer benchmark's byte rule (bench/peers/llamacpp_bench.py): what llama.cpp reads per
decode step and per prompt, and the peer GGUF's size against the ds4-mini target."""
from __future__ import annotations

import pytest

from bench.peers.llamacpp_bench import PROMPT, VOCAB, pp_bytes, peer_bytes
from bench.peers.llamacpp_cpu import D_MODEL, N_LAYERS, ffn_width, matmul_bytes


def test_decode_step_reads_every_matmul_weight() -> None:
    ffn = 1760
    assert peer_bytes(ffn)["decode_step"] == matmul_bytes(ffn, VOCAB)


def test_prompt_skips_last_ffn_and_head_except_for_the_last_ubatch() -> None:
    ffn = 1760
    b = peer_bytes(ffn)
    q8 = 34 / 32
    last_ffn, head = 3 * D_MODEL * ffn * q8, VOCAB * D_MODEL * q8
    assert b["decode_step"] - b["ubatch_no_logits"] == pytest.approx(last_ffn + head, abs=2)
    assert b["last_ubatch_extra"] == pytest.approx(last_ffn + head, abs=2)
    # one ubatch per token at -ub 1, 32 at -ub 4; the last one also reads the FFN and the head
    assert pp_bytes(b, PROMPT, 1) == PROMPT * b["ubatch_no_logits"] + b["last_ubatch_extra"]
    assert pp_bytes(b, PROMPT, 4) == PROMPT // 4 * b["ubatch_no_logits"] + b["last_ubatch_extra"]
    assert N_LAYERS == 6


def test_peer_ffn_matches_ds4_mini_bytes_per_token() -> None:
    target = 61.28e6
    got = matmul_bytes(ffn_width(target, VOCAB), VOCAB)
    assert abs(got - target) / target < 0.01
