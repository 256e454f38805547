"""Peer comparison: llama.cpp (llama-cpp-python) on a random-weight Q8_0 llama GGUF built here.

The GGUF is written locally with the `gguf` package (nothing is downloaded): llama architecture,
d_model 1024 like ds4-mini, 6 layers, full-width K/V heads, a feed-forward width chosen so that
the Q8_0 matmul bytes per token (attention q/k/v/o, gate/up/down, output head) match the counted
bytes per token of a ds4-mini q1 step; random int8 quants with scales that keep activations O(1);
a minimal byte-level vocab (256 byte tokens in GPT-2's byte-to-unicode spelling, BOS, EOS, and
one merge, since llama.cpp's BPE loader requires merges). Token ids are fed directly.

Measured beside ours with the same thread count: single-token decode (1 column per weight read)
and a 128-token prefill with n_ubatch = 4 (4 columns per weight read). Effective weight GB/s =
matmul weight bytes per step x steps / time. Install with `pip install -e .[peer]` (build
llama-cpp-python from source with CMAKE_ARGS as in the README); without it the section is skipped.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

Q8_BLOCK = 34  # bytes per 32 weights: fp16 scale + 32 int8
D_MODEL, N_LAYERS, N_HEAD = 1024, 6, 8
PROMPT = 128
DECODE_STEPS = 32


def _missing() -> str | None:
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return (f"the optional extra `peer` is not installed ({exc.name} missing): "
                "CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
                "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF\" pip install -e '.[peer]'")
    return None


def _byte_tokens() -> list[str]:
    """GPT-2's reversible byte -> unicode spelling of the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    spell = dict(zip(bs, (chr(c) for c in cs)))
    return [spell[b] for b in range(256)]


def ffn_width(bytes_per_token: float, vocab: int) -> int:
    """Feed-forward width (multiple of 32) whose matmul bytes per token best match the target."""
    per_weight = Q8_BLOCK / 32
    attn = 4 * D_MODEL * D_MODEL
    target_params = bytes_per_token / per_weight - vocab * D_MODEL
    f = (target_params / N_LAYERS - attn) / (3 * D_MODEL)
    return max(32, int(round(f / 32)) * 32)


def matmul_bytes(ffn: int, vocab: int) -> int:
    params = N_LAYERS * (4 * D_MODEL * D_MODEL + 3 * D_MODEL * ffn) + vocab * D_MODEL
    return params // 32 * Q8_BLOCK


def _q8_raw(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q8_0 bytes of a (rows, cols) weight: per block fp16 scale, then 32 int8 in [-127, 127]."""
    nb = cols // 32
    raw = np.empty((rows, nb, Q8_BLOCK), dtype=np.uint8)
    raw[:, :, 2:] = rng.integers(-127, 128, size=(rows, nb, 32), dtype=np.int8).view(np.uint8)
    scale = np.float16(1.0 / (73.0 * np.sqrt(cols)))  # unit-variance outputs for unit inputs
    raw[:, :, :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    return raw.reshape(rows, nb * Q8_BLOCK)


def build_gguf(path: Path, ffn: int, seed: int = 0) -> int:
    """Writes the model; returns the vocab size."""
    import gguf

    tokens = _byte_tokens() + ["<s>", "</s>", "ĠĠ"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("dflash-peer-random-q8_0")
    w.add_context_length(1024)
    w.add_embedding_length(D_MODEL)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(ffn)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(D_MODEL // N_HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL])
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def q(name: str, rows: int, cols: int) -> None:
        w.add_tensor(name, _q8_raw(rng, rows, cols), raw_dtype=q8)

    def ones(name: str) -> None:
        w.add_tensor(name, np.ones(D_MODEL, dtype=np.float32))

    q("token_embd.weight", vocab, D_MODEL)
    for i in range(N_LAYERS):
        ones(f"blk.{i}.attn_norm.weight")
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            q(f"blk.{i}.{t}.weight", D_MODEL, D_MODEL)
        ones(f"blk.{i}.ffn_norm.weight")
        q(f"blk.{i}.ffn_gate.weight", ffn, D_MODEL)
        q(f"blk.{i}.ffn_up.weight", ffn, D_MODEL)
        q(f"blk.{i}.ffn_down.weight", D_MODEL, ffn)
    ones("output_norm.weight")
    q("output.weight", vocab, D_MODEL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return vocab


def _measure_llama(path: Path, threads: int, bytes_per_step: int, repeats: int, vocab: int) -> dict:
    """One llama.cpp context at a time: an idle context's worker threads spin and would steal
    the cores from the one being timed (two live contexts made decode ~30x slower here)."""
    import llama_cpp

    rng = np.random.default_rng(1)
    prompt = [int(t) for t in rng.integers(0, 256, size=PROMPT)]

    def load(n_ubatch: int):
        return llama_cpp.Llama(model_path=str(path), n_ctx=512, n_batch=PROMPT, n_ubatch=n_ubatch,
                               n_threads=threads, n_threads_batch=threads, verbose=False, seed=0)

    dec_s, pre_s = [], []
    llm = load(PROMPT)
    for rep in range(repeats + 1):  # first round is the warm-up
        llm.reset()
        llm.eval(prompt)
        t0 = time.perf_counter()
        for j in range(DECODE_STEPS):
            llm.eval([prompt[j % PROMPT]])
        if rep:
            dec_s.append((time.perf_counter() - t0) / DECODE_STEPS)
    llm.close()
    del llm
    llm = load(4)
    for rep in range(repeats + 1):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        if rep:
            pre_s.append((time.perf_counter() - t0) / (PROMPT / 4))
    llm.close()
    del llm
    d, p = statistics.median(dec_s), statistics.median(pre_s)
    return {"engine": "llama.cpp", "threads": threads, "gbs_1": bytes_per_step / d / 1e9,
            "gbs_4": bytes_per_step / p / 1e9, "tok_s_1": 1.0 / d, "tok_s_4": 4.0 / p,
            "decode_step_s": dec_s, "ubatch4_step_s": pre_s}


def run(suite_out: dict, threads: list[int], quick: bool = False, repeats: int = 3) -> dict:
    """Peer section of the suite: llama.cpp next to our decode (1 column) and q4 prefill (4 columns)."""
    why = _missing()
    if why:
        print(f"peer: skipped: {why}")
        return {"skipped": why}
    if quick or suite_out.get("model") != "ds4-mini":
        return {"skipped": "quick run (the peer is sized to ds4-mini)"}
    import llama_cpp

    key = next((k for k in suite_out["prefill"] if k.startswith(f"{PROMPT}/")), None)
    if key is None:
        return {"skipped": f"needs the {PROMPT}-token ds4-mini prefill section"}
    q1_bpt = suite_out["prefill"][key]["modes"]["q1"]["bytes_per_token"]
    ffn = ffn_width(q1_bpt, 259)
    step_bytes = matmul_bytes(ffn, 259)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dq-peer-") as tmp:
        path = Path(tmp) / "peer-q8_0.gguf"
        vocab = build_gguf(path, ffn)
        assert vocab == 259
        for t in threads:
            ours_p = suite_out["prefill"].get(f"{PROMPT}/t{t}")
            ours_d = suite_out["decode"].get(f"t{t}")
            print(f"peer: llama.cpp {t} thread(s)")
            row = _measure_llama(path, t, step_bytes, repeats, vocab)
            rows.append(row)
            if ours_p and ours_d:
                q4 = ours_p["modes"]["q4"]
                rows.append({"engine": "dflash ds4-mini", "threads": t, "gbs_1": ours_d["weight_gbs"],
                             "gbs_4": q4["weight_gbs"], "tok_s_1": ours_d["tok_s"], "tok_s_4": q4["tok_s"]})
                row["ours_over_llamacpp_1"] = ours_d["weight_gbs"] / row["gbs_1"]
                row["ours_over_llamacpp_4"] = q4["weight_gbs"] / row["gbs_4"]
    desc = (f"llama-cpp-python {llama_cpp.__version__}, random Q8_0 llama GGUF: d_model {D_MODEL}, {N_LAYERS} layers, "
            f"ffn {ffn}, vocab 259; {step_bytes / 1e6:.2f} MB of matmul weights per step vs ds4-mini q1 "
            f"{q1_bpt / 1e6:.2f} MB/token. 1 column: llama.cpp single-token decode after a {PROMPT}-token prompt vs "
            f"our decode; 4 columns: llama.cpp {PROMPT}-token prefill with n_ubatch=4 vs our exact q4 bands.")
    return {"description": desc, "ffn": ffn, "step_bytes": step_bytes, "ds4_q1_bytes_per_token": q1_bpt, "rows": rows}
