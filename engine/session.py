"""Session: explicit, inspectable engine state (prefill, decode, snapshot/restore, state dump)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from .errors import EngineError
from .options import APPROX_WIDTH, PrefillPlan
from .results import PrefillResult
from .tokenizer import as_token_array

class Session:
    """One sequence over an Engine's model. Create with Engine.session().

    Args (given by Engine.session):
        core: the C++ session over the engine's model (_core.Session or _core.GpuSession).
        plan: resolves one call's prefill arguments against the engine's defaults.
        config: the model config (vocab, ctx, ...).
    """

    def __init__(self, core: Any, plan: Callable[..., PrefillPlan], config: Mapping[str, Any]) -> None:
        self._core = core
        self._plan = plan
        self._config = config

    @property
    def pos(self) -> int:
        """Tokens consumed so far."""
        return self._core.pos

    def prefill(self, tokens: Any, *, chunk: int | None = None, bands: bool | None = None,
                mmvq_max_ncols: int | None = None, mode: str = "exact") -> PrefillResult:
        """Append `tokens` to this session (same options and result as Engine.prefill)."""
        plan = self._plan(chunk=chunk, bands=bands, mmvq_max_ncols=mmvq_max_ncols, mode=mode)
        arr = as_token_array(tokens, vocab=self._config["vocab"])
        return self._prefill_array(arr, plan)

    def _prefill_array(self, arr: np.ndarray, plan: PrefillPlan) -> PrefillResult:
        ctx = self._config["ctx"]
        if self.pos + arr.size > ctx:
            raise EngineError(f"prompt too long: {self.pos} cached + {arr.size} new tokens exceeds the "
                              f"context of {ctx} tokens")
        try:
            out = self._core.prefill(arr, plan.chunk, plan.mmvq_max_ncols, plan.approximate, APPROX_WIDTH)
        except ValueError as exc:  # C++ re-checks; keep the single exception type
            raise EngineError(str(exc)) from None
        mmq = [bool(x) for x in out["step_mmq"]]
        return PrefillResult(
            logits=out["logits"], band_widths=list(out["widths"]), route_ids=out["route_ids"],
            route_weights=out["route_weights"], prefill_ns=int(out["ns"]), weight_bytes=int(out["weight_bytes"]),
            kernel_per_step=["mmq" if m else "mmvq" for m in mmq],
            exact=not plan.approximate and not any(mmq), mode=plan.mode,
            matmul_calls=int(out["matmul_calls"]), op_ns=dict(out["op_ns"]),
            f32_weight_bytes=int(out["f32_weight_bytes"]))

    def decode_step(self) -> int:
        """Emit the greedy next token and feed it (one q1 step). Returns the token id."""
        try:
            return int(self._core.decode_step())
        except ValueError as exc:
            raise EngineError(str(exc)) from None

    def decode(self, max_tokens: int) -> dict[str, Any]:
        """Greedy decode up to max_tokens (EOS stops, not included). Returns tokens, stop, ns,
        weight_bytes."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise EngineError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        # no session decodes past its context, so a larger budget means "to the end" (and a
        # Python int beyond C++ int range would otherwise escape as a TypeError)
        max_tokens = min(max_tokens, self._config["ctx"])
        try:
            return self._core.decode(max_tokens)
        except ValueError as exc:
            raise EngineError(str(exc)) from None

    def snapshot(self) -> bytes:
        """The whole state as bytes (restorable into any session of the same model and seed)."""
        return self._core.snapshot()

    def restore(self, snap: bytes | bytearray | memoryview) -> None:
        if not isinstance(snap, (bytes, bytearray, memoryview)):
            raise EngineError(f"restore expects bytes from snapshot(), got {type(snap).__name__}")
        try:
            self._core.restore(bytes(snap))
        except ValueError as exc:
            raise EngineError(f"cannot restore snapshot: {exc}") from None

    def state(self) -> dict[str, np.ndarray]:
        """Copies of every state array: per layer kv_window, comp_kv, comp_score, compressed;
        hc_streams (last token), last_logits, pos."""
        return dict(self._core.state())
