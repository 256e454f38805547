"""Result records returned by Engine.prefill and Engine.generate."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PrefillResult:
    """One prefill call. logits float32 [n_tokens, vocab] for every position; route_ids int32 and
    route_weights float32 [n_layers, n_tokens, top_k]; prefill_ns measured inside the engine
    (steady_clock); weight_bytes counted per issued matmul call (Q8_0 matrices); f32_weight_bytes the
    F32 weight rows read besides them (HC dyn projections and router, once per step; CPU engine only,
    0 on the GPU backend); kernel_per_step "mmvq"/"mmq"; exact is True when mode is exact and no call
    used MMQ."""

    logits: np.ndarray
    band_widths: list[int]
    route_ids: np.ndarray
    route_weights: np.ndarray
    prefill_ns: int
    weight_bytes: int
    kernel_per_step: list[str]
    exact: bool
    mode: str
    matmul_calls: int = 0
    op_ns: dict[str, int] = field(default_factory=dict)
    f32_weight_bytes: int = 0

    @property
    def weights_read_bytes(self) -> int:
        """Every weight byte the prefill read: the Q8_0 matrices plus the F32 projection rows."""
        return self.weight_bytes + self.f32_weight_bytes


@dataclass(frozen=True)
class GenerateResult:
    """One greedy generation. text: bytes of the generated continuation only; tokens: generated
    ids (EOS not included); prompt_tokens: the prompt ids as fed; timings: see Engine.generate."""

    text: bytes
    tokens: list[int]
    prompt_tokens: list[int]
    stop: str
    timings: dict[str, Any]
