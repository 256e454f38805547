"""The target seam: what the runner needs from an engine under test (prepare / run_once / teardown)."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from ..errors import RunFailed


class TargetError(RunFailed):
    """A target failed in a named way (did not start, died, timed out, bad output, engine error)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


@dataclass(frozen=True)
class Request:
    """One generation request. Exactly one of `text` / `tokens` is set."""

    id: str
    prompt_id: str
    max_tokens: int
    timeout_s: float
    text: str | None = None
    tokens: list[int] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, Any] | None = None  # worker-protocol `trace` object (exactness runs only)


@dataclass(frozen=True)
class Response:
    """What a target returned for one request, with the engine's own timings."""

    data: bytes                      # the generated continuation only, raw bytes
    prompt_tokens: int
    generated_tokens: int
    prefill_ms: float
    decode_ms: float
    cache_hits: int | None           # None: the target does not report cache use
    tokens: list[int] | None = None
    token_texts: list[str] | None = None  # each token's text, aligned with tokens (if known)
    band_widths: dict[str, int] | None = None
    weight_bytes: int | None = None
    timings: dict[str, Any] = field(default_factory=dict)  # everything the target reported
    timing_source: str = "engine"    # "engine" | "server" (llama.cpp timings) | "client-side TTFT"
    response_source: str = "response_b64"  # which field the bytes came from (samples say so)
    trace: dict[str, Any] | None = None  # the worker's trace summary {path, sha256, records, bytes}


class Target(abc.ABC):
    """One arm's engine instance. Lifecycle: prepare() once, run_once() per request, teardown().

    teardown() must be safe to call at any point (also before or after a failed prepare, and
    twice), must leave no process behind, and never raises.
    """

    arm_id: str

    @abc.abstractmethod
    def prepare(self) -> dict[str, Any]:
        """Start the engine and wait until it is ready.

        Returns:
            Facts for the environment record: ``command`` (argv list or None), ``env`` (the
            variables this arm set/unset), ``engine_build``, ``model``, ``config_hash``.
        Raises:
            TargetError: the engine did not start or did not become ready in time.
        """

    @abc.abstractmethod
    def run_once(self, request: Request) -> Response:
        """Send one request and wait for its response (at most request.timeout_s seconds).

        Raises:
            TargetError: timeout, the engine died, an engine error, or malformed output.
        """

    @abc.abstractmethod
    def teardown(self) -> str:
        """Stop the engine (gracefully, then TERM, then KILL) and return its log text."""

    def __enter__(self) -> "Target":
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()
