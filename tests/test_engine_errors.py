"""Bad input raises EngineError (a ValueError) with a clear message, never a crash (acceptance 5)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dflash_qualify.engine import ENV_BANDS, ENV_MMVQ, Engine, EngineError, load_config


@pytest.fixture(scope="module")
def tiny() -> Engine:
    return Engine("ds4-tiny", threads=1)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MMVQ, raising=False)
    monkeypatch.delenv(ENV_BANDS, raising=False)


def test_engine_error_is_value_error() -> None:
    assert issubclass(EngineError, ValueError)


@pytest.mark.parametrize("tokens, match", [
    ([256, 300], r"tokens\[1\] = 300 is out of range: token ids must be 0..257"),
    ([-1], r"tokens\[0\] = -1 is out of range"),
    ([0, 2**63], r"tokens\[1\] = 9223372036854775808 is out of range"),  # beyond int64 (was OverflowError)
    ([-(2**70)], r"tokens\[0\] = -1180591620717411303424 is out of range"),
    ([], r"empty"),
    (np.zeros(0, dtype=np.int32), r"empty"),
    (np.array([1.0, 2.0]), r"integer dtype, got float64"),
    (np.array([[1, 2]]), r"1-D array .* shape \(1, 2\)"),
    ([1, "a"], r"tokens\[1\] must be an int"),
    ([True], r"tokens\[0\] must be an int"),
    ("abc", r"list of ints or a 1-D integer numpy array, got str"),
])
def test_bad_tokens(tiny: Engine, tokens, match: str) -> None:
    with pytest.raises(EngineError, match=match):
        tiny.prefill(tokens)


def test_bad_prompts(tiny: Engine) -> None:
    with pytest.raises(EngineError, match="prompt is empty"):
        tiny.generate("")
    with pytest.raises(EngineError, match="prompt is empty"):
        tiny.generate(b"")
    with pytest.raises(EngineError, match=r"prompt\[0\] = 999 is out of range"):
        tiny.generate([999])
    with pytest.raises(EngineError, match=r"prompt\[1\] = 9223372036854775808 is out of range"):
        tiny.generate([0, 2**63])
    with pytest.raises(EngineError, match="max_tokens must be an integer >= 0"):
        tiny.generate("hi", max_tokens=-1)


def test_prompt_longer_than_context(tiny: Engine) -> None:
    ctx = tiny.config["ctx"]
    with pytest.raises(EngineError, match=rf"exceeds the context of {ctx} tokens"):
        tiny.prefill([65] * (ctx + 1))
    with pytest.raises(EngineError, match=rf"exceeds the context of {ctx} tokens"):
        tiny.generate("x" * ctx)
    sess = tiny.session()
    sess.prefill([65] * (ctx - 2))
    with pytest.raises(EngineError, match="exceeds the context"):
        sess.prefill([65] * 3)


@pytest.mark.parametrize("chunk", [0, 5, -1, 2.0, True, "4"])
def test_bad_chunk(tiny: Engine, chunk) -> None:
    with pytest.raises(EngineError, match=r"chunk must be an integer 1..4"):
        tiny.prefill([1, 2], chunk=chunk)
    with pytest.raises(EngineError, match=r"chunk must be an integer 1..4"):
        Engine("ds4-tiny", chunk=chunk)


@pytest.mark.parametrize("value", [0, 9, "2"])
def test_bad_mmvq_argument(tiny: Engine, value) -> None:
    with pytest.raises(EngineError, match=r"mmvq_max_ncols must be an integer 1..8"):
        tiny.prefill([1, 2], mmvq_max_ncols=value)


@pytest.mark.parametrize("raw", ["", "abc", "0", "9", "2.5", "-1"])
def test_malformed_mmvq_env(tiny: Engine, monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(ENV_MMVQ, raw)
    with pytest.raises(EngineError, match=rf"{ENV_MMVQ}={raw!r} is malformed: expected an integer 1..8"):
        tiny.prefill([1, 2])
    with pytest.raises(EngineError, match=ENV_MMVQ):
        Engine("ds4-tiny")


@pytest.mark.parametrize("raw", ["", "yes", "true", "2", "on"])
def test_malformed_bands_env(tiny: Engine, monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(ENV_BANDS, raw)
    with pytest.raises(EngineError, match=rf"{ENV_BANDS}={raw!r} is malformed: expected \"1\" or \"0\""):
        tiny.prefill([1, 2])


def test_bad_mode_and_bands(tiny: Engine) -> None:
    with pytest.raises(EngineError, match=r"mode must be one of \['exact', 'approximate'\]"):
        tiny.prefill([1], mode="fast")
    with pytest.raises(EngineError, match="bands must be True, False or None"):
        tiny.prefill([1], bands="yes")


def test_unknown_model_lists_known() -> None:
    with pytest.raises(EngineError, match=r"unknown model 'ds4-huge': known models are \['ds4-gpu', 'ds4-mini', 'ds4-tiny'\]"):
        Engine("ds4-huge")


@pytest.mark.parametrize("kwargs, match", [
    ({"threads": 0}, "threads must be an integer"),
    ({"seed": -1}, "seed must be an integer"),
    ({"prefix_cache_slots": -2}, "prefix_cache_slots must be an integer"),
])
def test_bad_engine_arguments(kwargs, match: str) -> None:
    with pytest.raises(EngineError, match=match):
        Engine("ds4-tiny", **kwargs)


def test_bad_config_files(tmp_path) -> None:
    bad_json = tmp_path / "broken.json"
    bad_json.write_text("{not json")
    with pytest.raises(EngineError, match=r"broken.json: not valid JSON"):
        load_config(bad_json)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"base": "ds4-tiny", "d_model": 100}))
    with pytest.raises(EngineError, match=r"wrong.json: key 'd_model': expected a multiple of 32 in 32..16384, got 100"):
        load_config(wrong)
    typed = tmp_path / "typed.toml"
    typed.write_text('base = "ds4-tiny"\nn_layers = "four"\n')
    with pytest.raises(EngineError, match=r"typed.toml: key 'n_layers': expected an integer, got 'four'"):
        load_config(typed)
    ratios = tmp_path / "ratios.toml"
    ratios.write_text('base = "ds4-tiny"\nratios = [0, 2, 8, 4]\n')
    with pytest.raises(EngineError, match=r"key 'ratios': expected n_layers \(4\) entries, each 0 or 4..1024"):
        load_config(ratios)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"base": "ds4-tiny", "layers": 3}))
    with pytest.raises(EngineError, match=r"unknown key\(s\) \['layers'\]"):
        load_config(unknown)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"d_model": 64}))
    with pytest.raises(EngineError, match=r"missing key\(s\)"):
        load_config(partial)
    with pytest.raises(EngineError, match="cannot read config file"):
        load_config(tmp_path / "absent.toml")


def test_config_file_roundtrip(tmp_path) -> None:
    cfg = tmp_path / "small.toml"
    cfg.write_text('base = "ds4-tiny"\nn_layers = 2\nratios = [4, 16]\n')
    eng = Engine(cfg, threads=1)
    assert eng.config["name"] == "small" and eng.config["n_layers"] == 2
    assert eng.prefill([256, 1, 2, 3], chunk=4).logits.shape == (4, 258)
    assert eng.config_hash != Engine("ds4-tiny", threads=1).config_hash


def test_bad_snapshot(tiny: Engine) -> None:
    sess = tiny.session()
    with pytest.raises(EngineError, match="not a DS4-mini session snapshot"):
        sess.restore(b"garbage")
    other = Engine("ds4-tiny", seed=1, threads=1).session()
    other.prefill([256, 1])
    with pytest.raises(EngineError, match="different model or seed"):
        sess.restore(other.snapshot())
    good = tiny.session()
    good.prefill([256, 1])
    with pytest.raises(EngineError, match="truncated"):
        sess.restore(good.snapshot()[:-5])
    with pytest.raises(EngineError, match="decode needs a prefilled session"):
        tiny.session().decode_step()
