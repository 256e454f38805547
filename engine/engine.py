"""Engine: builds the DS4-mini model once and serves prefill / generate / sessions."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from . import _core
from .config import config_hash, load_config, q8_weight_bytes
from .errors import EngineError
from .options import (PrefillPlan, check_bands, check_chunk, check_mmvq, check_test_slowdown, env_bands,
                      env_mmvq_max_ncols, env_test_slowdown_pct, resolve)
from .prefix_cache import PrefixCache
from .results import GenerateResult, PrefillResult
from .session import Session
from .tokenizer import EOS, as_token_array, detokenize, prompt_tokens

MAX_THREADS = 256
DEVICES = ("cpu", "cuda")


def cuda_unavailable_reason() -> str | None:
    """None when Engine(device="cuda") can run here, else why not (no CUDA in this build, no
    driver, no GPU, not a Hopper GPU)."""
    return _core.cuda_unavailable_reason() or None


class Engine:
    """The embedded DS4-mini engine.

    Args:
        model: built-in config name (see MODEL_CONFIGS) or a .json/.toml config path.
        seed: weight seed (int >= 0).
        threads: worker threads (None: os.cpu_count()). Results never depend on it.
        bands, chunk, mmvq_max_ncols: default prefill options (see options.resolve).
        prefix_cache_slots: > 0 enables the prefix cache with that many snapshots.
        device: "cpu" (default) or "cuda" (the GPU backend, docs/gpu.md: weights built on the
            CPU, uploaded once, state on the GPU; q1 = bands bitwise on the GPU, CPU vs GPU not
            bitwise). "cuda" raises EngineError saying why when this build or machine has none.
        test_slowdown_pct: TEST ONLY (default: env DFLASH_DS4_TEST_SLOWDOWN_PCT, else 0):
            generate() busy-waits for this percentage of each measured prefill time and
            reports the inflated prefill time, so harness calibration can inject a known
            slowdown. Shown in build_info() as "test_only"; outputs are unchanged.
    """

    def __init__(self, model: str | Path = "ds4-mini", seed: int = 0, threads: int | None = None, *,
                 bands: bool | None = None, chunk: int | None = None, mmvq_max_ncols: int | None = None,
                 prefix_cache_slots: int = 0, test_slowdown_pct: float | None = None,
                 device: str = "cpu") -> None:
        if device not in DEVICES:
            raise EngineError(f"device must be one of {list(DEVICES)}, got {device!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise EngineError(f"seed must be an integer 0..2**63-1, got {seed!r}")
        if threads is None:
            threads = os.cpu_count() or 1
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
            raise EngineError(f"threads must be an integer 1..{MAX_THREADS} or None, got {threads!r}")
        if (isinstance(prefix_cache_slots, bool) or not isinstance(prefix_cache_slots, int)
                or prefix_cache_slots < 0):
            raise EngineError(f"prefix_cache_slots must be an integer >= 0, got {prefix_cache_slots!r}")
        self._defaults = {"bands": check_bands(bands), "chunk": check_chunk(chunk),
                          "mmvq_max_ncols": check_mmvq(mmvq_max_ncols)}
        env_bands()  # malformed environment values fail at construction, not first use
        env_mmvq_max_ncols()
        simd_why = _core.kernels.simd_path_env_error()
        if simd_why:
            raise EngineError(f"{simd_why}; got DQ_SIMD_PATH={os.environ.get('DQ_SIMD_PATH')!r}, "
                              f"this CPU has {_core.kernels.cpu_features()['paths']}")
        slowdown = check_test_slowdown(test_slowdown_pct)
        self._test_slowdown_pct = slowdown if slowdown is not None else (env_test_slowdown_pct() or 0.0)
        self._config = load_config(model)
        _check_memory(q8_weight_bytes(self._config))
        self._seed = seed
        self._hash = config_hash(self._config, seed)
        self._device = device
        if device == "cuda":
            why = cuda_unavailable_reason()
            if why:
                raise EngineError(f"device='cuda' is not available: {why}")
            try:
                self._model = _core.GpuModel({**self._config, "seed": seed}, threads)
            except ValueError as exc:  # e.g. not enough GPU memory
                raise EngineError(str(exc)) from None
        else:
            self._model = _core.Model({**self._config, "seed": seed}, threads)
        self._threads = threads
        self._cache = PrefixCache(prefix_cache_slots)

    # -- identity ---------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        return {**self._config, "seed": self._seed}

    @property
    def config_hash(self) -> str:
        return self._hash

    @property
    def weight_bytes_total(self) -> int:
        return int(self._model.weight_bytes_total)

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def build_seconds(self) -> float:
        return float(self._model.build_seconds)

    @property
    def device(self) -> str:
        return self._device

    def build_info(self) -> dict[str, Any]:
        info = build_info(threads=self._threads, test_slowdown_pct=self._test_slowdown_pct)
        info["device"] = self._device
        if self._device == "cuda":
            info["cuda"]["gpu"] = self._model.device_name
            info["cuda"]["upload_seconds"] = round(float(self._model.upload_seconds), 3)
        return info

    def _new_core_session(self) -> Any:
        if self._device == "cuda":
            return _core.GpuSession(self._model)
        return _core.Session(self._model)

    # -- requests ---------------------------------------------------------------------------
    def _plan(self, **call: Any) -> PrefillPlan:
        return resolve(call=call, ctor=self._defaults)

    def session(self) -> Session:
        return Session(self._new_core_session(), self._plan, self.config)

    def prefill(self, tokens: Any, *, chunk: int | None = None, bands: bool | None = None,
                mmvq_max_ncols: int | None = None, mode: str = "exact") -> PrefillResult:
        """Prefill `tokens` (ids) on a fresh state and return all-position logits and routes."""
        return self.session().prefill(tokens, chunk=chunk, bands=bands, mmvq_max_ncols=mmvq_max_ncols,
                                      mode=mode)

    def generate(self, prompt: Any, *, max_tokens: int = 16, chunk: int | None = None,
                 bands: bool | None = None, mmvq_max_ncols: int | None = None,
                 mode: str = "exact") -> GenerateResult:
        """Greedy generation. prompt: str (UTF-8, BOS prepended), bytes, or token ids (used as is).

        timings: prompt_tokens, generated_tokens, prefill_ns, decode_ns, band_widths
        {"1".."4": count}, weight_bytes_prefill, weight_bytes_decode, cache_hits (prompt tokens
        served from the prefix cache), mode, exact, stop.
        """
        plan = self._plan(chunk=chunk, bands=bands, mmvq_max_ncols=mmvq_max_ncols, mode=mode)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise EngineError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        toks = prompt_tokens(prompt, vocab=self._config["vocab"])
        ctx = self._config["ctx"]
        if len(toks) > ctx:
            raise EngineError(f"prompt too long: {len(toks)} tokens exceeds the context of {ctx} tokens")
        sess = self.session()
        hits = 0
        use_cache = self._cache.slots > 0 and not plan.approximate
        if use_cache:
            hits, snap = self._cache.lookup(toks)
            if snap is not None:
                sess.restore(snap)
        widths = {str(w): 0 for w in range(1, 5)}
        prefill_ns = prefill_bytes = 0
        exact = not plan.approximate
        if hits < len(toks):
            res = sess._prefill_array(as_token_array(toks[hits:]), plan)
            prefill_ns, prefill_bytes, exact = res.prefill_ns, res.weight_bytes, res.exact
            if self._test_slowdown_pct:  # TEST ONLY: a known, reported prefill slowdown
                prefill_ns += _busy_wait_ns(prefill_ns * self._test_slowdown_pct / 100.0)
            for w in res.band_widths:
                widths[str(w)] = widths.get(str(w), 0) + 1
            if use_cache and res.exact:
                self._cache.store(toks, sess.snapshot())
        dec = sess.decode(max_tokens)
        gen = [int(t) for t in dec["tokens"]]
        timings = {
            "prompt_tokens": len(toks), "generated_tokens": len(gen), "prefill_ns": prefill_ns,
            "decode_ns": int(dec["ns"]), "band_widths": widths, "weight_bytes_prefill": prefill_bytes,
            "weight_bytes_decode": int(dec["weight_bytes"]), "cache_hits": hits, "mode": plan.mode,
            "exact": exact, "stop": dec["stop"],
        }
        return GenerateResult(text=detokenize(gen), tokens=gen, prompt_tokens=toks, stop=dec["stop"],
                              timings=timings)

    def clear_prefix_cache(self) -> None:
        self._cache.clear()


def _check_memory(weight_bytes: int) -> None:
    """EngineError when the weights would not fit in 80% of the memory available now (building
    them anyway ends in the OOM killer, not an exception)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return  # not Linux, or no figure: nothing to check against
    if weight_bytes > 0.8 * avail:
        raise EngineError(f"the model needs {weight_bytes / 2**30:.2f} GiB of weights but only "
                          f"{avail / 2**30:.2f} GiB of memory is available")


def _busy_wait_ns(ns: float) -> int:
    """Spin (no sleep: the core stays busy, as real work would) for `ns` nanoseconds; returns
    the time actually spent, which the caller adds to the reported prefill time."""
    start = time.perf_counter_ns()
    end = start + int(ns)
    now = start
    while now < end:
        now = time.perf_counter_ns()
    return now - start


def build_info(threads: int | None = None, test_slowdown_pct: float | None = None) -> dict[str, Any]:
    """Build type, SIMD path, compile flags, sanitizer and CPU features of the loaded core.

    A TEST ONLY prefill slowdown (argument, else env DFLASH_DS4_TEST_SLOWDOWN_PCT) appears as
    "test_only": {"prefill_slowdown_pct", "note"}; the key is absent when there is none."""
    info: dict[str, Any] = {
        "build_type": _core.build_type(),
        "simd_path": _core.kernels.simd_path(),
        "flags": ["-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra"],
        "sanitize": bool(_core.sanitize()),
        "cuda": {"built": bool(_core.cuda_built()), "unavailable_reason": cuda_unavailable_reason()},
        "threads": threads if threads is not None else (os.cpu_count() or 1),
        "eos": EOS,
    }
    try:
        info["cpu_features"] = dict(_core.kernels.cpu_features())
    except Exception:  # noqa: BLE001 - informational only
        info["cpu_features"] = {}
    slowdown = test_slowdown_pct if test_slowdown_pct is not None else env_test_slowdown_pct()
    if slowdown:
        info["test_only"] = {"prefill_slowdown_pct": slowdown,
                             "note": "TEST ONLY: prefill time inflated by a busy-wait "
                                     "(DFLASH_DS4_TEST_SLOWDOWN_PCT); never a real measurement"}
    return info
