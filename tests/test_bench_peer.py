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


# The MoE peer (a Qwen2-MoE of ds4-mini's layout): its byte rule and its file.

def test_moe_decode_step_reads_attention_router_shared_and_top_k_experts() -> None:
    from bench.peers.llamacpp_cpu import MOE_SHAPE, _moe_parts, moe_peer_bytes

    ffn = 800
    p, b = _moe_parts(ffn), moe_peer_bytes(ffn)
    q8, d = 34 / 32, D_MODEL
    assert p["attn"] == pytest.approx((2 * d * d + 2 * 128 * d) * q8)  # q, o full; k, v one head of 128
    assert p["expert"] == pytest.approx(3 * d * ffn * q8)
    assert p["router"] == (16 + 1) * d * 4  # F32: 16 routed experts' rows + the shared expert's gate
    layer_ffn = p["router"] + (1 + MOE_SHAPE.n_used) * p["expert"]
    assert b["decode_step"] == pytest.approx(N_LAYERS * (p["attn"] + layer_ffn) + p["head"], abs=2)
    assert b["decode_step"] - b["ubatch_no_logits"] == pytest.approx(layer_ffn + p["head"], abs=2)


def test_moe_union_is_top_k_for_one_token_and_grows_below_its_bound() -> None:
    from bench.peers.llamacpp_cpu import moe_union

    assert moe_union(1) == 2.0
    assert moe_union(4) == pytest.approx(16 * (1 - (14 / 16) ** 4))
    prev = 2.0
    for u in range(2, 33):
        got = moe_union(u)
        assert prev < got <= min(16, 2 * u)
        prev = got


def test_moe_prompt_bytes_per_ubatch() -> None:
    from bench.peers.llamacpp_cpu import moe_peer_bytes, moe_pp_bytes

    ffn = 800
    b = moe_peer_bytes(ffn)
    assert moe_pp_bytes(ffn, PROMPT, 1) == pytest.approx(PROMPT * b["ubatch_no_logits"] + b["last_ubatch_extra"], abs=PROMPT)
    # 4 tokens share one pass over the attention; their union of experts is read once
    assert moe_pp_bytes(ffn, PROMPT, 4) < moe_pp_bytes(ffn, PROMPT, 1) / 1.5


def test_moe_width_matches_ds4_mini_bytes_per_token() -> None:
    from bench.peers.llamacpp_cpu import moe_ffn_width, moe_peer_bytes

    target = 62.85e6
    f = moe_ffn_width(target)
    assert f % 32 == 0
    assert abs(moe_peer_bytes(f)["decode_step"] - target) / target < 0.01


def _tiny_moe(path):
    from bench.peers.random_gguf import MoeShape, write_moe_gguf

    shape = MoeShape(d_model=128, n_layers=2, n_head=4, n_head_kv=1, n_expert=4, n_used=2, ffn=64, ctx=256)
    return shape, write_moe_gguf(path, shape, name="tiny-moe")


def test_moe_gguf_has_qwen2moe_keys_and_expert_tensors(tmp_path) -> None:
    gguf = pytest.importorskip("gguf")
    shape, path = _tiny_moe(tmp_path / "moe.gguf")
    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    assert arch == "qwen2moe"
    assert int(r.fields["qwen2moe.expert_count"].parts[-1][0]) == 4
    assert int(r.fields["qwen2moe.expert_used_count"].parts[-1][0]) == 2
    t = {x.name: x for x in r.tensors}
    assert list(t["blk.0.ffn_gate_exps.weight"].shape) == [128, 64, 4]   # ggml order: ne0 = d_model
    assert list(t["blk.0.ffn_down_exps.weight"].shape) == [64, 128, 4]
    assert list(t["blk.1.attn_k.weight"].shape) == [128, 32]             # one K/V head of 32
    assert t["blk.0.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert t["blk.0.ffn_up_shexp.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0


def test_llama_bench_runs_the_moe_peer(tmp_path) -> None:
    """llama.cpp itself loads and runs the MoE peer's format (tiny shape), where it is built."""
    import os
    import subprocess

    import real_servers

    required = os.environ.get(real_servers.REQUIRE_ENV) == "1"
    try:
        bin_dir = real_servers.llama_bin(build=required)
    except real_servers.NotBuilt as exc:
        if required:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    _, path = _tiny_moe(tmp_path / "moe.gguf")
    res = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(path), "-t", "1", "-r", "1", "-o", "json",
                          "-p", "8", "-n", "4", "-ub", "4"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    rows = json.loads(res.stdout)
    assert {r["n_prompt"] for r in rows} == {8, 0} and all(r["avg_ts"] > 0 for r in rows)
