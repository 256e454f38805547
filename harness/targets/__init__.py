"""Targets: how the runner reaches an engine (one instance per arm). Register a target kind in
TARGETS (its factory) and TARGET_OPTIONS (its [target] parser, harness/targets/options.py)."""
from __future__ import annotations

from typing import Any, Callable

from ..errors import UsageError
from .base import Request, Response, Target, TargetError
from .options import OPTIONS as TARGET_OPTIONS
from .worker import WorkerTarget, embedded_argv, resolve_pin_cpu

__all__ = ["Request", "Response", "Target", "TargetError", "WorkerTarget", "make_target",
           "TARGETS", "TARGET_OPTIONS"]


def _embedded(protocol: dict[str, Any], arm: dict[str, Any]) -> Target:
    return WorkerTarget(arm["id"], embedded_argv(protocol["target"], arm), arm["env"],
                        start_timeout_s=protocol["timeouts"]["start_s"],
                        pin_cpu=resolve_pin_cpu(protocol["target"].get("pin_cpu")))


def _command(protocol: dict[str, Any], arm: dict[str, Any]) -> Target:
    """Any program speaking the worker protocol; an arm may name its own program."""
    argv = arm.get("command") or protocol["target"]["command"]
    return WorkerTarget(arm["id"], argv, arm["env"],
                        start_timeout_s=protocol["timeouts"]["start_s"],
                        pin_cpu=resolve_pin_cpu(protocol["target"].get("pin_cpu")))


def _http(kind: str) -> Callable[[dict[str, Any], dict[str, Any]], Target]:
    """llamacpp / openai: a server started per arm from a command template, or an attached url."""
    def make(protocol: dict[str, Any], arm: dict[str, Any]) -> Target:
        if kind == "llamacpp":  # imported on use: the embedded path never loads aiohttp
            from .llamacpp import LlamaCppTarget as cls
        else:
            from .openai import OpenAITarget as cls
        t = protocol["target"]
        command = arm.get("command") or t["command"]
        return cls(arm["id"], command=command,
                   url=None if command else (arm.get("url") or t["url"]),
                   env=arm["env"], health_path=t["health_path"],
                   start_timeout_s=protocol["timeouts"]["start_s"],
                   extra_body=t["extra_body"], model=t["model"],
                   cache_cold=protocol["cache"] == "cold")
    return make


# target kind (protocol [target].kind) -> factory(protocol, arm) -> a fresh Target; the same
# kind's [target] parser is TARGET_OPTIONS[kind] (harness/targets/options.py)
TARGETS: dict[str, Callable[[dict[str, Any], dict[str, Any]], Target]] = {
    "embedded": _embedded,
    "command": _command,
    "llamacpp": _http("llamacpp"),
    "openai": _http("openai"),
}


def make_target(protocol: dict[str, Any], arm: dict[str, Any]) -> Target:
    """A fresh, unprepared target for one arm of a resolved protocol."""
    kind = protocol["target"]["kind"]
    factory = TARGETS.get(kind)
    if factory is None:
        raise UsageError(f"target kind {kind!r} is not supported by this version",
                         field="target.kind")
    return factory(protocol, arm)
