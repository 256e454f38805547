"""An in-process target with scripted timings, responses and failures, for runner tests."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .base import Request, Response, Target, TargetError


@dataclass
class FakeScript:
    """What one fake arm does. Request numbers count every run_once call of the arm from 0.

    prefill_ms: per-request prefill time (cycled), or a function of the request number.
    response: the response bytes, or a function of the request number.
    fail_prepare / fail_at / cache_hit_at / die_at: scripted failures.
    """

    prefill_ms: list[float] | Callable[[int], float] = field(default_factory=lambda: [10.0])
    decode_ms: float = 2.0
    prompt_tokens: int = 64
    response: bytes | Callable[[int], bytes] = b"same answer"
    fail_prepare: str | None = None
    fail_at: int | None = None          # run_once raises TargetError("engine error ...")
    die_at: int | None = None           # run_once raises TargetError("worker exited ...")
    cache_hit_at: int | None = None     # that request reports cache_hits = 1
    on_request: Callable[[int], None] | None = None   # hook, e.g. to raise KeyboardInterrupt
    config_hash: str = "fake"


class FakeTarget(Target):
    """A target that never starts a process; records what the runner asked of it."""

    def __init__(self, arm_id: str, script: FakeScript | None = None) -> None:
        self.arm_id = arm_id
        self.script = script or FakeScript()
        self.requests: list[Request] = []
        self.prepared = False
        self.torn_down = False

    def prepare(self) -> dict[str, Any]:
        if self.script.fail_prepare:
            raise TargetError(f"arm {self.arm_id}: {self.script.fail_prepare}")
        self.prepared = True
        return {"command": None, "env": {}, "engine_build": {"fake": True},
                "model": {"name": "fake"}, "config_hash": self.script.config_hash}

    def run_once(self, request: Request) -> Response:
        n = len(self.requests)
        self.requests.append(request)
        s = self.script
        if s.on_request is not None:
            s.on_request(n)
        if s.fail_at == n:
            raise TargetError(f"arm {self.arm_id}: request {request.id}: engine error "
                              f"FakeError: scripted failure")
        if s.die_at == n:
            raise TargetError(f"arm {self.arm_id}: worker exited before the response to "
                              f"request {request.id} (exit code -9)")
        pf = s.prefill_ms(n) if callable(s.prefill_ms) else s.prefill_ms[n % len(s.prefill_ms)]
        data = s.response(n) if callable(s.response) else s.response
        return Response(data=data, prompt_tokens=s.prompt_tokens,
                        generated_tokens=max(1, len(data)), prefill_ms=float(pf),
                        decode_ms=s.decode_ms, cache_hits=1 if s.cache_hit_at == n else 0,
                        tokens=list(data), band_widths={"1": s.prompt_tokens},
                        weight_bytes=1000, timings={"prefill_ms": pf})

    def teardown(self) -> str:
        self.torn_down = True
        return f"fake worker {self.arm_id}: {len(self.requests)} requests\n"


def fake_factory(scripts: dict[str, FakeScript] | None = None,
                 made: list[FakeTarget] | None = None) -> Callable[[dict, dict], FakeTarget]:
    """A make_target(protocol, arm) for the runner: FakeTargets scripted per arm id."""
    scripts = scripts or {}

    def make(protocol: dict, arm: dict) -> FakeTarget:
        target = FakeTarget(arm["id"], scripts.get(arm["id"]))
        if made is not None:
            made.append(target)
        return target

    return make
