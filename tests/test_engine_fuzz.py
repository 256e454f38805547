"""The Python-facing engine API under fuzzed input: wrong dtypes and shapes, huge lengths,
out-of-range options, and config files with NaN/Inf, negative or huge values. Every call
either works or raises EngineError; nothing else escapes and nothing crashes the process.
(tests/test_engine_errors.py holds the named cases with their exact messages.)"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_qualify.engine import Engine, EngineError
from dflash_qualify.engine.config import KEYS, MODEL_CONFIGS, load_config, q8_weight_bytes

SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
SMALL_WEIGHTS = 8 << 20   # build engines from fuzzed configs only up to this size (test time)

NUMBERS = st.one_of(st.integers(-2**70, 2**70), st.integers(-3, 300),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 2**63, -1]))
ODD = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.binary(max_size=4),
                st.lists(st.integers(-2, 300), max_size=3), st.dictionaries(st.text(max_size=2),
                                                                            st.integers(), max_size=2))
DTYPES = ["int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32", "float64",
          "bool", "complex64", "object"]


@st.composite
def token_inputs(draw):
    """Anything a caller might pass as tokens: lists, arrays of every dtype and shape, junk."""
    kind = draw(st.sampled_from(["list", "array", "2d", "0d", "str", "bytes", "odd", "empty"]))
    values = draw(st.lists(st.one_of(st.integers(-5, 300), st.sampled_from([2**31, 2**63 - 1,
                                                                             -2**63])),
                           min_size=1, max_size=40))
    if kind == "list":
        return values + draw(st.lists(st.one_of(NUMBERS, ODD), max_size=2))
    if kind in ("array", "2d", "0d"):
        dtype = draw(st.sampled_from(DTYPES))
        if dtype in ("object", "float16", "float32", "float64", "complex64", "bool"):
            with np.errstate(all="ignore"):   # float16 overflows to inf: a fine input too
                arr = np.array(values, dtype=object).astype(dtype)
        else:  # wrap out-of-range ids into the dtype's range
            info = np.iinfo(dtype)
            arr = np.array([min(max(v, info.min), info.max) for v in values], dtype=dtype)
        if dtype.startswith("float") and draw(st.booleans()):
            arr[0] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 0.5]))
        if kind == "2d":
            return arr[: len(arr) // 2 * 2].reshape(-1, 2) if len(arr) > 1 else arr.reshape(1, 1)
        return arr[0] if kind == "0d" else arr
    if kind == "str":
        return draw(st.text(max_size=40))
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    if kind == "empty":
        return draw(st.sampled_from([[], np.array([], dtype=np.int32), "", b""]))
    return draw(ODD)


OPTION = st.one_of(st.none(), st.integers(-3, 70), st.sampled_from([2**63, 1.5, "4", True]))


@pytest.fixture(scope="module")
def tiny() -> Engine:
    return Engine("ds4-tiny", threads=1)


@settings(max_examples=150, **SETTINGS)
@given(tokens=token_inputs(), chunk=OPTION, mmvq=OPTION,
       bands=st.one_of(st.none(), st.booleans(), st.sampled_from([1, "yes"])),
       mode=st.sampled_from(["exact", "approximate", "fast", "", 3]))
def test_fuzzed_prefill(tiny, tokens, chunk, mmvq, bands, mode):
    try:
        result = tiny.prefill(tokens, chunk=chunk, bands=bands, mmvq_max_ncols=mmvq, mode=mode)
    except EngineError:
        return
    assert result.logits.shape[1] == 258 and np.isfinite(result.logits).all()


@settings(max_examples=100, **SETTINGS)
@given(prompt=st.one_of(token_inputs(), st.text(max_size=60)),
       max_tokens=st.one_of(st.integers(-3, 12), st.sampled_from([2**31, 2**63, 10**30, 1.5,
                                                                  "3", None, True])))
def test_fuzzed_generate(tiny, prompt, max_tokens):
    try:
        result = tiny.generate(prompt, max_tokens=max_tokens)
    except EngineError:
        return
    assert len(result.tokens) <= tiny.config["ctx"]


@pytest.mark.parametrize("n", [513, 10**6])
def test_huge_lengths_are_refused(tiny, n):
    with pytest.raises(EngineError, match="prompt too long"):
        tiny.prefill(np.ones(n, dtype=np.int32))
    with pytest.raises(EngineError, match="prompt too long"):
        tiny.generate("x" * n, max_tokens=1)


@settings(max_examples=120, **SETTINGS)
@given(edits=st.dictionaries(st.sampled_from([*KEYS, "base", "bogus"]),
                             st.one_of(NUMBERS, ODD, st.lists(NUMBERS, max_size=5)),
                             min_size=1, max_size=3),
       fmt=st.sampled_from(["json", "toml"]))
def test_fuzzed_config_files(tmp_path_factory, edits, fmt):
    cfg = {"base": "ds4-tiny", **edits}
    path = tmp_path_factory.mktemp("cfg") / f"fuzz.{fmt}"
    text = _toml(cfg) if fmt == "toml" else json.dumps(cfg, default=repr)  # NaN/Infinity too
    if text is None:
        return
    path.write_text(text)
    try:
        config = load_config(path)
    except EngineError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    for key in ("rope_theta", "norm_eps", "routed_scale", "swiglu_limit"):
        assert math.isfinite(config[key]) and config[key] > 0
    if q8_weight_bytes(config) <= SMALL_WEIGHTS:
        engine = Engine(path, threads=1)
        assert np.isfinite(engine.prefill([256, 1, 2, 3]).logits).all()


def _toml(cfg: dict) -> str | None:
    """A TOML document for flat scalar/list values (nan/inf as TOML spells them); None if
    a value has no TOML form here."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v) if -2**63 <= v < 2**63 else None
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
                else repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            parts = [value(x) for x in v]
            return None if None in parts else "[" + ", ".join(parts) + "]"
        return None
    lines = []
    for k, v in cfg.items():
        rendered = value(v)
        if rendered is None:
            return None
        lines.append(f"{k} = {rendered}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("key, value", [
    ("rope_theta", "nan"), ("norm_eps", "inf"), ("routed_scale", "-inf"), ("swiglu_limit", "-1.0"),
    ("d_model", "-32"), ("n_layers", "9223372036854775807"), ("ctx", "0"), ("n_experts", "100000"),
])
def test_config_nan_inf_negative_huge(tmp_path, key, value):
    path = tmp_path / "bad.toml"
    path.write_text(f'base = "ds4-tiny"\n{key} = {value}\n')
    with pytest.raises(EngineError, match=rf"bad.toml: key '{key}': expected "):
        load_config(path)


def test_config_in_range_but_terabytes_of_weights_is_refused(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({**MODEL_CONFIGS["ds4-tiny"], "d_model": 16384, "d_ff": 16384,
                                "n_experts": 256}))
    with pytest.raises(EngineError, match=r"huge.json: the config needs 819.2 GiB of Q8_0 "
                                          r"weights, more than the 16 GiB"):
        Engine(path)
